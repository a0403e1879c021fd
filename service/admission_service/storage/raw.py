"""Statements sent on the transaction's psycopg connection, for what SQLAlchemy would slow down:
the binary result format (frames), ``$n`` placeholders on a raw cursor (no client-side parse
of a long query text: the statement batch), and several statements in one round trip (a
*flight*: a psycopg pipeline, so the transaction's ``BEGIN``, its first read, the writes before
a read and the ``COMMIT`` after the last writes travel together). SQLAlchemy's
``before_cursor_execute`` / ``after_cursor_execute`` / ``handle_error`` events still fire, so
statement tracing sees these statements too, and a failure is raised as SQLAlchemy would raise
it (``raw_errors``).

A transaction's end that reads nothing back (its last writes and ``COMMIT``, and on a session
the worker cached its ``BEGIN`` too) goes as a *script* instead: one simple-query message with
the parameters bound on the client as literals. Measured on this machine for BEGIN, the
deadline's bounds, one write and COMMIT: a pipeline costs psycopg ~0.65 ms of CPU (~0.2 ms to
open, ~0.1 ms a statement, a wait for each result) and ~1 ms of wall time; the script ~0.13 ms
and ~0.35 ms, as one statement sent alone does. Literals cost with their size, though: a
``bytea`` literal is hex, written on the event loop, twice the value's bytes on the wire and
decoded by the server; so an end whose parameters pass ``SCRIPT_MAX_PARAMETER_BYTES`` (a
megabyte of tool output, say) goes as a flight instead, its parameters sent as they are
(``execute_unread``)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from psycopg import abc, adapt, pq
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
    statement that returns no rows). When one fails, those after it do not run (PostgreSQL
    skips the rest of the pipeline) and its error is raised as SQLAlchemy would raise it."""
    driver = await _driver(connection)
    sent: list[tuple[RawStatement, psycopg.AsyncCursor[Any], _RawContext]] = []
    failing = _Failing(statements[0])
    async with _as_sqlalchemy(connection, failing) as dispatch, AsyncExitStack() as cursors:
        try:
            async with AsyncExitStack() as flight:
                if len(statements) > 1:
                    await flight.enter_async_context(driver.pipeline())
                for statement in statements:
                    cursor: psycopg.AsyncCursor[Any] = await cursors.enter_async_context(
                        psycopg.AsyncRawCursor(driver)
                        if statement.raw_placeholders
                        else driver.cursor(binary=statement.binary)
                    )
                    failing.statement, failing.context = statement, _RawContext()
                    dispatch.before(cursor, statement.sql, statement.params, failing.context)
                    sent.append((statement, cursor, failing.context))
                    await cursor.execute(
                        statement.sql.encode(), statement.params, binary=statement.binary
                    )
        except psycopg.Error as error:
            _name_the_failing(failing, error, sent)
            raise
        # Leaving the pipeline sent its Sync and read every result: the one round trip.
        rows: list[Any] = [await _answer(statement, cursor) for statement, cursor, _ in sent]
    for statement, cursor, context in sent:
        dispatch.after(cursor, statement.sql, statement.params, context)
    return rows


def _name_the_failing(
    failing: _Failing,
    error: psycopg.Error,
    sent: Sequence[tuple[RawStatement, psycopg.AsyncCursor[Any], _RawContext]],
) -> None:
    """Point ``failing`` at the statement the server refused. A pipeline's results are read
    after its statements were sent (at its end, or as its buffer fills), so the statement
    being sent is not the one that failed: that is the first without a result, since
    psycopg sets a statement's result only once it succeeded, in order. An error the server
    did not send (a value the driver could not bind) is the statement being sent's."""
    if error.pgresult is None:
        return
    for statement, cursor, context in sent:
        if cursor.pgresult is None:
            failing.statement, failing.context = statement, context
            return


# Above this many bytes of parameters, a transaction's end goes as a flight, not a script.
SCRIPT_MAX_PARAMETER_BYTES = 256 * 1024


async def execute_unread(connection: AsyncConnection, statements: Sequence[RawStatement]) -> str:
    """Run ``statements``, whose results nobody reads, in one round trip; the command status of
    the last (``"COMMIT"``…): as a script (``execute_script``) while their parameters are small,
    else as a flight (``execute_flight``), which sends them as they are."""
    if fits_a_script(statements):
        return await execute_script(connection, statements)
    *_, status = await execute_flight(connection, statements)
    return str(status)


def fits_a_script(statements: Sequence[RawStatement]) -> bool:
    """Whether ``statements``' parameters are small enough to be written as literals: their
    bytes and characters, not over ``SCRIPT_MAX_PARAMETER_BYTES``."""
    return sum(map(_parameter_bytes, statements)) <= SCRIPT_MAX_PARAMETER_BYTES


def _parameter_bytes(statement: RawStatement) -> int:
    params = statement.params
    if not params:
        return 0
    values = params.values() if isinstance(params, dict) else params
    return sum(len(value) for value in values if isinstance(value, bytes | str))


