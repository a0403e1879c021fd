"""What every part of ``SessionStore`` shares: one (tenant, session) within the caller's
transaction, the statements the transaction still has to send before its next one (its
*prelude*: ``BEGIN`` and the deadline's bounds, sent with the first statement), the statement
batch of its deferred writes, and the running sizes it moved."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Executable, Table, and_
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncConnection

from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.session import Session
from admission_service.domain.stored import Growth
from admission_service.storage.batch import StatementBatch, Write, param
from admission_service.storage.failures import SessionMoved, moved
from admission_service.storage.held_frames import HeldFrames
from admission_service.storage.raw import RawStatement, execute_flight, execute_unread
from admission_service.storage.rows import StoredInputs
from admission_service.storage.session_cache import CachedSession, SessionCache

COMMIT = RawStatement("COMMIT")
NOT_READ = object()  # ``_kept``: nothing was read ahead for that key


class SessionScope:
    """The SQL of one (tenant, session) within the caller's transaction. It reads and writes,
    never commits (``PostgresUnit`` sends the ``COMMIT``, with the last writes).

    ``prelude``: statements that must run before any other of the transaction (the unit's
    explicit ``BEGIN`` on an autocommit connection, the deadline's ``SET LOCAL``s); they travel
    in the same round trip as the transaction's first statement."""

    def __init__(
        self,
        connection: AsyncConnection,
        tenant: str,
        session_id: str,
        prelude: Sequence[RawStatement] = (),
        cache: SessionCache | None = None,
        held_frames: HeldFrames | None = None,
    ) -> None:
        self.connection = connection
        self.tenant = tenant
        self.session_id = session_id
        self.batch = StatementBatch()
        self._prelude = list(prelude)
        # The worker's cached sessions (session_cache.py); ``warm``: the session came from the
        # cache (``entry``), not read, so its row is checked by the commit (``_saved_row``: the
        # session row's checked UPDATE, sent last, after the other deferred writes, in the same
        # statement, at ``read_version``: the version read or cached).
        self.cache = cache
        self.entry: CachedSession | None = None
        self.warm = False
        # Whether ``stored_response`` assumed, on a cached session, that none is stored (what a
        # commit's insert checks, and a refusal cannot: ``PostgresUnit.__aexit__``).
        self.response_assumed_absent = False
        self.read_version: int | None = None
        self._saved_row: Write | None = None
        # What a commit leaves for the cache: the aggregate the step saved, or the session it
        # created (nothing else written).
        self.saved: SessionAggregate | None = None
        self.created: SessionAggregate | None = None
        self.made_calls: set[str] = set()  # the tool calls this transaction made
        # The tool calls this transaction made whose rows are deferred, by id (an answer to one
        # goes into its row: a deferred update could not see it).
        self.unsent_calls: dict[str, dict[str, Any]] = {}
        # The seal of the frame chunks a FULL read found unsealed, sent with the commit
        # (frame_chunks.py); dropped by a replacement.
        self.seal: RawStatement | None = None
        # The worker's copies of large node frames (held_frames.py), and those a FULL read of
        # this transaction found, which its commit leaves held (None: no FULL read).
        self.held_frames = held_frames
        self.frames_to_hold: dict[int, bytes] | None = None
        # The large frames of the nodes this transaction wrote (held too once it commits).
        self.frames_written: dict[int, bytes] = {}
        # What ``lock`` read ahead with the lock, by (kind, key), until asked for.
        self._read_ahead: dict[tuple[str, object], Any] = {}
        # Everything this transaction's writes added to the running sizes.
        self.growth = Growth()
        # An admission of this session whose prompt and tools are stored, with their digests:
        # the one this transaction found (cached or read ahead), then the one it adds.
        self.known_inputs: StoredInputs | None = None
        # The session row as this transaction found it (cached, read or created): its save
        # sends only the large values that changed (``SessionRows.save``).
        self.found: Session | None = None

    def _keep(self, kind: str, key: object, value: Any) -> None:
        """Keep ``value``, read ahead, for the one ``_kept(kind, key)`` that will ask for it."""
        self._read_ahead[(kind, key)] = value

    def _kept(self, kind: str, key: object) -> Any:
        """What was read ahead for ``(kind, key)`` (once), else ``NOT_READ``."""
        return self._read_ahead.pop((kind, key), NOT_READ)

    @property
    def checks_row(self) -> bool:
        """Whether the commit writes the session row, checking its version."""
        return self._saved_row is not None

    async def begin(self) -> None:
        """Send the prelude now if it has not gone yet (before a statement sent otherwise)."""
        if self._prelude:
            await self._flight()

    async def flush(self) -> None:
        """Send the deferred writes, in order, as one statement (``StatementBatch``)."""
        await self._flight(*self._deferred())

    async def flush_and_commit(self) -> str:
        """The seal of new frame chunks, the deferred writes, the session row's checked UPDATE
        and ``COMMIT`` in one round trip; the COMMIT's status ("COMMIT", or "ROLLBACK" when the
        transaction had failed). A transaction on a cached session whose cache was stale fails
        here whole (``SessionMoved``)."""
        # Chunks are sealed only by a commit that moves the row's version: a worker's held
        # chunks are named by that version (held_frames.py).
        seal = (self.seal,) if self.seal is not None and self._saved_row is not None else ()
        prelude, self._prelude = self._prelude, []
        statements = (*prelude, *seal, *self._deferred(self._saved_row), COMMIT)
        try:
            # Nothing is read back: one simple-query message, or a flight when the writes are
            # large (raw.execute_unread).
            return await execute_unread(self.connection, statements)
        except Exception as error:
            self._raise_moved(error)
            raise

    def _deferred(self, last: Write | None = None) -> tuple[RawStatement, ...]:
        self.unsent_calls = {}
        statement = self.batch.take(last)
        if statement is None:
            return ()
        sql, params = statement
        return (RawStatement(sql, params, raw_placeholders=True),)

    async def _flight(self, *statements: RawStatement) -> list[Any]:
        """``statements`` after the unsent prelude, in one round trip; for each of them (not the
        prelude's), its first row or, if it returns none, its command status."""
        prelude, self._prelude = self._prelude, []
        if not prelude and not statements:
            return []
        try:
            rows = await execute_flight(self.connection, (*prelude, *statements))
        except Exception as error:
            self._raise_moved(error)
            raise
        return rows[len(prelude) :]

    def _raise_moved(self, error: Exception) -> None:
        """On a cached session, a write the cache took for new that the database refuses
        (failures.moved) means the cache was stale: nothing will commit."""
        if self.warm and moved(error):
            raise SessionMoved(self.session_id) from error

    async def _execute_raw(
        self, sql: str, params: Any, *, binary: bool = False, flush: bool = False
    ) -> Any:
        """``sql`` (psycopg placeholders) on the raw connection, its first row; ``flush``: after
        the deferred writes, in the same round trip (so that it reads what they wrote)."""
        deferred = self._deferred() if flush else ()
        *_, row = await self._flight(*deferred, RawStatement(sql, params, binary=binary))
        return row

    async def _execute(
        self, statement: Executable, parameters: dict[str, Any] | None = None
    ) -> CursorResult[Any]:
        """A SQLAlchemy statement (after the prelude, if it has not gone yet)."""
        await self.begin()
        return await self.connection.execute(statement, parameters)

    def _mine(self, table: Table) -> ColumnElement[bool]:
        return and_(table.c.tenant_id == self.tenant, table.c.session_id == self.session_id)

    def _keys(self) -> dict[str, str]:
        return {"tenant_id": self.tenant, "session_id": self.session_id}

    @property
    def key(self) -> tuple[str, str]:
        """(tenant, session_id): what a deferred write's builder captures (``where_session``)."""
        return self.tenant, self.session_id

    def _where_mine(self, params: list[Any], alias: str = "") -> str:
        """``_mine`` for a batched statement (on the table named ``alias``, if given)."""
        return where_session(params, self.key, alias)


def where_session(params: list[Any], key: tuple[str, str], alias: str = "") -> str:
    """The condition on one (tenant, session) of a batched statement (on the table named
    ``alias``, if given). A deferred write's builder calls it with the ``key`` it captured,
    never with its scope: a builder holding the scope is a cycle (scope, batch, builder,
    scope) that keeps a call's state alive until a full collection when the batch is never
    taken (a validate_only call, a refusal), and with it, in the state the call saved, the
    frames of its new messages (15 MiB for a large step)."""
    prefix = f"{alias}." if alias else ""
    tenant, session_id = key
    return (
        f"{prefix}tenant_id = {param(params, tenant)}"
        f" AND {prefix}session_id = {param(params, session_id)}"
    )
