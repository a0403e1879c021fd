"""A transaction's end sent as a script (``raw.execute_script``: one simple-query message, the
parameters written as literals on the client) stores exactly what the same statements bound
on the server store, and never shows a value where the statement is named."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy.exc
from admission_service.storage.raw import (
    SCRIPT_MAX_PARAMETER_BYTES,
    RawStatement,
    execute_flight,
    execute_script,
    execute_unread,
    fits_a_script,
)
from psycopg.types.json import Jsonb
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

_TABLE = (
    "CREATE TEMPORARY TABLE script_values ("
    " id int PRIMARY KEY, b bytea, t text, n bigint, a bigint[], ta text[], ba bytea[],"
    " ts timestamptz, j jsonb, f boolean)"
)
_COLUMNS = "b, t, n, a, ta, ba, ts, j, f"

# What the deferred writes bind: prompts with quotes, backslashes and any Unicode; frames of any
# byte; the largest and smallest integers; arrays (typed by their elements, as psycopg binds
# them), NULLs, times, JSON.
_VALUES: list[tuple[Any, ...]] = [
    (
        bytes(range(256)) * 3,
        "it's a \\ back'slash\\' $1 %s %(x)s ;-- E'\\x00' 😀 ünïcode\n\ttabs",
        2**63 - 1,
        [1, 2**40, -(2**62)],
        ["a'b", "c\\d", "", None, '"quoted"', "{braces}", "comma,separated"],
        [b"", b"\x00\xff'\\", None],
        datetime(2026, 12, 2, 18, 0, 0, 123456, tzinfo=UTC),
        Jsonb({"text": "it's \\ \u2028", "n": [1, None, True]}),
        True,
    ),
    (b"", "", -(2**63), [], [], [], None, Jsonb([]), False),
    (None, None, None, None, None, None, None, None, None),
]


def _insert(row_id: int, values: tuple[Any, ...]) -> RawStatement:
    # Eleven and more parameters: $1 must not be taken for the start of $10.
    placeholders = ", ".join(f"${index}" for index in range(2, len(values) + 2))
    return RawStatement(
        f"INSERT INTO script_values (id, {_COLUMNS}) VALUES ($1, {placeholders})",
        [row_id, *values],
        raw_placeholders=True,
    )


async def _fresh_table(connection: AsyncConnection) -> None:
    await connection.execute(text("DROP TABLE IF EXISTS pg_temp.script_values"))
    await connection.execute(text(_TABLE))


async def _rows(connection: AsyncConnection, ids: range) -> list[tuple[Any, ...]]:
    result = await connection.execute(
        text(f"SELECT {_COLUMNS} FROM script_values WHERE id = ANY(:ids) ORDER BY id"),
        {"ids": list(ids)},
    )
    return [tuple(row) for row in result]


async def test_a_script_stores_what_server_side_binding_stores(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await _fresh_table(connection)
        bound = [_insert(index, values) for index, values in enumerate(_VALUES)]
        scripted = [_insert(100 + index, values) for index, values in enumerate(_VALUES)]
        # A negative literal after a minus sign must not start a comment ("1--5").
        negated = "UPDATE script_values SET n = 1-$1 WHERE id = $2"
        bound.append(RawStatement(negated, [-5, 0], raw_placeholders=True))
        scripted.append(RawStatement(negated, [-5, 100], raw_placeholders=True))
        await execute_flight(connection, [RawStatement("BEGIN"), *bound, RawStatement("COMMIT")])
        status = await execute_script(
            connection,
            [
                RawStatement("BEGIN"),
                RawStatement("SELECT set_config('lock_timeout', %(ms)s, true)", {"ms": "5000"}),
                *scripted,
                RawStatement("COMMIT"),
            ],
        )
        assert status == "COMMIT"
        assert await _rows(connection, range(100, 103)) == await _rows(connection, range(3))


# The secrets of the failing ends below: a script's, and one large enough that
# ``execute_unread`` sends it as a flight.
_SECRET = "the prompt nobody may read"
_FAILING_ENDS = [(execute_script, _SECRET), (execute_unread, _SECRET * 20_000)]


@pytest.mark.parametrize(("execute", "secret"), _FAILING_ENDS, ids=["script", "large-flight"])
async def test_a_failing_end_commits_nothing_and_names_no_value(
    engine: AsyncEngine, execute: Any, secret: str
) -> None:
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await _fresh_table(connection)
        row = (None, secret, 1, None, None, None, None, None, None)
        with pytest.raises(sqlalchemy.exc.IntegrityError) as raised:
            await execute(
                connection,
                [RawStatement("BEGIN"), _insert(7, row), _insert(7, row), RawStatement("COMMIT")],
            )
        assert _SECRET not in str(raised.value.statement)
        assert "$3" in str(raised.value.statement)  # the failing INSERT, as written
        driver = (await connection.get_raw_connection()).driver_connection
        assert driver is not None
        await driver.rollback()
        assert await _rows(connection, range(8)) == []


async def test_a_failing_flight_names_the_statement_the_server_refused(engine: AsyncEngine) -> None:
    """A pipeline's results arrive after every statement was sent: the error names the one
    that failed, not the last sent (it named COMMIT)."""
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await _fresh_table(connection)
        row = (None, "kept", 1, None, None, None, None, None, None)
        refused = RawStatement(
            "UPDATE script_values SET n = n / $1 WHERE id = $2", [0, 8], raw_placeholders=True
        )
        with pytest.raises(sqlalchemy.exc.DataError) as raised:
            await execute_flight(
                connection,
                [
                    RawStatement("BEGIN"),
                    _insert(8, row),
                    refused,
                    _insert(9, row),
                    RawStatement("COMMIT"),
                ],
            )
        assert raised.value.statement == refused.sql
        driver = (await connection.get_raw_connection()).driver_connection
        assert driver is not None
        await driver.rollback()
        assert await _rows(connection, range(10)) == []


# A megabyte of tool output, with every byte value and a quote: over the script's bound.
_LARGE = (bytes(range(256)) * 4096, "it's large " * 100_000)


def test_a_large_end_is_sent_as_a_flight_and_a_small_one_as_a_script() -> None:
    small = _insert(1, (b"x" * 1000, "y", *[None] * 7))
    large = _insert(2, (*_LARGE, *[None] * 7))
    assert fits_a_script([RawStatement("BEGIN"), small, RawStatement("COMMIT")])
    assert not fits_a_script([RawStatement("BEGIN"), large, RawStatement("COMMIT")])
    at_bound = _insert(3, (b"x" * SCRIPT_MAX_PARAMETER_BYTES, "", *[None] * 7))
    assert fits_a_script([at_bound])
    assert not fits_a_script([at_bound, small])


async def test_a_large_end_stores_what_a_script_stores(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await _fresh_table(connection)
        row = (*_LARGE, *_VALUES[0][2:])
        for execute, row_id in ((execute_script, 10), (execute_unread, 20)):
            status = await execute(
                connection,
                [
                    RawStatement("BEGIN"),
                    RawStatement("SELECT set_config('lock_timeout', %(ms)s, true)", {"ms": "5000"}),
                    _insert(row_id, row),
                    RawStatement("COMMIT"),
                ],
            )
            assert status == "COMMIT"
        assert await _rows(connection, range(20, 21)) == await _rows(connection, range(10, 11))
