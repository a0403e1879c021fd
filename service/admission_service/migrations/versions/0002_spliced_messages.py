"""Spliced derived requests and a running surface price (issue 7).

``surface_nodes.message_pb`` keeps each node's derived message in the API's protobuf encoding,
framed as one element of ``DerivedRequest.messages``, so a derived request is assembled by
concatenating stored frames. ``sessions.surface_tokens`` keeps the summed price of the
surviving nodes, so the token breakdown does not read the whole surface. Both are backfilled.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from admission_service.domain import codec, protowire
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
        message = codec.message_from_json(codec.loads(row.message))
        connection.execute(
            update,
            {"pb": protowire.frame(message), "t": row.tenant_id, "s": row.session_id, "q": row.seq},
        )
    connection.execute(
        sa.text(
            "UPDATE sessions SET surface_tokens = coalesce((SELECT sum(n.tokens)"
            " FROM surface_nodes n WHERE n.tenant_id = sessions.tenant_id"
            " AND n.session_id = sessions.session_id), 0)"
        )
    )


def downgrade() -> None:
    op.drop_column("sessions", "surface_tokens")
    op.drop_column("surface_nodes", "message_pb")
