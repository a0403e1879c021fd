"""The schema, as typed SQLAlchemy 2 declarative rows (SPEC §1, §4, §6, §10).

Rules the schema keeps (``tests/integration/test_migrations.py`` checks the first two):

* Every primary key leads with ``(tenant_id, session_id)``; ``sessions``' is exactly that. A
  session's rows can therefore be distributed together by session (Citus), and no
  transaction needs to touch two sessions.
* Every foreign key includes ``tenant_id`` and ``session_id`` and points inside one session.
  Each child table references ``sessions`` with ``ON DELETE CASCADE``, so deleting a session
  row removes its events, surface, admissions and ledger.
* ``idempotency_keys`` is deliberately *not* a child of ``sessions``: the stored response of a
  ``DeleteSession`` must outlive the session it deleted, or its retry could not be replayed
  (SPEC §4). ``DeleteSession`` deletes the session's other keys explicitly in the same
  transaction, ``CreateSession`` deletes a previous lifetime's keys, and keys expire by
  ``create_time`` (app/sweeper.py deletes them after the retention window).
* User text may contain NUL, which ``text``/``jsonb`` reject: everything that can carry user
  text is ``bytea``, holding a message in its one stored encoding (protobuf,
  ``storage/codec.py``) and anything else as the application's JSON (UTF-8) encoding.

``page_token_keys`` is the one global table (no session): the keys of page tokens, a
reference table when distributed (``storage/distribution.py``).

The schema is created only by the Alembic migrations in ``migrations/`` (installed as the
package ``admission_service.migrations``); never ``create_all``.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKeyConstraint,
    Index,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 (SQLAlchemy's documented class attribute)
        int: BigInteger(),
        str: Text(),
        bytes: LargeBinary(),
        datetime: DateTime(timezone=True),
        list[int]: ARRAY(BigInteger()),
    }


class SessionKeyed:
    """Every key leads with ``(tenant_id, session_id)``: the columns come first in every table."""

    tenant_id: Mapped[str] = mapped_column(primary_key=True, sort_order=-1)
    session_id: Mapped[str] = mapped_column(primary_key=True, sort_order=-1)


def _session_fk(table: str = "sessions", *columns: str) -> ForeignKeyConstraint:
    """A foreign key to ``table``'s row of the same session (``sessions``: the session itself)
    by ``(tenant_id, session_id, *columns)``; deleting the parent row deletes the child."""
    keys = ["tenant_id", "session_id", *columns]
    return ForeignKeyConstraint(keys, [f"{table}.{key}" for key in keys], ondelete="CASCADE")


def _session_index(name: str, column: str, where: str) -> Index:
    """A partial index of the rows ``where`` holds, by session and then ``column``."""
    return Index(name, "tenant_id", "session_id", column, postgresql_where=text(where))


_ZERO = text("0")
_NOW = func.now()
_EMPTY_SEQS = text("'{}'")


class SessionRow(SessionKeyed, Base):
    """One session: its counters and the series state the projection reads."""

    __tablename__ = "sessions"
    __table_args__ = (
        # ListSessions: keyset pagination in creation order within a tenant.
        Index(None, "tenant_id", "create_time", "session_id"),
    )

    revision: Mapped[int] = mapped_column(server_default=_ZERO)
    # The seq of the next event, and the surface position of the next appended node.
    next_seq: Mapped[int] = mapped_column(server_default=_ZERO)
    next_position: Mapped[int] = mapped_column(server_default=_ZERO)
    replace_generation: Mapped[int] = mapped_column(server_default=_ZERO)
    # replace_generation as of the last derived request (a change since starts a series).
    last_request_generation: Mapped[int | None]
    # JSON of the last logged request/header (with its seq and reason) and request/context.
    last_header: Mapped[bytes | None]
    last_context: Mapped[bytes | None]
    # The previous derived request's key and message count (JSON), and the first surface
    # position shadowed since it: all the cache forecast needs, whatever the session's length.
    last_request: Mapped[bytes | None]
    shadowed_position: Mapped[int | None]
    shadowed_system: Mapped[bool] = mapped_column(server_default=text("false"))
    request_count: Mapped[int] = mapped_column(server_default=_ZERO)
    # The summed price of every surviving node, kept current by every write, so the token
    # breakdown never reads the whole surface.
    surface_tokens: Mapped[int] = mapped_column(server_default=_ZERO)
    # Running sizes kept the same way (migration 0003): the surviving nodes' frame bytes and
    # count (the session bounds) and the event log's payload bytes (the stored-bytes quota).
    surface_bytes: Mapped[int] = mapped_column(server_default=_ZERO)
    surface_nodes: Mapped[int] = mapped_column(server_default=_ZERO)
    log_bytes: Mapped[int] = mapped_column(server_default=_ZERO)
    create_time: Mapped[datetime] = mapped_column(server_default=_NOW)
    update_time: Mapped[datetime] = mapped_column(server_default=_NOW, onupdate=_NOW)
    # Moves with every write of the row (migration 0008): a worker's cached session is current
    # exactly while this is the version it cached (storage/session_cache.py).
    row_version: Mapped[int] = mapped_column(server_default=_ZERO)


class EventRow(SessionKeyed, Base):
    """The append-only event log. ``payload`` is a message event's message in its one stored
    encoding (``promptadmission.v1.Message``, storage/codec.py), or a request header or context
    event's JSON (migration 0005)."""

    __tablename__ = "events"
    __table_args__ = (
        _session_fk(),
        CheckConstraint("seq >= 0", name="seq_not_negative"),
        CheckConstraint("surface_op IN ('append', 'replace')", name="surface_op"),
        # A replace cites its range; nothing else has one.
        CheckConstraint(
            "CASE WHEN surface_op = 'replace'"
            " THEN replace_start_seq IS NOT NULL AND replace_end_seq IS NOT NULL"
            " ELSE replace_start_seq IS NULL AND replace_end_seq IS NULL END",
            name="replace_range",
        ),
        # A replacement shadows nodes that were committed before it.
        CheckConstraint(
            "replace_start_seq < seq AND replace_end_seq < seq", name="replace_before_seq"
        ),
    )

    seq: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str]
    turn: Mapped[int]
    step: Mapped[int]
    commit_time: Mapped[datetime] = mapped_column(server_default=_NOW)
    surface_op: Mapped[str | None]
    replace_start_seq: Mapped[int | None]
    replace_end_seq: Mapped[int | None]
    source_seqs: Mapped[list[int]] = mapped_column(server_default=_EMPTY_SEQS)
    admission_id: Mapped[str | None]
    payload: Mapped[bytes]
    # A system message that updates the prompt in force (``Event.update``).
    prompt_update: Mapped[bool] = mapped_column(server_default=text("false"))


