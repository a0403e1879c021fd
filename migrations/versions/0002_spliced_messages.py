"""Spliced derived requests and a running surface price (issue 7).

``surface_nodes.message_pb`` keeps each node's derived message in the API's protobuf encoding,
framed as one element of ``DerivedRequest.messages``, so a derived request is assembled by
concatenating stored frames. ``sessions.surface_tokens`` keeps the summed price of the
surviving nodes, so the token breakdown does not read the whole surface. Both are backfilled.

A migration is a fixed point in history: it imports no application code (which keeps changing)
and carries what it needs — here the JSON shape of a stored message and the protobuf encoding of
``promptadmission.v1.Message`` as they were at this revision.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("surface_nodes", sa.Column("message_pb", sa.LargeBinary(), nullable=True))
    op.add_column(
        "sessions",
        sa.Column("surface_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )
    connection = op.get_bind()
    rows = connection.execute(
        sa.text(
            "SELECT tenant_id, session_id, seq, message FROM surface_nodes"
            " WHERE message IS NOT NULL"
        )
    )
    update = sa.text(
        "UPDATE surface_nodes SET message_pb = :pb"
        " WHERE tenant_id = :t AND session_id = :s AND seq = :q"
    )
    for row in rows.all():
        message = json.loads(row.message)
        connection.execute(
            update,
            {"pb": _frame(message), "t": row.tenant_id, "s": row.session_id, "q": row.seq},
        )
    connection.execute(
        sa.text(
            "UPDATE sessions SET surface_tokens = coalesce((SELECT sum(n.tokens)"
            " FROM surface_nodes n WHERE n.tenant_id = sessions.tenant_id"
            " AND n.session_id = sessions.session_id), 0)"
        )
    )


# ---- a stored JSON message as one frame of DerivedRequest.messages, as of this revision ----

_ROLES = {"system": 1, "user": 2, "assistant": 3, "tool": 4}  # promptadmission.v1.MessageRole
_DERIVED_REQUEST_MESSAGES = 2  # DerivedRequest.messages


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


def _length_delimited(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _string(number: int, value: str) -> bytes:
    return _length_delimited(number, value.encode()) if value else b""


def _block(block: dict[str, Any]) -> bytes:
    """A ContentBlock: the oneof member (text 1, image 2, reasoning 3, tool_call 4,
    tool_result 5) around its message."""
    kind = block["type"]
    if kind == "text":
        return _length_delimited(1, _string(1, block["text"]))
    if kind == "image":
        return _length_delimited(2, _string(1, block["uri"]) + _string(2, block["media_type"]))
    if kind == "reasoning":
        return _length_delimited(3, _string(1, block["text"]))
    if kind == "tool_call":
        call = block["call_id"], block["name"], block["arguments_json"]
        return _length_delimited(4, b"".join(_string(n, v) for n, v in enumerate(call, 1)))
    body = _string(1, block["call_id"])
    body += b"".join(_length_delimited(2, _block(inner)) for inner in block["content"])
    if block["is_error"]:
        body += _varint(3 << 3) + b"\x01"
    return _length_delimited(5, body)


def _frame(message: dict[str, Any]) -> bytes:
    encoded = _varint(1 << 3) + _varint(_ROLES[message["role"]])
    encoded += b"".join(_length_delimited(2, _block(block)) for block in message["content"])
    return _length_delimited(_DERIVED_REQUEST_MESSAGES, encoded)


def downgrade() -> None:
    op.drop_column("sessions", "surface_tokens")
    op.drop_column("surface_nodes", "message_pb")
