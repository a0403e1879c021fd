"""The session row's version (issue 22): a worker's cached session is checked against it.

A worker keeps the sessions it recently wrote in memory (``storage/session_cache.py``) and sends
a step's writes and its ``COMMIT`` in one round trip, without reading the session row first. The
step's ``UPDATE`` of the session row is then its check: it fails (and with it the whole step:
nothing is committed; the step runs again on a fresh read) unless ``row_version`` is the one the
worker cached. ``revision`` cannot serve: it moves only when events are
logged, and a retried attempt can change the row without logging any. ``row_version`` moves
with every write of the row.

Existing rows start at 0 (no worker has cached them yet). The downgrade drops the column; the
release before never reads it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "sessions",
        sa.Column("row_version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("sessions", "row_version")
