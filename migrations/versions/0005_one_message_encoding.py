"""One stored encoding of a message (issue 12).

Before this revision a message was stored three times in two formats: inside the JSON of its
event's ``events.payload``, as JSON in ``surface_nodes.message``, and as protobuf in
``surface_nodes.message_pb``. From here a message event's ``events.payload`` is the message as
``promptadmission.v1.Message`` (deterministic protobuf, by the API's generated code), the node's
``message_pb`` is those bytes framed (unchanged: it already was that encoding), and
``surface_nodes.message`` is gone. The event's ``"update"`` flag moves to
``events.prompt_update``. Header and context events keep their JSON payload. ``log_bytes`` (the
event log's payload bytes) is recomputed.

A migration is a fixed point in history: it imports no application code and carries what it
needs — the JSON shape of a stored message as of revision 0004. It uses the API's generated
protobuf classes, whose wire encoding ``buf breaking`` keeps fixed for ``v1``. The downgrade
writes back the exact JSON the application wrote at 0004 (keys sorted, no spaces, UTF-8; a
reasoning block's empty signature omitted).

A message event whose payload holds no message (never written by the service) is left as it is.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import json
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from google.protobuf.message import DecodeError
from promptadmission.v1 import session_pb2 as pb

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LOG_KINDS = ("request/header", "request/context")  # the events whose payload stays JSON
_BATCH = 500
_ROLES = {
    "system": pb.MESSAGE_ROLE_SYSTEM,
    "user": pb.MESSAGE_ROLE_USER,
    "assistant": pb.MESSAGE_ROLE_ASSISTANT,
    "tool": pb.MESSAGE_ROLE_TOOL,
}
_ROLE_NAMES = {number: name for name, number in _ROLES.items()}
_LOG_BYTES = (
    "UPDATE sessions SET log_bytes = coalesce((SELECT sum(octet_length(e.payload)) FROM events e"
    " WHERE e.tenant_id = sessions.tenant_id AND e.session_id = sessions.session_id), 0)"
)


def upgrade() -> None:
    op.add_column(
        "events",
        sa.Column("prompt_update", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    update = sa.text(
        "UPDATE events SET payload = :payload, prompt_update = :update"
        " WHERE tenant_id = :t AND session_id = :s AND seq = :q"
    )
    for rows in _message_events():
        values = []
        for row in rows:
            stored = json.loads(row.payload)
            if "message" in stored:
                values.append(
                    {
                        "payload": _to_proto(stored["message"]).SerializeToString(
                            deterministic=True
                        ),
                        "update": bool(stored.get("update", False)),
                        **_key(row),
                    }
                )
        if values:
            op.get_bind().execute(update, values)
    op.drop_column("surface_nodes", "message")
    op.execute(_LOG_BYTES)


def downgrade() -> None:
    op.add_column("surface_nodes", sa.Column("message", sa.LargeBinary(), nullable=True))
    bind = op.get_bind()
    event = sa.text(
        "UPDATE events SET payload = :payload WHERE tenant_id = :t AND session_id = :s AND seq = :q"
    )
    node = sa.text(
        "UPDATE surface_nodes SET message = :message"
        " WHERE tenant_id = :t AND session_id = :s AND seq = :q AND message_pb IS NOT NULL"
    )
    for rows in _message_events(", prompt_update"):
        events, nodes = [], []
        for row in rows:
            try:
                parsed = pb.Message.FromString(row.payload)
            except DecodeError:
                continue  # not a message (left as it was by the upgrade)
            if parsed.role not in _ROLE_NAMES:
                continue
            message = _from_proto(parsed)
            stored: dict[str, Any] = {"message": message}
            if row.prompt_update:
                stored["update"] = True
            events.append({"payload": _dumps(stored), **_key(row)})
            nodes.append({"message": _dumps(message), **_key(row)})
        if events:
            bind.execute(event, events)
            bind.execute(node, nodes)
    op.drop_column("events", "prompt_update")
    op.execute(_LOG_BYTES)


def _message_events(extra: str = "") -> Iterator[Sequence[Any]]:
    """The message events, in batches, in key order (keyset pagination)."""
    select = sa.text(
        f"SELECT tenant_id, session_id, seq, payload{extra} FROM events"
        " WHERE kind NOT IN :logs AND (tenant_id, session_id, seq) > (:t, :s, :q)"
        " ORDER BY tenant_id, session_id, seq LIMIT :batch"
    ).bindparams(sa.bindparam("logs", expanding=True))
    after = {"t": "", "s": "", "q": -1}
    while True:
        rows = op.get_bind().execute(select, {"logs": _LOG_KINDS, "batch": _BATCH, **after}).all()
        if not rows:
            return
        yield rows
        after = _key(rows[-1])


def _key(row: Any) -> dict[str, Any]:
    return {"t": row.tenant_id, "s": row.session_id, "q": row.seq}


def _dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


# ---- a stored JSON message (as of revision 0004) and promptadmission.v1.Message ----------


def _to_proto(message: dict[str, Any]) -> pb.Message:
    value = pb.Message(role=_ROLES[message["role"]])
    for block in message["content"]:
        _fill(value.content.add(), block)
    return value


def _fill(target: pb.ContentBlock, block: dict[str, Any]) -> None:
    kind = block["type"]
    if kind == "text":
        target.text.SetInParent()
        target.text.text = block["text"]
    elif kind == "image":
        target.image.SetInParent()
        target.image.uri, target.image.media_type = block["uri"], block["media_type"]
    elif kind == "reasoning":
        target.reasoning.SetInParent()
        target.reasoning.text = block["text"]
        target.reasoning.signature = block.get("signature", "")
    elif kind == "tool_call":
        call = target.tool_call
        call.SetInParent()
        call.call_id, call.name, call.arguments_json = (
            block["call_id"],
            block["name"],
            block["arguments_json"],
        )
    else:
        result = target.tool_result
        result.SetInParent()
        result.call_id, result.is_error = block["call_id"], block["is_error"]
        for inner in block["content"]:
            _fill(result.content.add(), inner)


def _from_proto(message: pb.Message) -> dict[str, Any]:
    return {
        "role": _ROLE_NAMES[message.role],
        "content": [_block(block) for block in message.content],
    }


def _block(block: pb.ContentBlock) -> dict[str, Any]:
    kind = block.WhichOneof("block")
    if kind == "text":
        return {"type": "text", "text": block.text.text}
    if kind == "image":
        return {"type": "image", "uri": block.image.uri, "media_type": block.image.media_type}
    if kind == "reasoning":
        reasoning = {"type": "reasoning", "text": block.reasoning.text}
        if block.reasoning.signature:
            reasoning["signature"] = block.reasoning.signature
        return reasoning
    if kind == "tool_call":
        call = block.tool_call
        return {
            "type": "tool_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments_json": call.arguments_json,
        }
    result = block.tool_result
    return {
        "type": "tool_result",
        "call_id": result.call_id,
        "content": [_block(inner) for inner in result.content],
        "is_error": result.is_error,
    }
