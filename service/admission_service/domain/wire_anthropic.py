"""Anthropic's Messages API ``system``, ``messages`` and ``tools`` (docs/WIRE_FORMATS.md).

The head goes to the top-level ``system``. A later system message is held until just before the
next assistant message (or the end) and needs a user turn before it, so a ``tool_result`` still
follows its ``tool_use``. Consecutive user content (a user message after tool results, the
results of parallel calls) is one user message, tool results first, as the API requires: every
``tool_result`` for an assistant's ``tool_use`` blocks in the single user message after it.
Empty text blocks carry nothing and the API rejects them, so they are left out; a message left
with no content derives to nothing, like an empty assistant.

Reasoning goes back in the assistant's content, in its order: a ``thinking`` block only with
the provider's ``signature`` (the API verifies it), a ``redacted_thinking`` block only to the
provider that issued its data; reasoning without a signature, another provider's opaque
reasoning and Responses reasoning items are listed in ``Omissions``, not sent (the API drops
earlier turns' thinking from the context anyway). Two adjacent assistant messages merge into
one, which must keep its thinking first: a merge that would put thinking after the earlier
message's content is refused. Images: a ``data:`` URI is a ``base64`` source with its media
type, any other URI a ``url`` source; DeepSeek's Anthropic-compatible API takes no image blocks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from admission_service.domain import messages as msg
from admission_service.domain.wire_common import (
    Json,
    Omissions,
    WireFormat,
    check_media_type,
    check_tool_name,
    inline_image,
    is_data_uri,
    refuse,
    tool_schema,
)

WIRE = WireFormat.ANTHROPIC_MESSAGES
THINKING = frozenset({"thinking", "redacted_thinking"})
# Providers whose Anthropic-compatible API takes no image blocks.
NO_IMAGE_PROVIDERS = frozenset({"deepseek"})


def anthropic_messages(
    messages: Sequence[msg.Message],
    *,
    provider: str,
    tools: Sequence[msg.Tool],
    omitted: Omissions,
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
            sources, content = _assistant_content(message, provider, where, omitted)
            if content:
                flush()
                if out and out[-1]["role"] == "assistant":
                    _check_merge(sources, content)
            add("assistant", content)
        elif message.role is msg.Role.USER:
            add("user", _user_content(message.content, provider, where))
        else:
            results = [
                _tool_result(block, provider, f"{where}.content[{position}].tool_result")
                for position, block in enumerate(message.content)
                if isinstance(block, msg.ToolResult)
            ]
            add("user", results)
    flush()
    body: Json = {"messages": out}
    if system is not None:
        body["system"] = system
    if tools:
        body["tools"] = [_tool(index, tool) for index, tool in enumerate(tools)]
    return body


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
    check_media_type(WIRE, where, image)
    inline = inline_image(image)
    if inline is not None:
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


def _assistant_content(
    message: msg.Message, provider: str, where: str, omitted: Omissions
) -> tuple[list[str], list[Json]]:
    """The assistant's content blocks in order, and the field each one came from."""
    sources: list[str] = []
    parts: list[Json] = []
    for index, block in enumerate(message.content):
        field = f"{where}.content[{index}]"
        part: Json | None = None
        if isinstance(block, msg.Reasoning):
            if block.signature:
                part = {"type": "thinking", "thinking": block.text, "signature": block.signature}
            elif block.text:
                omitted.omit(field, "Messages takes thinking back only with its signature")
        elif isinstance(block, msg.RedactedReasoning):
            if block.provider == provider:
                part = {"type": "redacted_thinking", "data": block.data}
            else:
                omitted.omit(
                    field, f"redacted reasoning of {block.provider!r} goes back only to it"
                )
        elif isinstance(block, msg.ReasoningItem):
            omitted.omit(field, "Messages has no place for a Responses reasoning item")
        elif isinstance(block, msg.Text):
            omitted.phase(WIRE, field, block)
            if block.text:
                part = {"type": "text", "text": block.text}
        elif isinstance(block, msg.ToolCall):
            part = {
                "type": "tool_use",
                "id": block.call_id,
                "name": block.name,
                "input": json.loads(block.arguments_json or "{}"),
            }
        if part is not None:
            sources.append(field)
            parts.append(part)
    return sources, parts


def _check_merge(sources: list[str], content: list[Json]) -> None:
    """An assistant message right after another joins it (the API combines consecutive turns);
    its thinking would then follow the earlier content, which the API refuses (thinking blocks
    open an assistant turn). Refused by the first such block."""
    for field, part in zip(sources, content, strict=True):
        if part["type"] in THINKING:
            refuse(
                WIRE,
                field,
                "thinking in an assistant message that follows another assistant message"
                " (merged into one, its thinking would not come first)",
            )


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
