"""Canonical JSON of a session's facts: headers (with their tools and configuration) and
contexts, as storage keeps them (``events.payload`` of a header or context event, the session
row's last header and context, an admission's tools), and the app's JSON columns (``dumps``).

Deterministic (sorted keys, no whitespace) and exact: JSON escapes NUL and every other control
character, so any valid string round-trips. Messages are not JSON: their one stored encoding is
protobuf (``storage/codec.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from admission_service.domain import messages as msg
from admission_service.domain.events import Event
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
    """The body of a header or context event (what storage keeps in its payload column; a
    message event's payload is its message's protobuf encoding)."""
    if event.header is not None:
        return {"header": header_to_json(event.header)}
    assert event.context is not None, "a message event's payload is not JSON"
    return {"context": context_to_json(event.context)}
