"""Canonical JSON encoding of domain values.

One deterministic encoding serves three purposes: the bytes storage keeps, the digests the cache
forecast compares ("byte-identical"), and the audit's re-derivation. JSON escapes NUL and every
other control character, so any valid string round-trips exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from admission_service.domain import messages as msg
from admission_service.domain.events import Append, Event, EventKind, Replace
from admission_service.domain.series import (
    ContextLog,
    HeaderLog,
    HeaderReason,
    RequestContext,
    RequestHeader,
)

JsonObject = dict[str, Any]


def dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


def loads(data: bytes) -> Any:
    return json.loads(data)


def block_to_json(block: msg.Block) -> JsonObject:
    if isinstance(block, msg.Text):
        # The phase is omitted when empty, so text stored before it existed reads the same.
        if block.phase:
            return {"type": "text", "text": block.text, "phase": block.phase}
        return {"type": "text", "text": block.text}
    if isinstance(block, msg.Image):
        return {"type": "image", "uri": block.uri, "media_type": block.media_type}
    if isinstance(block, msg.Reasoning):
        # The signature is omitted when empty, so reasoning stored before it existed reads
        # (and digests) the same.
        if block.signature:
            return {"type": "reasoning", "text": block.text, "signature": block.signature}
        return {"type": "reasoning", "text": block.text}
    if isinstance(block, msg.RedactedReasoning):
        return {"type": "redacted_reasoning", "provider": block.provider, "data": block.data}
    if isinstance(block, msg.ReasoningItem):
        return {
            "type": "reasoning_item",
            "id": block.item_id,
            "encrypted_content": block.encrypted_content,
            "summary": list(block.summary),
            "content": list(block.content),
        }
    if isinstance(block, msg.ToolCall):
        return {
            "type": "tool_call",
            "call_id": block.call_id,
            "name": block.name,
            "arguments_json": block.arguments_json,
        }
    return {
        "type": "tool_result",
        "call_id": block.call_id,
        "content": [block_to_json(inner) for inner in block.content],
        "is_error": block.is_error,
    }


def block_from_json(data: JsonObject) -> msg.Block:
    kind = data["type"]
    if kind == "text":
        return msg.Text(data["text"], data.get("phase", ""))
    if kind == "image":
        return msg.Image(data["uri"], data["media_type"])
    if kind == "reasoning":
        return msg.Reasoning(data["text"], data.get("signature", ""))
    if kind == "redacted_reasoning":
        return msg.RedactedReasoning(data["provider"], data["data"])
    if kind == "reasoning_item":
        return msg.ReasoningItem(
            data["id"], data["encrypted_content"], tuple(data["summary"]), tuple(data["content"])
        )
    if kind == "tool_call":
        return msg.ToolCall(data["call_id"], data["name"], data["arguments_json"])
    content = tuple(block_from_json(inner) for inner in data["content"])
    assert all(isinstance(inner, msg.Text | msg.Image) for inner in content)
    return msg.ToolResult(data["call_id"], content, data["is_error"])  # type: ignore[arg-type]


def message_to_json(message: msg.Message) -> JsonObject:
    return {"role": message.role.value, "content": [block_to_json(b) for b in message.content]}


def message_from_json(data: JsonObject) -> msg.Message:
    return msg.Message(msg.Role(data["role"]), tuple(block_from_json(b) for b in data["content"]))


def encode_message(message: msg.Message) -> bytes:
    return dumps(message_to_json(message))


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


def canonical_config(config: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A header's configuration in canonical form: its pairs sorted by key (code point order,
    which is also UTF-8 byte order). Values are opaque and compared byte for byte."""
    return tuple(sorted(config.items()))


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


def event_payload(event: Event) -> JsonObject:
    """The kind-specific body of an event (what storage keeps in its payload column)."""
    if event.header is not None:
        return {"header": header_to_json(event.header)}
    if event.context is not None:
        return {"context": context_to_json(event.context)}
    assert event.message is not None
    payload: JsonObject = {"message": message_to_json(event.message)}
    if event.update:
        payload["update"] = True
    return payload


def event_from_json(data: JsonObject) -> Event:
    op_data = data["surface_op"]
    op: Append | Replace | None = None
    if op_data is not None:
        op = (
            Append()
            if op_data["op"] == "append"
            else Replace(op_data["start_seq"], op_data["end_seq"])
        )
    payload = data["payload"]
    return Event(
        seq=data["seq"],
        kind=EventKind(data["kind"]),
        turn=data["turn"],
        step=data["step"],
        op=op,
        source_seqs=tuple(data["source_seqs"]),
        message=message_from_json(payload["message"]) if "message" in payload else None,
        header=header_from_json(payload["header"]) if "header" in payload else None,
        context=context_from_json(payload["context"]) if "context" in payload else None,
        admission_id=data["admission_id"],
        update=payload.get("update", False),
    )
