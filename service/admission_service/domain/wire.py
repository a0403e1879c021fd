"""Provider wire formats for a derived request (SPEC §7).

``render`` turns the derived messages into the body fragment a harness posts as-is. On a route
that is not in-history a body never carries a non-leading system message; the projection rule
guarantees the surface never asks for one, and rendering refuses rather than send one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from admission_service.domain.errors import WireFormatError
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
)

Json = dict[str, Any]


class WireFormat(StrEnum):
    NEUTRAL = "neutral"
    OPENAI_CHAT = "openai_chat"
    OPENAI_RESPONSES = "openai_responses"
    ANTHROPIC_MESSAGES = "anthropic_messages"


def render(
    messages: Sequence[Message], wire: WireFormat, *, in_history: bool, offset: int = 0
) -> str:
    """The body fragment for ``wire`` ('' for NEUTRAL, whose typed messages are the answer).

    ``offset`` is the index of ``messages[0]`` in the whole request: a DELTA renders only the
    messages after a held prefix (OpenAI formats only; their items follow the messages).
    """
    if wire is WireFormat.NEUTRAL:
        return ""
    if offset and wire is WireFormat.ANTHROPIC_MESSAGES:
        raise ValueError("an Anthropic Messages body does not extend by appending")
    for index, message in enumerate(messages, start=offset):
        if message.role is Role.SYSTEM:
            if not message.text:
                raise WireFormatError("empty in-history system update")
            if index > 0 and not in_history:
                raise WireFormatError(
                    "a non-leading system message on a route that is not in-history"
                )
    if wire is WireFormat.OPENAI_CHAT:
        body = _openai_chat(messages)
    elif wire is WireFormat.OPENAI_RESPONSES:
        body = _openai_responses(messages, offset)
    else:
        body = _anthropic_messages(messages)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def _tool_result_text(block: ToolResult) -> str:
    return "".join(inner.text for inner in block.content if isinstance(inner, Text))


def _openai_chat(messages: Sequence[Message]) -> Json:
    out: list[Json] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            out.append({"role": "system", "content": message.text})
        elif message.role is Role.USER:
            out.append({"role": "user", "content": _openai_user_content(message)})
        elif message.role is Role.ASSISTANT:
            out.append(_openai_assistant(message))
        else:
            for block in message.content:
                assert isinstance(block, ToolResult)
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.call_id,
                        "content": _tool_result_text(block),
                    }
                )
    return {"messages": out}


def _openai_user_content(message: Message) -> str | list[Json]:
    if len(message.content) == 1 and isinstance(message.content[0], Text):
        return message.content[0].text
    parts: list[Json] = []
    for block in message.content:
        if isinstance(block, Text):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, Image):
            parts.append({"type": "image_url", "image_url": {"url": block.uri}})
    return parts


def _openai_assistant(message: Message) -> Json:
    text = "".join(b.text for b in message.content if isinstance(b, Text))
    reasoning = "".join(b.text for b in message.content if isinstance(b, Reasoning))
    entry: Json = {"role": "assistant", "content": text or None}
    if reasoning:
        entry["reasoning_content"] = reasoning
    calls = message.tool_calls()
    if calls:
        entry["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for call in calls
        ]
    return entry


def _openai_responses(messages: Sequence[Message], offset: int = 0) -> Json:
    items: list[Json] = []
    for index, message in enumerate(messages, start=offset):
        if message.role is Role.SYSTEM:
            role = "system" if index == 0 else "developer"
            items.append({"role": role, "content": message.text})
        elif message.role is Role.USER:
            items.append({"role": "user", "content": _responses_user_content(message)})
        elif message.role is Role.ASSISTANT:
            text = "".join(b.text for b in message.content if isinstance(b, Text))
            if text:
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text}],
                    }
                )
            items.extend(
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments_json,
                }
                for call in message.tool_calls()
            )
        else:
            for block in message.content:
                assert isinstance(block, ToolResult)
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": block.call_id,
                        "output": _tool_result_text(block),
                    }
                )
    return {"input": items}


def _responses_user_content(message: Message) -> list[Json]:
    parts: list[Json] = []
    for block in message.content:
        if isinstance(block, Text):
            parts.append({"type": "input_text", "text": block.text})
        elif isinstance(block, Image):
            parts.append({"type": "input_image", "image_url": block.uri})
    return parts


def _anthropic_messages(messages: Sequence[Message]) -> Json:
    """Head to top-level ``system``; later system messages after the user/tool-result turn.

    A later system message is held until just before the next assistant message (or the end),
    so a tool_result still follows its tool_use, and it needs a user turn before it.
    """
    system: str | None = None
    out: list[Json] = []
    pending: list[str] = []

    def flush() -> None:
        if not pending:
            return
        if not out or out[-1]["role"] != "user":
            raise WireFormatError("system update without a preceding user or tool-result turn")
        out.extend(
            {"role": "system", "content": [{"type": "text", "text": text}]} for text in pending
        )
        pending.clear()

    for message in messages:
        if message.role is Role.SYSTEM:
            if not out and system is None:
                system = message.text
            else:
                pending.append(message.text)
        elif message.role is Role.ASSISTANT:
            flush()
            out.append({"role": "assistant", "content": _anthropic_assistant(message)})
        elif message.role is Role.USER:
            out.append({"role": "user", "content": _anthropic_user_content(message.content)})
        else:
            out.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": block.call_id,
                            "content": _anthropic_user_content(block.content),
                            "is_error": block.is_error,
                        }
                        for block in message.content
                        if isinstance(block, ToolResult)
                    ],
                }
            )
    flush()
    body: Json = {"messages": out}
    if system is not None:
        body["system"] = system
    return body


def _anthropic_user_content(content: Sequence[object]) -> list[Json]:
    parts: list[Json] = []
    for block in content:
        if isinstance(block, Text):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, Image):
            parts.append({"type": "image", "source": {"type": "url", "url": block.uri}})
    return parts


def _anthropic_assistant(message: Message) -> list[Json]:
    parts: list[Json] = []
    for block in message.content:
        if isinstance(block, Text):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolCall):
            parts.append(
                {
                    "type": "tool_use",
                    "id": block.call_id,
                    "name": block.name,
                    "input": json.loads(block.arguments_json or "{}"),
                }
            )
    return parts