class SurfaceNodeRow(SessionKeyed, Base):
    """The surviving surface nodes only. A replace deletes the shadowed rows and inserts the
    new node at the first shadowed position, so positions order the surface but have gaps."""

    __tablename__ = "surface_nodes"
    __table_args__ = (
        _session_fk(),
        # Every node is an event of the same session.
        _session_fk("events", "seq"),
        UniqueConstraint("tenant_id", "session_id", "position"),
        # The projection rule reads only the surviving system nodes.
        _session_index("ix_surface_nodes_system", "position", "is_system"),
    )

    seq: Mapped[int] = mapped_column(primary_key=True)
    position: Mapped[int]
    is_system: Mapped[bool]
    # The system prompt's text (UTF-8) for system nodes, NULL otherwise.
    system_text: Mapped[bytes | None]
    # The derived message: its event's payload framed as one element of
    # DerivedRequest.messages (storage/codec.py), so a derived request is these frames
    # concatenated in position order, never re-encoded. NULL when the node derives to nothing
    # (an empty system or assistant message).
    message_pb: Mapped[bytes | None]
    tokens: Mapped[int] = mapped_column(server_default=_ZERO)
    turn: Mapped[int]
    step: Mapped[int]
    commit_time: Mapped[datetime] = mapped_column(server_default=_NOW)


class FrameChunkRow(SessionKeyed, Base):
    """The surface's message frames pre-concatenated by ranges of positions (migration 0009),
    so a FULL request aggregates a few hundred chunks instead of one row per node.

    A chunk covers the positions ``[first_position, first_position + FRAME_CHUNK)``
    (``storage/frame_chunks.py``) and holds its message nodes' frames in position order, their
    count and summed price. Every message node below the sessions' highest chunk end is in a
    chunk; nodes at or past it are read one by one. A replacement deletes the chunks it
    reaches, a repricing all of them; they are sealed again by the next FULL read's commit."""

    __tablename__ = "frame_chunks"
    __table_args__ = (_session_fk(),)

    first_position: Mapped[int] = mapped_column(primary_key=True)
    end_position: Mapped[int]
    frames: Mapped[bytes]
    messages: Mapped[int]
    tokens: Mapped[int]


