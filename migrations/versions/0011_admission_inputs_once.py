"""An admission's prompt and tool set stored once per session, by digest (issue 23).

Until now every ``admissions`` row held its step's whole rendered prompt and tool set, the
inputs a Reconcile reuses. A harness sends both unchanged step after step, so a session with a
512 KiB prompt and 1 MiB of tools wrote 1.5 MiB per step (before TOAST compression) to store
what it already had. ``admission_inputs`` now holds each distinct input of a session once,
keyed by the SHA-256 of its bytes; an admission names its prompt and its tool set by that
digest (``prompt_digest``, ``tools_digest``). The bytes are as before: the prompt as UTF-8, the
tool set in its stored encoding (``storage/codec.py``). A body is never removed while its
session lives (admissions are not either); it goes with the session, by cascade.

The upgrade copies the existing inputs (``sha256`` is PostgreSQL's own, the same digest the
service computes) and drops the old columns; the downgrade puts every admission's inputs back
in its row and drops the table. On Citus the new table is local until the migrations'
distribution step (run after ``alembic upgrade``, in the same transaction) shards it by
session, rows included, co-located with ``admissions``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (the admissions column that held an input, the one that names it now)
INPUTS = (("rendered_prompt", "prompt_digest"), ("tools", "tools_digest"))


def upgrade() -> None:
    op.create_table(
        "admission_inputs",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "session_id", "digest", name="pk_admission_inputs"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "session_id"],
            ["sessions.tenant_id", "sessions.session_id"],
            name="fk_admission_inputs_sessions",
            ondelete="CASCADE",
        ),
    )
    for stored, named in INPUTS:
        op.execute(
            "INSERT INTO admission_inputs (tenant_id, session_id, digest, body)"
            f" SELECT DISTINCT tenant_id, session_id, sha256({stored}), {stored} FROM admissions"
            " ON CONFLICT DO NOTHING"
        )
        op.add_column("admissions", sa.Column(named, sa.LargeBinary(), nullable=True))
        op.execute(f"UPDATE admissions SET {named} = sha256({stored})")
        op.alter_column("admissions", named, nullable=False)
        op.drop_column("admissions", stored)


def downgrade() -> None:
    for stored, named in INPUTS:
        op.add_column("admissions", sa.Column(stored, sa.LargeBinary(), nullable=True))
        op.execute(
            f"UPDATE admissions AS a SET {stored} = i.body FROM admission_inputs AS i"
            " WHERE i.tenant_id = a.tenant_id AND i.session_id = a.session_id"
            f" AND i.digest = a.{named}"
        )
        op.alter_column("admissions", stored, nullable=False)
        op.drop_column("admissions", named)
    op.drop_table("admission_inputs")
