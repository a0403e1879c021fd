"""Statements sent on the transaction's psycopg connection, for what SQLAlchemy would slow down:
the binary result format (frames), ``$n`` placeholders on a raw cursor (no client-side parse
of a long query text: the statement batch), and several statements in one round trip (a
*flight*: a psycopg pipeline, so the transaction's ``BEGIN``, its first read, the writes before
a read and the ``COMMIT`` after the last writes travel together). SQLAlchemy's
``before_cursor_execute`` / ``after_cursor_execute`` / ``handle_error`` events still fire, so
statement tracing sees these statements too, and a failure is raised as SQLAlchemy would raise
it (``raw_errors``)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from psycopg import pq
from sqlalchemy.ext.asyncio import AsyncConnection

from admission_service.storage.raw_errors import raw_statement_error


@dataclass(frozen=True, slots=True)
class RawStatement:
    """One statement of a flight: psycopg placeholders (``%(name)s``), or server-side ``$n``
    ones with ``raw_placeholders``; ``binary``: the binary result format; ``all_rows``: its
    answer is every row (a list), not the first."""

    sql: str
    params: Any = None
    binary: bool = False
    raw_placeholders: bool = False
    all_rows: bool = False


async def _answer(statement: RawStatement, cursor: psycopg.AsyncCursor[Any]) -> Any:
    """A statement's answer in a flight: its first row (None when none), every row
    (``all_rows``: a list, empty for a statement that returns none), or, for a statement that
    returns no rows, its command status."""
    if not _has_rows(cursor):
        return [] if statement.all_rows else cursor.statusmessage
    return await cursor.fetchall() if statement.all_rows else await cursor.fetchone()


def _has_rows(cursor: psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement returned rows (the result's status; ``cursor.description`` would
    build a column object per field only to be compared with None)."""
    result = cursor.pgresult
    return result is not None and result.status == pq.ExecStatus.TUPLES_OK


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
    (row,) = await execute_flight(
        connection, (RawStatement(sql, params, binary, raw_placeholders),)
    )
    return row if isinstance(row, tuple) else None


async def execute_flight(
    connection: AsyncConnection, statements: Sequence[RawStatement]
) -> list[Any]:
    """Run ``statements`` in order within ``connection``'s transaction, in one round trip (a
    pipeline when there are several); for each, its answer (``_answer``: its first row, None
    when it found none, every row with ``all_rows``, or the command status, ``"COMMIT"``…, of a
    statement that returns no rows). When one
    fails, those after it do not run (PostgreSQL skips the rest of the pipeline) and its error is
    raised as SQLAlchemy would raise it."""
    raw = await connection.get_raw_connection()
    driver = cast(psycopg.AsyncConnection[Any], raw.driver_connection)
    sync = connection.sync_connection
    assert sync is not None
    dispatch = sync.dispatch
    sent: list[tuple[RawStatement, psycopg.AsyncCursor[Any], _RawContext]] = []
    try:
        async with AsyncExitStack() as cursors:
            async with AsyncExitStack() as flight:
                if len(statements) > 1:
                    await flight.enter_async_context(driver.pipeline())
                for statement in statements:
                    cursor: psycopg.AsyncCursor[Any] = await cursors.enter_async_context(
                        psycopg.AsyncRawCursor(driver)
                        if statement.raw_placeholders
                        else driver.cursor(binary=statement.binary)
                    )
                    context = _RawContext()
                    dispatch.before_cursor_execute(
                        sync, cursor, statement.sql, statement.params, context, False
                    )
                    sent.append((statement, cursor, context))
                    await cursor.execute(
                        statement.sql.encode(), statement.params, binary=statement.binary
                    )
            # Leaving the pipeline sent its Sync and read every result: the one round trip.
            rows: list[Any] = [await _answer(statement, cursor) for statement, cursor, _ in sent]
    except Exception as error:
        failed, _, context = sent[-1] if sent else (statements[0], None, _RawContext())
        raised = raw_statement_error(
            sync, raw.dbapi_connection, error, failed.sql, failed.params, context
        )
        if raised is error:
            raise
        if getattr(raised, "connection_invalidated", False):
            await connection.invalidate()
        raise raised from error
    for statement, cursor, context in sent:
        dispatch.after_cursor_execute(sync, cursor, statement.sql, statement.params, context, False)
    return rows
