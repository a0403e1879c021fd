"""Chunked frame storage (issue 23): a FULL request aggregates chunks, not one row per node.

``frame_chunks`` holds the surface's message frames pre-concatenated by ranges of positions
(``storage/frame_chunks.py``). It starts empty: a FULL read seals the ranges below the surface's
end in its commit, so existing sessions gain their chunks at their next FULL request; until
then (and for every node past the last chunk) the nodes are read one by one, as before.
Session-scoped, so sharded by session on Citus like every other such table.

The downgrade drops the table: the release before reads the nodes only, and they are unchanged.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "frame_chunks",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("first_position", sa.BigInteger(), nullable=False),
        sa.Column("end_position", sa.BigInteger(), nullable=False),
        sa.Column("frames", sa.LargeBinary(), nullable=False),
        sa.Column("messages", sa.BigInteger(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id", "session_id", "first_position", name="pk_frame_chunks"
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "session_id"],
            ["sessions.tenant_id", "sessions.session_id"],
            name="fk_frame_chunks_sessions",
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("frame_chunks")
