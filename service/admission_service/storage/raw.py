"""Statements sent on the transaction's psycopg connection, for what SQLAlchemy would slow down:
the binary result format (frames), and ``$n`` placeholders on a raw cursor (no client-side parse
of a long query text: the statement batch). SQLAlchemy's ``before_cursor_execute`` /
``after_cursor_execute`` / ``handle_error`` events still fire, so statement tracing sees these
statements too, and a failure is raised as SQLAlchemy would raise it (``raw_errors``)."""

from __future__ import annotations

from typing import Any, cast

import psycopg
from sqlalchemy.ext.asyncio import AsyncConnection

from admission_service.storage.raw_errors import raw_statement_error


class _RawContext:
    """The execution context handed to SQLAlchemy's cursor events for a raw statement
    (listeners may keep per-statement state on it)."""


async def execute_raw(
    connection: AsyncConnection,
    sql: str,
    params: Any,
    *,
    binary: bool = False,
    raw_placeholders: bool = False,
) -> tuple[Any, ...] | None:
    """Run ``sql`` within ``connection``'s transaction; the first row, if it returns rows."""
    raw = await connection.get_raw_connection()
    driver = cast(psycopg.AsyncConnection[Any], raw.driver_connection)
    sync = connection.sync_connection
    assert sync is not None
    dispatch = sync.dispatch
    context = _RawContext()
    cursor: psycopg.AsyncCursor[Any] = (
        psycopg.AsyncRawCursor(driver) if raw_placeholders else driver.cursor(binary=binary)
    )
    async with cursor:
        dispatch.before_cursor_execute(sync, cursor, sql, params, context, False)
        try:
            await cursor.execute(sql.encode(), params, binary=binary)
            row = await cursor.fetchone() if cursor.description is not None else None
        except Exception as error:
            raised = raw_statement_error(sync, raw.dbapi_connection, error, sql, params, context)
            if raised is error:
                raise
            if getattr(raised, "connection_invalidated", False):
                await connection.invalidate()
            raise raised from error
        dispatch.after_cursor_execute(sync, cursor, sql, params, context, False)
    return row
