"""Every stored byte's encoding, in one module.

Messages: ``promptadmission.v1.Message``, by the generated protobuf code (deterministic
serialization). A message event's ``events.payload`` is its message so encoded; a surface node's
``surface_nodes.message_pb`` is the same bytes framed as one element of
``DerivedRequest.messages`` (field 2: tag, length, bytes), so a FULL derived request is the
concatenation of the stored frames in surface order — assembled by the database, spliced into
the response, never re-encoded. ``decode_frames`` reads concatenated frames back for the callers
that need values.

Everything else: canonical JSON (``dumps``/``loads``: sorted keys, no whitespace, UTF-8) — a
header (with its tools and configuration) or context as ``events.payload`` of its event and as
the session row's last header and context, an admission's tools, and the app's JSON columns
(the ledger's forecast and usage, a stored response's recipe). Exact: JSON escapes NUL and every
other control character, so any valid string round-trips.
"""

from __future__ import annotations

import json
from typing import Any

from promptadmission.v1 import session_pb2 as pb

from admission_service.domain import json_text
from admission_service.domain import messages as msg
from admission_service.domain.events import Event
from admission_service.domain.messages import (
    Block,
    Image,
    Message,
    Reasoning,
    ReasoningItem,
    RedactedReasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
)
from admission_service.domain.series import (
    ContextLog,
    HeaderLog,
    HeaderReason,
    RequestContext,
    RequestHeader,
    canonical_config,
)
from admission_service.domain.wire_anthropic import MessagesEnd

_ROLES = {
    Role.SYSTEM: pb.MESSAGE_ROLE_SYSTEM,
    Role.USER: pb.MESSAGE_ROLE_USER,
    Role.ASSISTANT: pb.MESSAGE_ROLE_ASSISTANT,
    Role.TOOL: pb.MESSAGE_ROLE_TOOL,
}
_ROLES_IN = {number: role for role, number in _ROLES.items()}


def _fill_block(target: pb.ContentBlock, block: Block) -> None:
    if isinstance(block, Text):
        target.text.SetInParent()
        target.text.text, target.text.phase = block.text, block.phase
    elif isinstance(block, Image):
        target.image.SetInParent()
        target.image.uri, target.image.media_type = block.uri, block.media_type
    elif isinstance(block, Reasoning):
        target.reasoning.SetInParent()
        target.reasoning.text, target.reasoning.signature = block.text, block.signature
    elif isinstance(block, RedactedReasoning):
        target.redacted_reasoning.SetInParent()
        target.redacted_reasoning.provider = block.provider
        target.redacted_reasoning.data = block.data
    elif isinstance(block, ReasoningItem):
        item = target.reasoning_item
        item.SetInParent()
        item.id, item.encrypted_content = block.item_id, block.encrypted_content
        item.summary.extend(block.summary)
        item.content.extend(block.content)
    elif isinstance(block, ToolCall):
        call = target.tool_call
        call.SetInParent()
        call.call_id, call.name, call.arguments_json = (
            block.call_id,
            block.name,
            block.arguments_json,
        )
    else:
        result = target.tool_result
        result.SetInParent()
        result.call_id, result.is_error = block.call_id, block.is_error
        for part in block.content:
            _fill_block(result.content.add(), part)


def to_proto(message: Message) -> pb.Message:
    """``message`` as the generated ``promptadmission.v1.Message``."""
    return _fill(pb.Message(), message)


def _fill(target: pb.Message, message: Message) -> pb.Message:
    target.role = _ROLES[message.role]
    for block in message.content:
        _fill_block(target.content.add(), block)
    return target


def encode(message: Message) -> bytes:
    """``message`` as ``promptadmission.v1.Message``, serialized."""
    return to_proto(message).SerializeToString(deterministic=True)


def frame(message: Message) -> bytes:
    """``message`` as one element of ``DerivedRequest.messages``."""
    request = pb.DerivedRequest()
    _fill(request.messages.add(), message)
    return request.SerializeToString(deterministic=True)


def encode_and_frame(message: Message) -> tuple[bytes, bytes]:
    """``(encode(message), frame(message))``, filling the message once."""
    request = pb.DerivedRequest()
    inner = _fill(request.messages.add(), message)
    return inner.SerializeToString(deterministic=True), request.SerializeToString(
        deterministic=True
    )


