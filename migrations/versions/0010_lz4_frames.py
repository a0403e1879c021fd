"""Message frames compressed with lz4 where the server has it (issue 23: a FULL read's time).

A FULL request reads every message frame of the surface, from ``frame_chunks.frames`` and
``surface_nodes.message_pb``. PostgreSQL compresses such values with pglz by default, and
decompressing the 4.6 MB of a 1M-token session took 15 to 17 ms of its FULL Admit; the same rows
compressed with lz4 read in 7 to 8 ms (docs/BENCHMARKS.md, S7). Values written from here on are
lz4; those already stored stay pglz until rewritten, and the server reads both.

lz4 is a build option of PostgreSQL (``--with-lz4``; Debian's and the official images have it):
on a server without it the columns keep the server's default and this migration changes
nothing. On Citus the ALTER is propagated to every shard.

The downgrade returns the columns to the server's default compression; values stay as written,
which every PostgreSQL with lz4 reads.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, column): every stored message frame a derived request reads.
FRAME_COLUMNS = (("surface_nodes", "message_pb"), ("frame_chunks", "frames"))


def server_has_lz4() -> bool:
    return bool(
        op.get_bind()
        .execute(
            sa.text(
                "SELECT 'lz4' = ANY(enumvals) FROM pg_settings"
                " WHERE name = 'default_toast_compression'"
            )
        )
        .scalar()
    )


def upgrade() -> None:
    if not server_has_lz4():
        return
    for table, column in FRAME_COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION lz4")


def downgrade() -> None:
    for table, column in FRAME_COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION default")
