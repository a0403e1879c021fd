"""The ``Storage`` port on PostgreSQL: one pooled connection and one transaction per unit."""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import datetime
from typing import Any, Self

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from admission_service.storage import usage
from admission_service.storage.deadline import bound_by_deadline
from admission_service.storage.repository import SessionRecord, SessionStore, list_sessions


class _Usage:
    def __init__(self, connection: AsyncConnection, tenant: str) -> None:
        self._connection, self._tenant = connection, tenant

    async def lock_sessions(self) -> None:
        await usage.lock_tenant_sessions(self._connection, self._tenant)

    async def count_sessions(self) -> int:
        return await usage.count_sessions(self._connection, self._tenant)

    async def stored_bytes(self) -> int:
        return await usage.stored_bytes(self._connection, self._tenant)


class PostgresUnit:
    """A connection from the pool and ``BEGIN`` (``REPEATABLE READ`` for a snapshot), bounded
    by the call's deadline; leaving the block without ``commit`` rolls back."""

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
            if self._snapshot:
                await connection.execution_options(isolation_level="REPEATABLE READ")
            self._transaction = await stack.enter_async_context(connection.begin())
            await bound_by_deadline(connection)
            self._connection = connection
            self._stack = stack.pop_all()
        self.store = SessionStore(connection, self._tenant, self._session_id)
        self.usage = _Usage(connection, self._tenant)
        return self

    async def commit(self) -> None:
        await self.store.flush()
        await self._transaction.commit()
        self._committed = True

    async def list_sessions(
        self, after: tuple[datetime, str] | None, limit: int
    ) -> list[SessionRecord]:
        return await list_sessions(self._connection, self._tenant, after, limit)

    async def __aexit__(self, *exc: Any) -> None:
        # Rollback by default: ``connection.begin()`` would commit on a normal exit.
        try:
            if self._transaction.is_active and not self._committed:
                await self._transaction.rollback()
        finally:
            await self._stack.__aexit__(*exc)


class PostgresStorage:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    def unit(self, tenant: str, session_id: str = "", *, snapshot: bool = False) -> PostgresUnit:
        return PostgresUnit(self.engine, tenant, session_id, snapshot)
