"""What every part of ``SessionStore`` shares: one (tenant, session) within the caller's
transaction, the statement batch of its deferred writes, and the running sizes it moved."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Table, and_
from sqlalchemy.ext.asyncio import AsyncConnection

from admission_service.storage.batch import StatementBatch, param
from admission_service.storage.raw import execute_raw
from admission_service.storage.rows import Growth


class SessionScope:
    """The SQL of one (tenant, session) within the caller's transaction. It reads and writes,
    never commits."""

    def __init__(self, connection: AsyncConnection, tenant: str, session_id: str) -> None:
        self.connection = connection
        self.tenant = tenant
        self.session_id = session_id
        self.batch = StatementBatch()
        # Everything this transaction's writes added to the running sizes, and the part of it
        # already sent by ``save``.
        self.growth = Growth()
        self._saved_growth = Growth()

    async def flush(self) -> None:
        """Send the deferred writes, in order, as one statement (``StatementBatch``)."""
        statement = self.batch.take()
        if statement is not None:
            await execute_raw(self.connection, *statement, raw_placeholders=True)

    async def _execute_raw(self, sql: str, params: Any, *, binary: bool = False) -> Any:
        return await execute_raw(self.connection, sql, params, binary=binary)

    def _mine(self, table: Table) -> ColumnElement[bool]:
        return and_(table.c.tenant_id == self.tenant, table.c.session_id == self.session_id)

    def _keys(self) -> dict[str, str]:
        return {"tenant_id": self.tenant, "session_id": self.session_id}

    def _where_mine(self, params: list[Any]) -> str:
        """``_mine`` for a batched statement."""
        return (
            f"tenant_id = {param(params, self.tenant)}"
            f" AND session_id = {param(params, self.session_id)}"
        )
