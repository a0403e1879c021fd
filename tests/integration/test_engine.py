"""The service's engine is safe behind a transaction-mode pooler (PgBouncer and the like)."""

from __future__ import annotations

import select

import psycopg
from admission_service.storage.engine import closed_by_server, create_engine, libpq_url
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


async def test_no_server_side_prepared_statements_survive(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        for _ in range(10):  # psycopg would prepare from the 5th run with its defaults
            await connection.execute(
                text("SELECT count(*) FROM sessions WHERE tenant_id = :t"), {"t": "x"}
            )
        prepared = await connection.scalar(text("SELECT count(*) FROM pg_prepared_statements"))
    assert prepared == 0


async def test_prepared_statements_when_the_setting_asks_for_them(database_url: str) -> None:
    """``PAS_DB_PREPARED_STATEMENTS``: a statement run five times on a connection is prepared
    (PostgreSQL parses and plans it once), for a direct connection."""
    engine = create_engine(database_url, pool_size=1, max_overflow=0, prepared_statements=True)
    try:
        async with engine.connect() as connection:
            for _ in range(6):
                await connection.execute(
                    text("SELECT count(*) FROM sessions WHERE tenant_id = :t"), {"t": "x"}
                )
            prepared = await connection.scalar(text("SELECT count(*) FROM pg_prepared_statements"))
    finally:
        await engine.dispose()
    assert prepared >= 1


async def test_connections_are_named(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        name = await connection.scalar(text("SELECT current_setting('application_name')"))
    assert name == "admission-service"


async def test_a_connection_the_server_closed_is_replaced_when_it_leaves_the_pool(
    database_url: str,
) -> None:
    """No pre-ping round trip: a pooled connection whose backend was terminated (a restart, a
    pooler's idle timeout) is found closed by its socket at checkout and replaced, so the next
    call does not fail."""
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    async with engine.connect() as connection:
        doomed = await connection.scalar(text("SELECT pg_backend_pid()"))
        driver = (await connection.get_raw_connection()).driver_connection
        assert driver is not None
        socket = driver.pgconn.socket
    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), autocommit=True
    ) as killer:
        await killer.execute("SELECT pg_terminate_backend(%s)", (doomed,))
    select.select([socket], [], [], 5)  # the backend's goodbye reaches the pooled socket
    try:
        async with engine.connect() as connection:
            pid = await connection.scalar(text("SELECT pg_backend_pid()"))
    finally:
        await engine.dispose()
    assert pid != doomed


async def test_an_idle_connection_is_open_and_one_whose_backend_ended_is_closed(
    database_url: str,
) -> None:
    """``closed_by_server`` on real connections: an idle one says nothing; once its backend is
    terminated its socket is readable (the server's error, then EOF)."""
    url = libpq_url(database_url)
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as pooled,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as killer,
    ):
        assert not closed_by_server(pooled)
        await killer.execute("SELECT pg_terminate_backend(%s)", (pooled.info.backend_pid,))
        # Wait (up to 5 s) for the termination to reach the socket, then ask.
        select.select([pooled.pgconn.socket], [], [], 5)
        assert closed_by_server(pooled)
