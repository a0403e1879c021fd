"""The ``Storage`` port on PostgreSQL: one pooled connection and one transaction per unit, and
the worker's cache of the sessions it wrote (``session_cache.py``): a unit on a cached session
sends nothing until its commit, which checks the cache was current; and the large node frames
a worker's commits wrote or read FULL (``held_frames.py``), which the next FULL read need not
fetch."""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import datetime
from typing import Any, Self

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from admission_service.domain.session import Session
from admission_service.domain.stored import Growth
from admission_service.storage import session_rows
from admission_service.storage.deadline import deadline_bound
from admission_service.storage.failures import SessionMoved, classify
from admission_service.storage.held_frames import HeldFrames
from admission_service.storage.raw import RawStatement
from admission_service.storage.repository import SessionStore, list_sessions
from admission_service.storage.session_cache import CachedSession, SessionCache

_BEGIN = RawStatement("BEGIN")
_BEGIN_SNAPSHOT = RawStatement("BEGIN ISOLATION LEVEL REPEATABLE READ")


class _Usage:
    def __init__(self, connection: AsyncConnection, store: SessionStore) -> None:
        self._connection, self._store = connection, store

    async def lock_sessions(self) -> None:
        await self._store.begin()
        await session_rows.lock_tenant_sessions(self._connection, self._store.tenant)

    async def count_sessions(self) -> int:
        await self._store.begin()
        return await session_rows.count_sessions(self._connection, self._store.tenant)

    async def stored_bytes(self) -> int:
        await self._store.begin()
        return await session_rows.stored_bytes(self._connection, self._store.tenant)


class TransactionRolledBack(RuntimeError):
    """PostgreSQL answered a unit's ``COMMIT`` with ``ROLLBACK``: nothing was committed."""


