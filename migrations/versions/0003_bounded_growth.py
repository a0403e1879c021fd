"""Bounded growth (issue 13): running session sizes and bounded idempotency records.

``sessions`` keeps three running sizes, moved by every write like ``surface_tokens``:
``surface_bytes`` (the summed size of the surviving nodes' derived-message frames: what a FULL
derived request carries), ``surface_nodes`` (surviving nodes) and ``log_bytes`` (the event log's
payload bytes: what the session stores). The session bounds and the tenant's stored-bytes quota
read them instead of the tables. All three are backfilled.

``idempotency_keys.derived_request`` says where an Admit/Reconcile response's derived request
comes from (the surface as of an event seq, from a message index; app/replay.py), so the stored
``response`` holds everything else and no longer grows with the session.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SIZES = ("surface_bytes", "surface_nodes", "log_bytes")


def upgrade() -> None:
    for name in _SIZES:
        op.add_column(
            "sessions",
            sa.Column(name, sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        )
    op.add_column("idempotency_keys", sa.Column("derived_request", sa.LargeBinary()))
    op.execute(
        "UPDATE sessions SET"
        " surface_bytes = coalesce((SELECT sum(octet_length(n.message_pb)) FROM surface_nodes n"
        "  WHERE n.tenant_id = sessions.tenant_id AND n.session_id = sessions.session_id), 0),"
        " surface_nodes = (SELECT count(*) FROM surface_nodes n"
        "  WHERE n.tenant_id = sessions.tenant_id AND n.session_id = sessions.session_id),"
        " log_bytes = coalesce((SELECT sum(octet_length(e.payload)) FROM events e"
        "  WHERE e.tenant_id = sessions.tenant_id AND e.session_id = sessions.session_id), 0)"
    )


def downgrade() -> None:
    op.drop_column("idempotency_keys", "derived_request")
    for name in reversed(_SIZES):
        op.drop_column("sessions", name)
