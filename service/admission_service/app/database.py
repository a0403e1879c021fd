"""The ``Storage`` port on PostgreSQL: one pooled connection and one transaction per unit."""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import datetime
from typing import Any, Self

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from admission_service.domain.session import Session
from admission_service.storage import usage
from admission_service.storage.deadline import deadline_bound
from admission_service.storage.raw import RawStatement
from admission_service.storage.repository import SessionStore, list_sessions

_BEGIN = RawStatement("BEGIN")
_BEGIN_SNAPSHOT = RawStatement("BEGIN ISOLATION LEVEL REPEATABLE READ")


class _Usage:
    def __init__(self, connection: AsyncConnection, store: SessionStore) -> None:
        self._connection, self._store = connection, store

    async def lock_sessions(self) -> None:
        await self._store.begin()
        await usage.lock_tenant_sessions(self._connection, self._store.tenant)

    async def count_sessions(self) -> int:
        await self._store.begin()
        return await usage.count_sessions(self._connection, self._store.tenant)

    async def stored_bytes(self) -> int:
        await self._store.begin()
        return await usage.stored_bytes(self._connection, self._store.tenant)


class TransactionRolledBack(RuntimeError):
    """PostgreSQL answered a unit's ``COMMIT`` with ``ROLLBACK``: nothing was committed."""


class PostgresUnit:
    """A connection from the pool and a transaction (``REPEATABLE READ`` for a snapshot),
    bounded by the call's deadline; leaving the block without ``commit`` rolls back.

    The transaction is explicit on an autocommit connection, so that its ``BEGIN`` and the
    deadline's bounds travel with its first statement and its ``COMMIT`` with its last writes
    (``SessionScope``'s prelude and ``flush_and_commit``): a step costs no round trip for
    either. (In psycopg's own transactions, ``BEGIN`` is a round trip of its own.)"""

    store: SessionStore
    usage: _Usage

    def __init__(self, engine: AsyncEngine, tenant: str, session_id: str, snapshot: bool) -> None:
        self._engine = engine
        self._tenant, self._session_id, self._snapshot = tenant, session_id, snapshot
        self._stack = AsyncExitStack()
        self._committed = False

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            connection = await stack.enter_async_context(self._engine.connect())
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            self._connection = connection
            self._stack = stack.pop_all()
        prelude = [_BEGIN_SNAPSHOT if self._snapshot else _BEGIN]
        if (bound := deadline_bound()) is not None:
            prelude.append(bound)
        self.store = SessionStore(connection, self._tenant, self._session_id, prelude)
        self.usage = _Usage(connection, self.store)
        return self

    async def commit(self) -> None:
        status = await self.store.flush_and_commit()
        self._committed = True
        if status != "COMMIT":
            raise TransactionRolledBack(f"COMMIT answered {status!r}")

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
        # Rollback by default (a no-op on the wire when no statement was sent, or after COMMIT).
        try:
            if not self._committed and not self._connection.invalidated:
                raw = await self._connection.get_raw_connection()
                driver = raw.driver_connection
                if driver is not None and not driver.closed:
                    await driver.rollback()
        finally:
            await self._stack.__aexit__(*exc)


class PostgresStorage:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    def unit(self, tenant: str, session_id: str = "", *, snapshot: bool = False) -> PostgresUnit:
        return PostgresUnit(self.engine, tenant, session_id, snapshot)