class PostgresUnit:
    """A connection from the pool and a transaction (``REPEATABLE READ`` for a snapshot),
    bounded by the call's deadline; leaving the block without ``commit`` rolls back.

    The transaction is explicit on an autocommit connection, so that its ``BEGIN`` and the
    deadline's bounds travel with its first statement and its ``COMMIT`` with its last writes
    (``SessionScope``'s prelude and ``flush_and_commit``): a step costs no round trip for
    either. (In psycopg's own transactions, ``BEGIN`` is a round trip of its own.)

    On a session the worker cached, the store reads nothing (``SessionRows.read``): the commit
    is the step's one round trip, and its check of the row's version fails it whole when the
    cache was stale (``SessionMoved``: the step runs again, fresh). A unit that leaves
    otherwise on a cached session first checks the cache was current (``verify``), so that an
    answer made on it — a refusal, a ``validate_only`` — is never one a stale cache made. A
    commit leaves the cache what it committed; a unit that could not keep the cache current
    leaves it nothing for the session (the next unit reads it afresh).

    A commit that saved the session also leaves the worker the large node frames its FULL read
    found and its writes wrote (``held_frames.py``), named by the version the commit left."""

    store: SessionStore
    usage: _Usage

    def __init__(
        self,
        engine: AsyncEngine,
        cache: SessionCache | None,
        held: HeldFrames | None,
        tenant: str,
        session_id: str,
        snapshot: bool,
    ) -> None:
        self._engine, self._cache, self._held = engine, cache, held
        self._tenant, self._session_id, self._snapshot = tenant, session_id, snapshot
        self._stack = AsyncExitStack()
        self._committed = False
        # The cache entry the unit started from, checked current (put back if nothing commits).
        self._verified: CachedSession | None = None

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            connection = await stack.enter_async_context(self._engine.connect())
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            self._connection = connection
            self._stack = stack.pop_all()
        prelude = [_BEGIN_SNAPSHOT if self._snapshot else _BEGIN]
        if (bound := deadline_bound()) is not None:
            prelude.append(bound)
        cache = None if self._snapshot else self._cache
        self.store = SessionStore(
            connection, self._tenant, self._session_id, prelude, cache, self._held
        )
        self.usage = _Usage(connection, self.store)
        return self

    async def commit(self) -> None:
        if self.store.warm and not self.store.checks_row:
            await self.verify()  # a commit that does not write the row does not check it
        status = await self.store.flush_and_commit()
        self._committed = True
        if status != "COMMIT":
            raise TransactionRolledBack(f"COMMIT answered {status!r}")
        store, version = self.store, self.store.read_version
        if store.saved is not None and self._held is not None:
            assert version is not None  # a saved session was read or cached at a version
            self._held.committed(self._key, version, store.frames_to_hold, store.frames_written)
        if self._cache is None or version is None:
            return
        # What the step saved, as its commit left the row (one version on), or the session it
        # created. Any other commit leaves nothing: what it wrote is in no aggregate, and the
        # row's version would not tell a cached one from the stored session.
        if store.saved is not None:
            saved = store.saved.committed(store.growth)
            known = store.known_inputs
            inputs = known.kept_for(saved.admission) if known is not None else None
            self._cache.put(self._key, CachedSession(saved, version + 1, inputs))
        elif store.created is not None and store.growth == Growth():
            self._cache.put(self._key, CachedSession(store.created, version))

    async def verify(self) -> None:
        """Check that the cached session this unit runs on is the stored one (one round trip;
        nothing when it was read under its lock): ``SessionMoved`` when not."""
        store = self.store
        if not store.warm:
            return
        assert store.entry is not None
        if await store.row_version() != store.entry.row_version:
            raise SessionMoved(self._session_id)
        store.warm, self._verified = False, store.entry

    @property
    def _key(self) -> tuple[str, str]:
        return (self._tenant, self._session_id)

    async def list_sessions(
        self,
        after: tuple[datetime, str] | None,
        limit: int,
        *,
        newest_first: bool = False,
        id_prefix: str = "",
    ) -> list[Session]:
        await self.store.begin()
        return await list_sessions(
            self._connection,
            self._tenant,
            after,
            limit,
            newest_first=newest_first,
            id_prefix=id_prefix,
        )

    async def __aexit__(self, *exc: Any) -> None:
        error = exc[1]
        try:
            if isinstance(error, Exception) and classify(error) is None and not self._committed:
                # A refusal (or any failure not the database's) made on a cached session is
                # answered only once the cache is known to have been current, and only when
                # the call's request_id has no stored response: a retry of a committed call
                # is refused on the state it left (a compaction plan now stale), so it runs
                # again on a fresh read, which replays it.
                if self.store.response_assumed_absent:
                    raise SessionMoved(self._session_id) from error
                try:
                    await self.verify()
                except SessionMoved as moved:
                    raise moved from error
            if self._verified is not None and not self._committed and self._cache is not None:
                self._cache.put(self._key, self._verified)  # nothing committed: still current
        finally:
            try:
                await self._roll_back()
            finally:
                await self._stack.__aexit__(*exc)

    async def _roll_back(self) -> None:
        """Roll back unless committed (a no-op on the wire when no statement was sent)."""
        if self._committed or self._connection.invalidated:
            return
        raw = await self._connection.get_raw_connection()
        driver = raw.driver_connection
        if driver is not None and not driver.closed:
            await driver.rollback()


class PostgresStorage:
    """Units on ``engine``, with a session cache of ``cache_bytes`` and large node frames held
    up to ``held_frame_bytes`` (0: neither)."""

    def __init__(self, engine: AsyncEngine, cache_bytes: int, held_frame_bytes: int = 0) -> None:
        self.engine = engine
        self.cache = SessionCache(cache_bytes) if cache_bytes > 0 else None
        self.held = HeldFrames(held_frame_bytes) if held_frame_bytes > 0 else None

    def unit(self, tenant: str, session_id: str = "", *, snapshot: bool = False) -> PostgresUnit:
        return PostgresUnit(self.engine, self.cache, self.held, tenant, session_id, snapshot)
