"""The providers' documented acceptance rules that their SDK types cannot express, as code.

Each function returns every violation it finds in a body (empty: the provider accepts it). The
rule each check encodes, and the documentation it comes from, is listed in
docs/WIRE_FORMATS.md under the same names.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

Json = dict[str, Any]
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
THINKING = {"thinking", "redacted_thinking"}
ANTHROPIC_MEDIA_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}


def _tool_names(names: list[str]) -> list[str]:
    return [
        f"tool name {name!r} outside ^[a-zA-Z0-9_-]{{1,64}}$"
        for name in names
        if not TOOL_NAME.fullmatch(name)
    ]


def openai_chat(body: Json, *, provider: str, in_history: bool) -> list[str]:
    problems: list[str] = []
    messages: list[Json] = body["messages"]
    open_calls: list[str] = []  # calls of the last assistant still waiting for their tool message
    for index, message in enumerate(messages):
        role = message["role"]
        where = f"messages[{index}]"
        if role != "tool" and open_calls:
            problems.append(f"{where}: tool calls {open_calls} not followed by their tool messages")
            open_calls = []
        if role == "system":
            if not message["content"]:
                problems.append(f"{where}: empty system message")
            if index > 0 and not in_history:
                problems.append(
                    f"{where}: a later system message on a route that is not in-history"
                )
        elif role == "assistant":
            calls = [call["id"] for call in message.get("tool_calls", [])]
            if message.get("content") is None and not calls:
                problems.append(f"{where}: an assistant message needs content or tool_calls")
            if "reasoning_content" in message and provider != "deepseek":
                problems.append(
                    f"{where}: reasoning_content is DeepSeek's field, not {provider!r}'s"
                )
            open_calls = calls
        elif role == "tool":
            if message["tool_call_id"] not in open_calls:
                problems.append(f"{where}: tool message answers no call of the assistant before it")
            else:
                open_calls.remove(message["tool_call_id"])
    if open_calls:
        problems.append(f"the request ends with tool calls {open_calls} and no tool messages")
    problems += _tool_names([tool["function"]["name"] for tool in body.get("tools", [])])
    return problems


def openai_responses(body: Json, *, in_history: bool) -> list[str]:
    problems: list[str] = []
    items: list[Json] = body["input"]
    open_calls: list[str] = []
    for index, item in enumerate(items):
        kind = item.get("type", "message")
        where = f"input[{index}]"
        if kind == "function_call":
            open_calls.append(item["call_id"])
            continue
        if kind == "reasoning":
            # "Item of type 'reasoning' was provided without its required following item."
            following = items[index + 1] if index + 1 < len(items) else {}
            if following.get("type", "message") not in {
                "reasoning",
                "function_call",
                "message",
            } or (
                following.get("type", "message") == "message"
                and following.get("role") != "assistant"
            ):
                problems.append(f"{where}: a reasoning item without the item that followed it")
            if not item["id"]:
                problems.append(f"{where}: a reasoning item needs its id")
            continue
        if kind == "function_call_output":
            if item["call_id"] not in open_calls:
                problems.append(f"{where}: output for no preceding function_call")
            else:
                open_calls.remove(item["call_id"])
            for part in item["output"] if isinstance(item["output"], list) else []:
                if part["type"] == "input_image" and "detail" not in part:
                    problems.append(f"{where}: input_image without detail")
            continue
        if open_calls:
            problems.append(f"{where}: function calls {open_calls} have no output before this item")
            open_calls = []
        role = item["role"]
        if role == "system" and index > 0:
            problems.append(f"{where}: a later instruction must be role developer")
        if role == "developer" and not in_history:
            problems.append(f"{where}: a later system message on a route that is not in-history")
        if role in {"system", "developer"} and not item["content"]:
            problems.append(f"{where}: empty {role} message")
        if role == "assistant" and not isinstance(item["content"], str):
            problems.append(f"{where}: assistant history goes as an input message with text")
        for part in item["content"] if isinstance(item["content"], list) else []:
            if part["type"] == "input_image" and "detail" not in part:
                problems.append(f"{where}: input_image without detail")
    if open_calls:
        problems.append(f"the request ends with function calls {open_calls} and no outputs")
    problems += _tool_names([tool["name"] for tool in body.get("tools", [])])
    return problems


def anthropic_messages(body: Json, *, provider: str, in_history: bool) -> list[str]:
    problems: list[str] = []
    if "system" in body and not body["system"]:
        problems.append("system: empty top-level system prompt")
    turns = [m for m in body["messages"] if m["role"] != "system"]
    if turns and turns[0]["role"] != "user":
        problems.append("messages: the first turn must be a user turn")
    for index, message in enumerate(body["messages"]):
        where = f"messages[{index}]"
        content = message["content"]
        if isinstance(content, list) and not content:
            problems.append(f"{where}: empty content")
        problems += _anthropic_blocks(content, provider, where)
        if message["role"] == "system":
            if not in_history:
                problems.append(f"{where}: a system message on a route that is not in-history")
            before = body["messages"][index - 1]["role"] if index else None
            after = (
                body["messages"][index + 1]["role"] if index + 1 < len(body["messages"]) else None
            )
            if before not in {"user", "system"} or after not in {"assistant", "system", None}:
                problems.append(
                    f"{where}: a system update goes after a user turn, before the assistant"
                )
    for index, (first, second) in enumerate(itertools.pairwise(turns)):
        if first["role"] == second["role"]:
            problems.append(f"turns {index} and {index + 1}: roles must alternate")
    for index, message in enumerate(turns):
        if message["role"] != "assistant":
            continue
        kinds = [b["type"] for b in message["content"]]
        thinking = [kind in THINKING for kind in kinds]
        if thinking != sorted(thinking, reverse=True):
            problems.append(f"turn {index}: thinking blocks must open the assistant turn {kinds}")
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if not uses:
            continue
        following = turns[index + 1]["content"] if index + 1 < len(turns) else []
        results = [b["tool_use_id"] for b in following if b["type"] == "tool_result"]
        leading = [b["type"] for b in following][: len(results)]
        if sorted(results) != sorted(uses):
            problems.append(
                f"turn {index}: tool_use {uses} answered by {results} in the next user turn"
            )
        elif set(leading) != {"tool_result"}:
            problems.append(f"turn {index + 1}: tool_result blocks must come first")
    for tool in body.get("tools", []):
        if tool["input_schema"].get("type") != "object":
            problems.append(f"tool {tool['name']!r}: input_schema must be an object schema")
    problems += _tool_names([tool["name"] for tool in body.get("tools", [])])
    return problems


def _anthropic_blocks(content: Any, provider: str, where: str) -> list[str]:
    if isinstance(content, str):
        return [] if content else [f"{where}: empty text"]
    problems: list[str] = []
    for index, block in enumerate(content):
        at = f"{where}.content[{index}]"
        kind = block["type"]
        if kind == "text" and not block["text"]:
            problems.append(f"{at}: empty text block")
        elif kind == "thinking" and not block.get("signature"):
            problems.append(f"{at}: a thinking block needs its signature")
        elif kind == "redacted_thinking" and not block["data"]:
            problems.append(f"{at}: a redacted_thinking block needs its data")
        elif kind == "image":
            problems += _anthropic_image(block["source"], provider, at)
        elif kind == "tool_result":
            problems += _anthropic_blocks(block.get("content", []), provider, at)
    return problems


def _anthropic_image(source: Json, provider: str, where: str) -> list[str]:
    problems = []
    if provider == "deepseek":
        problems.append(f"{where}: DeepSeek's Anthropic API takes no image blocks")
    if source["type"] == "base64" and source["media_type"] not in ANTHROPIC_MEDIA_TYPES:
        problems.append(f"{where}: media type {source['media_type']!r}")
    if source["type"] == "url" and not source["url"].startswith(("https://", "http://")):
        problems.append(f"{where}: a url source takes an http(s) URL, not {source['url'][:16]!r}")
    return problems
