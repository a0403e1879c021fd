"""What revision 0004 stored for a message, frozen: its canonical JSON (``events.payload`` of a
message event, ``surface_nodes.message``), which migration 0005 converts to the protobuf
encoding. The service no longer writes it; the migration tests build 0004's rows with it."""

from __future__ import annotations

import json
from typing import Any

from admission_service.domain import messages as msg
from admission_service.domain.events import Event
from admission_service.storage import codec


def dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


def block_json(block: msg.Block) -> dict[str, Any]:
    """A block of the kinds 0004 knew (text without a phase, image, reasoning, tool call and
    result)."""
    if isinstance(block, msg.Text):
        assert not block.phase, "0004 stored no phase"
        return {"type": "text", "text": block.text}
    if isinstance(block, msg.Image):
        return {"type": "image", "uri": block.uri, "media_type": block.media_type}
    if isinstance(block, msg.Reasoning):
        # The signature is omitted when empty (as 0004 wrote it).
        if block.signature:
            return {"type": "reasoning", "text": block.text, "signature": block.signature}
        return {"type": "reasoning", "text": block.text}
    if isinstance(block, msg.ToolCall):
        return {
            "type": "tool_call",
            "call_id": block.call_id,
            "name": block.name,
            "arguments_json": block.arguments_json,
        }
    assert isinstance(block, msg.ToolResult), f"0004 stored no {type(block).__name__}"
    return {
        "type": "tool_result",
        "call_id": block.call_id,
        "content": [block_json(inner) for inner in block.content],
        "is_error": block.is_error,
    }


def message_json(message: msg.Message) -> dict[str, Any]:
    return {"role": message.role.value, "content": [block_json(b) for b in message.content]}


def encode_message(message: msg.Message) -> bytes:
    return dumps(message_json(message))


def event_payload(event: Event) -> bytes:
    """An event's ``events.payload`` as 0004 wrote it: a message event's message as JSON; a
    header's or context's payload is still written so (``storage/codec.py``)."""
    if event.message is None:
        return codec.dumps(codec.event_payload(event))
    payload: dict[str, Any] = {"message": message_json(event.message)}
    if event.update:
        payload["update"] = True
    return dumps(payload)
