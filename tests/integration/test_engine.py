"""The service's engine is safe behind a transaction-mode pooler (PgBouncer and the like)."""

from __future__ import annotations

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


async def test_connections_are_named_and_pre_pinged(engine: AsyncEngine) -> None:
    assert engine.pool._pre_ping
    async with engine.connect() as connection:
        name = await connection.scalar(text("SELECT current_setting('application_name')"))
    assert name == "admission-service"