def block_from_proto(block: pb.ContentBlock) -> Block:
    which = block.WhichOneof("block")
    if which == "text":
        return Text(block.text.text, block.text.phase)
    if which == "image":
        return Image(block.image.uri, block.image.media_type)
    if which == "reasoning":
        return Reasoning(block.reasoning.text, block.reasoning.signature)
    if which == "redacted_reasoning":
        return RedactedReasoning(block.redacted_reasoning.provider, block.redacted_reasoning.data)
    if which == "reasoning_item":
        item = block.reasoning_item
        return ReasoningItem(
            item.id, item.encrypted_content, tuple(item.summary), tuple(item.content)
        )
    if which == "tool_call":
        call = block.tool_call
        return ToolCall(call.call_id, call.name, call.arguments_json)
    result = block.tool_result
    content: list[Text | Image] = []
    for part in result.content:
        inner = block_from_proto(part)
        assert isinstance(inner, Text | Image)
        content.append(inner)
    return ToolResult(result.call_id, tuple(content), result.is_error)


def from_proto(message: pb.Message) -> Message:
    """The domain value of a generated ``promptadmission.v1.Message``."""
    return Message(
        _ROLES_IN[message.role], tuple(block_from_proto(block) for block in message.content)
    )


def decode(data: bytes) -> Message:
    """The message ``encode`` encoded."""
    return from_proto(pb.Message.FromString(data))


def decode_frames(frames: bytes) -> tuple[Message, ...]:
    """The messages of concatenated ``frame`` output, in order."""
    return tuple(from_proto(value) for value in pb.DerivedRequest.FromString(frames).messages)


# Canonical JSON: headers, contexts, tools, how a request's Anthropic Messages body ends, and the
# app's JSON columns.

JsonObject = dict[str, Any]


def dumps(value: object) -> bytes:
    return json_text.canonical(value)


def loads(data: bytes) -> Any:
    return json.loads(data)


def tool_to_json(tool: msg.Tool) -> JsonObject:
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters_json": tool.parameters_json,
    }


def tool_from_json(data: JsonObject) -> msg.Tool:
    return msg.Tool(data["name"], data["description"], data["parameters_json"])


def encode_tools(tools: tuple[msg.Tool, ...]) -> bytes:
    return dumps([tool_to_json(tool) for tool in tools])


def decode_tools(data: bytes) -> tuple[msg.Tool, ...]:
    return tuple(tool_from_json(item) for item in loads(data))


def header_to_json(log: HeaderLog) -> JsonObject:
    return {
        "seq": log.seq,
        "reason": log.reason.value,
        "starts_series": log.starts_series,
        "provider": log.header.provider,
        "model": log.header.model,
        "tools": [tool_to_json(tool) for tool in log.header.tools],
        # Omitted when empty, so headers logged before configuration existed read the same.
        **({"config": dict(log.header.config)} if log.header.config else {}),
    }


def header_from_json(data: JsonObject) -> HeaderLog:
    header = RequestHeader(
        data["provider"],
        data["model"],
        tuple(tool_from_json(t) for t in data["tools"]),
        canonical_config(data.get("config", {})),
    )
    return HeaderLog(data["seq"], HeaderReason(data["reason"]), data["starts_series"], header)


def context_to_json(log: ContextLog) -> JsonObject:
    context = log.context
    return {
        "seq": log.seq,
        "provider": context.provider,
        "model": context.model,
        "context_window": context.context_window,
        "in_history": context.in_history,
    }


def context_from_json(data: JsonObject) -> ContextLog:
    context = RequestContext(
        data["provider"], data["model"], data["context_window"], data["in_history"]
    )
    return ContextLog(data["seq"], context)


def messages_end_to_json(end: MessagesEnd) -> JsonObject:
    """How a request's Anthropic Messages list ends (the session row's previous request, a
    stored response's recipe)."""
    return {
        "provider": end.provider,
        "items": end.items,
        "role": end.role,
        "pending": end.pending,
        "window": end.window,
        "before": end.before,
    }


def messages_end_from_json(data: JsonObject) -> MessagesEnd:
    return MessagesEnd(
        data["provider"],
        data["items"],
        data["role"],
        data["pending"],
        data["window"],
        data["before"],
    )


def event_payload(event: Event) -> JsonObject:
    """The body of a header or context event (what storage keeps in its payload column; a
    message event's payload is its message's protobuf encoding)."""
    if event.header is not None:
        return {"header": header_to_json(event.header)}
    assert event.context is not None, "a message event's payload is not JSON"
    return {"context": context_to_json(event.context)}
