"""Initial schema.

Sessions, their event log and surface, admissions, the cache ledger and idempotency keys.
Every primary key leads with (tenant_id, session_id); every foreign key stays inside one
session and cascades from ``sessions``. ``idempotency_keys`` has no foreign key on purpose
(a DeleteSession response outlives its session). User text lives in ``bytea`` (JSON/UTF-8)
because ``text`` and ``jsonb`` reject NUL.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _tenant_session() -> list[sa.Column[str]]:
    return [
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
    ]


def _session_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id", "session_id"],
        ["sessions.tenant_id", "sessions.session_id"],
        name=f"fk_{table}_sessions",
        ondelete="CASCADE",
    )


def _now(name: str) -> sa.Column[sa.DateTime]:
    return sa.Column(
        name, sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
    )


def _counter(name: str, default: str = "0") -> sa.Column[int]:
    return sa.Column(name, sa.BigInteger(), server_default=sa.text(default), nullable=False)


def _seqs(name: str) -> sa.Column[list[int]]:
    return sa.Column(
        name, postgresql.ARRAY(sa.BigInteger()), server_default=sa.text("'{}'"), nullable=False
    )


def upgrade() -> None:
    op.create_table(
        "sessions",
        *_tenant_session(),
        _counter("revision"),
        _counter("next_seq"),
        _counter("next_position"),
        _counter("replace_generation"),
        sa.Column("last_request_generation", sa.BigInteger(), nullable=True),
        sa.Column("last_header", sa.LargeBinary(), nullable=True),
        sa.Column("last_context", sa.LargeBinary(), nullable=True),
        sa.Column("last_request", sa.LargeBinary(), nullable=True),
        sa.Column("shadowed_position", sa.BigInteger(), nullable=True),
        sa.Column("shadowed_system", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        _counter("request_count"),
        _now("create_time"),
        _now("update_time"),
        sa.PrimaryKeyConstraint("tenant_id", "session_id", name="pk_sessions"),
    )
    op.create_index(
        "ix_sessions_tenant_id_create_time_session_id",
        "sessions",
        ["tenant_id", "create_time", "session_id"],
    )

    op.create_table(
        "events",
        *_tenant_session(),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("turn", sa.BigInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        _now("commit_time"),
        sa.Column("surface_op", sa.Text(), nullable=True),
        sa.Column("replace_start_seq", sa.BigInteger(), nullable=True),
        sa.Column("replace_end_seq", sa.BigInteger(), nullable=True),
        _seqs("source_seqs"),
        sa.Column("admission_id", sa.Text(), nullable=True),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "session_id", "seq", name="pk_events"),
        _session_fk("events"),
        sa.CheckConstraint("seq >= 0", name="ck_events_seq_not_negative"),
        sa.CheckConstraint("surface_op IN ('append', 'replace')", name="ck_events_surface_op"),
        sa.CheckConstraint(
            "CASE WHEN surface_op = 'replace'"
            " THEN replace_start_seq IS NOT NULL AND replace_end_seq IS NOT NULL"
            " ELSE replace_start_seq IS NULL AND replace_end_seq IS NULL END",
            name="ck_events_replace_range",
        ),
        sa.CheckConstraint(
            "replace_start_seq < seq AND replace_end_seq < seq",
            name="ck_events_replace_before_seq",
        ),
    )

    op.create_table(
        "surface_nodes",
        *_tenant_session(),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("is_system", sa.Boolean(), nullable=False),
        sa.Column("system_text", sa.LargeBinary(), nullable=True),
        sa.Column("message", sa.LargeBinary(), nullable=True),
        _counter("tokens"),
        sa.Column("turn", sa.BigInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        _now("commit_time"),
        sa.PrimaryKeyConstraint("tenant_id", "session_id", "seq", name="pk_surface_nodes"),
        _session_fk("surface_nodes"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "session_id", "seq"],
            ["events.tenant_id", "events.session_id", "events.seq"],
            name="fk_surface_nodes_events",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "tenant_id",
            "session_id",
            "position",
            name="uq_surface_nodes_tenant_id_session_id_position",
        ),
    )
    op.create_index(
        "ix_surface_nodes_system",
        "surface_nodes",
        ["tenant_id", "session_id", "position"],
        postgresql_where=sa.text("is_system"),
    )

    op.create_table(
        "tool_calls",
        *_tenant_session(),
        sa.Column("call_id", sa.Text(), nullable=False),
        sa.Column("call_seq", sa.BigInteger(), nullable=False),
        sa.Column("result_seq", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "session_id", "call_id", name="pk_tool_calls"),
        _session_fk("tool_calls"),
    )

    op.create_table(
        "admissions",
        *_tenant_session(),
        sa.Column("admission_id", sa.Text(), nullable=False),
        sa.Column("turn", sa.BigInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("rendered_prompt", sa.LargeBinary(), nullable=False),
        sa.Column("tools", sa.LargeBinary(), nullable=False),
        _seqs("users_seqs"),
        _counter("attempts", default="1"),
        _now("create_time"),
        sa.PrimaryKeyConstraint("tenant_id", "session_id", "admission_id", name="pk_admissions"),
        _session_fk("admissions"),
    )

    op.create_table(
        "requests",
        *_tenant_session(),
        sa.Column("request_index", sa.BigInteger(), nullable=False),
        sa.Column("admission_id", sa.Text(), nullable=False),
        sa.Column("attempt", sa.BigInteger(), nullable=False),
        sa.Column("forecast", sa.LargeBinary(), nullable=False),
        sa.Column("observed", sa.LargeBinary(), nullable=True),
        _now("create_time"),
        sa.PrimaryKeyConstraint("tenant_id", "session_id", "request_index", name="pk_requests"),
        _session_fk("requests"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "session_id", "admission_id"],
            ["admissions.tenant_id", "admissions.session_id", "admissions.admission_id"],
            name="fk_requests_admissions",
            ondelete="CASCADE",
        ),
    )

    op.create_table(
        "idempotency_keys",
        *_tenant_session(),
        sa.Column("request_id", sa.Text(), nullable=False),
        sa.Column("method", sa.Text(), nullable=False),
        sa.Column("request_digest", sa.LargeBinary(), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=False),
        _now("create_time"),
        sa.PrimaryKeyConstraint(
            "tenant_id", "session_id", "request_id", name="pk_idempotency_keys"
        ),
    )
    op.create_index("ix_idempotency_keys_create_time", "idempotency_keys", ["create_time"])


def downgrade() -> None:
    # Children first; dropping a table drops its indexes and constraints.
    for table in (
        "idempotency_keys",
        "requests",
        "admissions",
        "tool_calls",
        "surface_nodes",
        "events",
        "sessions",
    ):
        op.drop_table(table)