async def execute_script(connection: AsyncConnection, statements: Sequence[RawStatement]) -> str:
    """Run ``statements`` in order as one simple-query message, their parameters bound as
    literals (see the module docstring: a transaction's end that reads nothing back); the
    command status of the last (``"COMMIT"``…). PostgreSQL stops at the first that fails, and
    its error is raised as SQLAlchemy would raise it, naming the script's statements with
    their placeholders: the values, which hold prompts, never reach a span, a log or an
    error."""
    driver = await _driver(connection)
    transformer = adapt.Transformer(driver)
    # One statement a line: a comment in one never hides the next.
    script = b";\n".join(_with_literals(statement, transformer, driver) for statement in statements)
    failing = _Failing(RawStatement("; ".join(statement.sql for statement in statements)))
    contexts = [_RawContext() for _ in statements]
    failing.context = contexts[-1]  # its span reports a failure, as a pipeline's last does
    async with _as_sqlalchemy(connection, failing) as dispatch:
        async with driver.cursor() as cursor:
            for statement, context in zip(statements, contexts, strict=True):
                dispatch.before(cursor, statement.sql, statement.params, context)
            await cursor.execute(script)  # no parameters: the simple-query protocol
            while cursor.nextset():  # every statement's result, to the last one's status
                pass
            status = cursor.statusmessage
        for statement, context in zip(statements, contexts, strict=True):
            dispatch.after(cursor, statement.sql, statement.params, context)
    return str(status)


# A server-side placeholder in a raw statement (``$1``…); the statements built here hold no
# string literal, only the schema's names and placeholders.
_RAW_PLACEHOLDER = re.compile(rb"\$(\d+)")


def _with_literals(
    statement: RawStatement, transformer: abc.Transformer, driver: psycopg.AsyncConnection[Any]
) -> bytes:
    """``statement``'s SQL with each parameter written as the literal psycopg would send for
    it (typed as it would bind it: ``'…'::bytea``, ``'{…}'::int8[]``, ``'…'::timestamptz``)."""
    sql, params = statement.sql, statement.params
    if params is None:
        return sql.encode()
    if statement.raw_placeholders:
        texts: dict[str, bytes] = {}  # a key's text recurs in every write of the statement
        literals = [_literal(value, transformer, texts) for value in params]
        return _RAW_PLACEHOLDER.sub(lambda match: literals[int(match[1]) - 1], sql.encode())
    return psycopg.AsyncClientCursor(driver).mogrify(sql, params).encode()


def _literal(value: Any, transformer: abc.Transformer, texts: dict[str, bytes]) -> bytes:
    """``value`` as a literal: psycopg's own (``as_literal``), written here for the kinds a
    deferred write binds most (~1 µs each through psycopg, 85 a step)."""
    kind = type(value)
    if value is None:
        return b"NULL"
    if kind is bool:
        return b"true" if value else b"false"
    if kind is int:
        return b" %d" % value  # a space first (psycopg's for a negative): "1-" "-5" is no comment
    if kind is str:
        if (literal := texts.get(value)) is None:
            literal = texts[value] = bytes(transformer.as_literal(value))
        return literal
    return bytes(transformer.as_literal(value))


async def _driver(connection: AsyncConnection) -> psycopg.AsyncConnection[Any]:
    raw = await connection.get_raw_connection()
    return cast(psycopg.AsyncConnection[Any], raw.driver_connection)


class _Failing:
    """The statement being sent (the one a failure names) and its tracing context."""

    def __init__(self, statement: RawStatement) -> None:
        self.statement = statement
        self.context = _RawContext()


class _Dispatch:
    """SQLAlchemy's cursor events on the connection, for statements sent on its driver."""

    def __init__(self, connection: AsyncConnection) -> None:
        sync = connection.sync_connection
        assert sync is not None
        self.sync, self._events = sync, sync.dispatch

    def before(self, cursor: Any, sql: str, params: Any, context: _RawContext) -> None:
        self._events.before_cursor_execute(self.sync, cursor, sql, params, context, False)

    def after(self, cursor: Any, sql: str, params: Any, context: _RawContext) -> None:
        self._events.after_cursor_execute(self.sync, cursor, sql, params, context, False)


@asynccontextmanager
async def _as_sqlalchemy(
    connection: AsyncConnection, failing: _Failing
) -> AsyncIterator[_Dispatch]:
    """The block's driver errors raised as SQLAlchemy would raise them for ``failing``'s
    statement (the connection invalidated when it is gone)."""
    dispatch = _Dispatch(connection)
    raw = await connection.get_raw_connection()
    try:
        yield dispatch
    except Exception as error:
        raised = raw_statement_error(
            dispatch.sync,
            raw.dbapi_connection,
            error,
            failing.statement.sql,
            failing.statement.params,
            failing.context,
        )
        if raised is error:
            raise
        if getattr(raised, "connection_invalidated", False):
            await connection.invalidate()
        raise raised from error