class ToolCallRow(SessionKeyed, Base):
    """Every tool call an assistant node made, and the tool result that answered it.

    Record checks a tool result against this table by key instead of scanning the surface:
    the result must answer a call whose node is still on the surface and is not yet answered.
    """

    __tablename__ = "tool_calls"
    __table_args__ = (
        _session_fk(),
        # Every Admit reads the session's unanswered calls (the tool-call ordering rule): only
        # those, however many calls the session has made.
        _session_index("ix_tool_calls_open", "call_seq", "result_seq IS NULL"),
    )

    call_id: Mapped[str] = mapped_column(primary_key=True)
    call_seq: Mapped[int]
    result_seq: Mapped[int | None]


class AdmissionRow(SessionKeyed, Base):
    """A step's first attempt: what ``Reconcile`` reuses (prompt and tools are never
    re-assembled, named here by their digest in ``admission_inputs``) and which users it
    admitted."""

    __tablename__ = "admissions"
    __table_args__ = (_session_fk(),)

    admission_id: Mapped[str] = mapped_column(primary_key=True)
    turn: Mapped[int]
    step: Mapped[int]
    users_seqs: Mapped[list[int]] = mapped_column(server_default=_EMPTY_SEQS)
    attempts: Mapped[int] = mapped_column(server_default=text("1"))
    create_time: Mapped[datetime] = mapped_column(server_default=_NOW)
    # SHA-256 of the rendered prompt's UTF-8 and of the tool set's stored encoding (migration
    # 0011): the keys of their bodies in ``admission_inputs``.
    prompt_digest: Mapped[bytes]
    tools_digest: Mapped[bytes]


class AdmissionInputRow(SessionKeyed, Base):
    """An admission's input (a rendered prompt or a tool set), stored once per session however
    many admissions name it (migration 0011): a harness sends both unchanged step after step.
    Its bytes are never removed while the session lives."""

    __tablename__ = "admission_inputs"
    __table_args__ = (_session_fk(),)

    digest: Mapped[bytes] = mapped_column(primary_key=True)  # SHA-256 of ``body``
    body: Mapped[bytes]


class RequestRow(SessionKeyed, Base):
    """The cache ledger: one row per derived request, forecast now and usage observed later."""

    __tablename__ = "requests"
    __table_args__ = (
        _session_fk(),
        _session_fk("admissions", "admission_id"),
    )

    request_index: Mapped[int] = mapped_column(primary_key=True)
    admission_id: Mapped[str]
    attempt: Mapped[int]
    forecast: Mapped[bytes]
    observed: Mapped[bytes | None]
    create_time: Mapped[datetime] = mapped_column(server_default=_NOW)


class IdempotencyKeyRow(SessionKeyed, Base):
    """The stored response of a mutating RPC, replayed for a repeated ``request_id``."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index(None, "create_time"),)  # expiry sweeps

    request_id: Mapped[str] = mapped_column(primary_key=True)
    method: Mapped[str]
    # SHA-256 of the canonical request: the same request_id with another request is refused.
    request_digest: Mapped[bytes]
    # The response, without its derived request when ``derived_request`` says where that
    # comes from (app/replay.py): the record does not grow with the session.
    response: Mapped[bytes]
    derived_request: Mapped[bytes | None]
    create_time: Mapped[datetime] = mapped_column(server_default=_NOW)


class PageTokenKeyRow(Base):
    """The secrets that sign page and plan tokens (app/page_tokens.py; migration 0006): random,
    generated once by the migration; the newest signs, every one verifies. Global, not a
    session's: a reference table on Citus."""

    __tablename__ = "page_token_keys"

    secret: Mapped[bytes] = mapped_column(primary_key=True)
    create_time: Mapped[datetime] = mapped_column(server_default=_NOW)


# The tables as SQLAlchemy Core sees them, for the store's statements.
sessions = cast(Table, SessionRow.__table__)
events = cast(Table, EventRow.__table__)
surface_nodes = cast(Table, SurfaceNodeRow.__table__)
tool_calls = cast(Table, ToolCallRow.__table__)
frame_chunks = cast(Table, FrameChunkRow.__table__)
admissions = cast(Table, AdmissionRow.__table__)
admission_inputs = cast(Table, AdmissionInputRow.__table__)
requests = cast(Table, RequestRow.__table__)
idempotency_keys = cast(Table, IdempotencyKeyRow.__table__)
page_token_keys = cast(Table, PageTokenKeyRow.__table__)
