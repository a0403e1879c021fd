"""A partial index on the unanswered tool calls.

Every Admit and Reconcile reads the session's open tool calls (the tool-call ordering rule of
``domain/admission.py``). Without this index that read scans every call the session ever made:
15.8 ms per DELTA Admit at 100 000 nodes (docs/BENCHMARKS.md). With it the read touches only
the calls still waiting for a result, usually none.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_tool_calls_open",
        "tool_calls",
        ["tenant_id", "session_id", "call_seq"],
        postgresql_where=sa.text("result_seq IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_tool_calls_open", table_name="tool_calls")
