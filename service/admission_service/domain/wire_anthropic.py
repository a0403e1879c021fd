"""Anthropic's Messages API ``system``, ``messages`` and ``tools`` (docs/WIRE_FORMATS.md).

The head goes to the top-level ``system``. A later system message is held until just before the
next assistant message (or the end) and needs a user turn before it, so a ``tool_result`` still
follows its ``tool_use``. Consecutive user content (a user message after tool results, the
results of parallel calls) is one user message, tool results first, as the API requires: every
``tool_result`` for an assistant's ``tool_use`` blocks in the single user message after it.
Empty text blocks carry nothing and the API rejects them, so they are left out; a message left
with no content derives to nothing, like an empty assistant.

Reasoning goes back as a ``thinking`` block only with the provider's ``signature`` (the API
verifies it); reasoning without one is not sent (the API drops earlier turns' thinking from
the context anyway). Images: a ``data:`` URI is a ``base64`` source with its media type, any
other URI a ``url`` source; DeepSeek's Anthropic-compatible API takes no image blocks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from admission_service.domain import messages as msg
from admission_service.domain.wire_common import (
    Json,
    WireFormat,
    check_tool_name,
    inline_image,
    is_data_uri,
    refuse,
    tool_schema,
)

WIRE = WireFormat.ANTHROPIC_MESSAGES
# The media types the Messages API takes in a base64 image source.
MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
# Providers whose Anthropic-compatible API takes no image blocks.
NO_IMAGE_PROVIDERS = frozenset({"deepseek"})


def anthropic_messages(
    messages: Sequence[msg.Message], *, provider: str, tools: Sequence[msg.Tool]
) -> Json:
    system: str | None = None
    out: list[Json] = []
    pending: list[tuple[int, str]] = []  # later system messages: (index, text)

    def flush() -> None:
        if not pending:
            return
        if not out or out[-1]["role"] != "user":
            refuse(
                WIRE,
                f"messages[{pending[0][0]}]",
                "system update without a preceding user or tool-result turn",
            )
        out.extend(
            {"role": "system", "content": [{"type": "text", "text": text}]} for _, text in pending
        )
        pending.clear()

    def add(role: str, content: list[Json]) -> None:
        if not content:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})

    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if message.role is msg.Role.SYSTEM:
            if not out and system is None:
                system = message.text
            else:
                pending.append((index, message.text))
        elif message.role is msg.Role.ASSISTANT:
            content = _assistant_content(message)
            if content:
                flush()
            add("assistant", content)
        elif message.role is msg.Role.USER:
            add("user", _user_content(message.content, provider, where))
        else:
            add("user", [_tool_result(block, provider, where) for block in _results(message)])
    flush()
    body: Json = {"messages": out}
    if system is not None:
        body["system"] = system
    if tools:
        body["tools"] = [_tool(index, tool) for index, tool in enumerate(tools)]
    return body


def _results(message: msg.Message) -> list[msg.ToolResult]:
    return [block for block in message.content if isinstance(block, msg.ToolResult)]


def _user_content(content: Sequence[object], provider: str, where: str) -> list[Json]:
    parts: list[Json] = []
    for index, block in enumerate(content):
        if isinstance(block, msg.Text) and block.text:
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, msg.Image):
            parts.append(_image(block, provider, f"{where}.content[{index}]"))
    return parts


def _image(image: msg.Image, provider: str, where: str) -> Json:
    if provider in NO_IMAGE_PROVIDERS:
        refuse(WIRE, where, f"the {provider} Anthropic-compatible API takes no image blocks")
    inline = inline_image(image)
    if inline is not None:
        if inline.media_type not in MEDIA_TYPES:
            refuse(
                WIRE,
                where,
                f"image media type {inline.media_type!r} is not one of "
                f"{', '.join(sorted(MEDIA_TYPES))}",
            )
        source: Json = {"type": "base64", "media_type": inline.media_type, "data": inline.data}
    elif is_data_uri(image.uri):
        refuse(WIRE, where, "a data: image must be base64 (data:<media type>;base64,<data>)")
    else:
        source = {"type": "url", "url": image.uri}
    return {"type": "image", "source": source}


def _tool_result(block: msg.ToolResult, provider: str, where: str) -> Json:
    entry: Json = {"type": "tool_result", "tool_use_id": block.call_id}
    content = _user_content(block.content, provider, where)
    if content:
        entry["content"] = content
    if block.is_error:
        entry["is_error"] = True
    return entry


def _assistant_content(message: msg.Message) -> list[Json]:
    parts: list[Json] = []
    for block in message.content:
        if isinstance(block, msg.Reasoning) and block.signature:
            parts.append({"type": "thinking", "thinking": block.text, "signature": block.signature})
        elif isinstance(block, msg.Text) and block.text:
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, msg.ToolCall):
            parts.append(
                {
                    "type": "tool_use",
                    "id": block.call_id,
                    "name": block.name,
                    "input": json.loads(block.arguments_json or "{}"),
                }
            )
    return parts


def _tool(index: int, tool: msg.Tool) -> Json:
    check_tool_name(WIRE, index, tool)
    schema = tool_schema(tool)
    if schema.get("type") != "object":
        refuse(WIRE, f"tools[{index}].parameters_json", 'input_schema must be {"type": "object"}')
    entry: Json = {"name": tool.name}
    if tool.description:
        entry["description"] = tool.description
    entry["input_schema"] = schema
    return entry
