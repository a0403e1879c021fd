"""Reasoning that must travel back (issue 25): new content blocks in the stored encoding.

The stored encoding of a message is ``promptadmission.v1.Message`` (revision 0005), and this
release adds to it, additively: ``ContentBlock.redacted_reasoning`` (an Anthropic
``redacted_thinking`` block), ``ContentBlock.reasoning_item`` (an OpenAI Responses reasoning
item) and ``TextBlock.phase``. Every row written before reads the same, so the upgrade changes
nothing.

The downgrade makes the rows readable by the release before, whose code reads a block kind it
does not know as an empty tool result: it removes those two block kinds and the phase from
every assistant message (the only messages that may carry them) — its event's ``payload`` and
its surface node's frame ``message_pb`` (an assistant left empty derives to nothing, so its
frame becomes NULL, as that release writes it) — and recomputes ``log_bytes``. What it removes
is lost: the release before has no place for it, and its next requests lack it as they would
have had it been recorded then.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from promptadmission.v1 import session_pb2 as pb

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NEW_BLOCKS = frozenset({"redacted_reasoning", "reasoning_item"})
_BATCH = 500
_LOG_BYTES = (
    "UPDATE sessions SET log_bytes = coalesce((SELECT sum(octet_length(e.payload)) FROM events e"
    " WHERE e.tenant_id = sessions.tenant_id AND e.session_id = sessions.session_id), 0)"
)


def upgrade() -> None:
    pass  # additive: every stored message reads the same


def downgrade() -> None:
    bind = op.get_bind()
    event = sa.text(
        "UPDATE events SET payload = :payload WHERE tenant_id = :t AND session_id = :s AND seq = :q"
    )
    node = sa.text(
        "UPDATE surface_nodes SET message_pb = :frame"
        " WHERE tenant_id = :t AND session_id = :s AND seq = :q AND message_pb IS NOT NULL"
    )
    for rows in _assistant_events():
        changed = []
        for row in rows:
            message = _stripped(pb.Message.FromString(row.payload))
            if message is not None:
                frame = None
                if message.content:
                    framed = pb.DerivedRequest()
                    framed.messages.add().CopyFrom(message)
                    frame = framed.SerializeToString(deterministic=True)
                payload = message.SerializeToString(deterministic=True)
                changed.append({"payload": payload, "frame": frame, **_key(row)})
        if changed:
            bind.execute(event, changed)
            bind.execute(node, changed)
    op.execute(_LOG_BYTES)


def _stripped(message: pb.Message) -> pb.Message | None:
    """``message`` without what the release before cannot read; None when it has none."""
    stripped = pb.Message(role=message.role)
    changed = False
    for block in message.content:
        if block.WhichOneof("block") in _NEW_BLOCKS:
            changed = True
            continue
        kept = stripped.content.add()
        kept.CopyFrom(block)
        if kept.WhichOneof("block") == "text" and kept.text.phase:
            kept.text.phase = ""
            changed = True
    return stripped if changed else None


def _assistant_events() -> Iterator[Sequence[Any]]:
    """The assistant message events, in batches, in key order (keyset pagination)."""
    select = sa.text(
        "SELECT tenant_id, session_id, seq, payload FROM events"
        " WHERE kind = 'assistant/message' AND (tenant_id, session_id, seq) > (:t, :s, :q)"
        " ORDER BY tenant_id, session_id, seq LIMIT :batch"
    )
    after = {"t": "", "s": "", "q": -1}
    while True:
        rows = op.get_bind().execute(select, {"batch": _BATCH, **after}).all()
        if not rows:
            return
        yield rows
        after = _key(rows[-1])


def _key(row: Any) -> dict[str, Any]:
    return {"t": row.tenant_id, "s": row.session_id, "q": row.seq}
