"""The whole provider body from a derived request, also when the service answered a DELTA.

A DELTA response renders only the messages after the held prefix, and the held prefix is
always the whole previous request (the kit holds nothing else), so the whole body is the
previous body's items followed by the new ones; the other keys (``tools``, ``system``) come
from the new response. A FULL response is the whole body as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from promptadmission.v1 import session_pb2 as pb

__all__ = ["ITEMS_KEY", "HeldRequest"]

# The key of each format's list of conversation items.
ITEMS_KEY = {
    pb.WIRE_FORMAT_OPENAI_CHAT: "messages",
    pb.WIRE_FORMAT_OPENAI_RESPONSES: "input",
    pb.WIRE_FORMAT_ANTHROPIC_MESSAGES: "messages",
}


@dataclass(frozen=True, slots=True)
class HeldRequest:
    """The latest derived request in full: what a DELTA extends and the prefix it names."""

    body: dict[str, Any]
    total_messages: int
    digest: bytes

    @property
    def prefix(self) -> pb.HeldPrefix:
        return pb.HeldPrefix(message_count=self.total_messages, digest=self.digest)

    @classmethod
    def of(cls, request: pb.DerivedRequest, held: HeldRequest | None) -> HeldRequest:
        if request.wire_format == pb.WIRE_FORMAT_NEUTRAL:
            raise ValueError("wire_format: the kit builds provider bodies, not NEUTRAL requests")
        body: dict[str, Any] = json.loads(request.body_json)
        if request.view == pb.REQUEST_VIEW_DELTA:
            if held is None or request.first_message_index != held.total_messages:
                raise ValueError("a DELTA response extends a request this session does not hold")
            key = ITEMS_KEY[request.wire_format]
            body[key] = held.body[key] + body[key]
        return cls(body, request.total_messages, request.digest)
