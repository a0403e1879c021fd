"""The whole provider body from a derived request, also when the service answered a DELTA.

A DELTA response renders only the messages after the held prefix, and the held prefix is
always the whole previous request (the kit holds nothing else), so the whole body is the
previous body's items without the last ``replaced_body_items`` of them, followed by the new
ones. That count is 0 for the OpenAI formats (their items follow the held ones); an Anthropic
Messages DELTA re-sends the held turn new user content merged into (and the system updates
after it). The other keys (``tools``) come from the new response, except an Anthropic
``system`` it leaves out, which is the held body's. A FULL response is the whole body as it is.
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
        """What the next DELTA request names: the messages held, and the length of the held
        body's list (which an Anthropic Messages DELTA continues)."""
        items = next(self.body[key] for key in ("messages", "input") if key in self.body)
        return pb.HeldPrefix(
            message_count=self.total_messages, digest=self.digest, body_items=len(items)
        )

    @classmethod
    def of(cls, request: pb.DerivedRequest, held: HeldRequest | None) -> HeldRequest:
        if request.wire_format == pb.WIRE_FORMAT_NEUTRAL:
            raise ValueError("wire_format: the kit builds provider bodies, not NEUTRAL requests")
        body: dict[str, Any] = json.loads(request.body_json)
        if request.view == pb.REQUEST_VIEW_DELTA:
            if held is None or request.first_message_index != held.total_messages:
                raise ValueError("a DELTA response extends a request this session does not hold")
            body = _extended(held.body, body, ITEMS_KEY[request.wire_format], request)
        return cls(body, request.total_messages, request.digest)


def _extended(
    held: dict[str, Any], delta: dict[str, Any], key: str, request: pb.DerivedRequest
) -> dict[str, Any]:
    """The whole body: the held list without its last ``replaced_body_items`` items, then the
    DELTA's; ``system`` the DELTA's or else the held one; the DELTA's other keys (in the
    order the service renders a FULL body: the list, ``system``, the rest)."""
    items: list[Any] = held[key]
    replaced = request.replaced_body_items
    if not 0 <= replaced <= len(items):
        raise ValueError("a DELTA response replaces more items than the held body has")
    whole: dict[str, Any] = {key: items[: len(items) - replaced] + delta[key]}
    if "system" in delta:
        whole["system"] = delta["system"]
    elif "system" in held:
        whole["system"] = held["system"]
    whole.update((name, value) for name, value in delta.items() if name not in whole)
    return whole
