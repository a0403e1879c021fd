"""The page-token keys stored in the database (migration 0006; app/page_tokens.py)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from admission_service.storage.tables import page_token_keys


async def stored_page_token_keys(engine: AsyncEngine) -> list[bytes]:
    """Every stored secret, the newest first (it signs; the others verify)."""
    statement = select(page_token_keys.c.secret).order_by(
        page_token_keys.c.create_time.desc(), page_token_keys.c.secret
    )
    async with engine.connect() as connection:
        return [bytes(secret) for (secret,) in await connection.execute(statement)]
