"""Expiry of idempotency keys (AIP-155): the SQL the sweeper (app/sweeper.py) runs."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy.ext.asyncio import AsyncEngine

from admission_service.storage.raw import RawStatement, execute_flight

# The oldest expired keys, by the create_time index.
_EXPIRED = (
    "SELECT tenant_id, session_id, request_id FROM idempotency_keys"
    " WHERE create_time < now() - make_interval(secs => %(retention)s)"
    " ORDER BY create_time LIMIT %(batch)s"
)
# Deleted session by session: each statement stays inside one session's rows, as every other
# statement does (a distributed deployment routes it to one shard; docs/SCALING.md), and they
# go in one round trip (a flight). Keys are never updated, so no call holds a lock on an
# expired one: the sweep never waits on a call.
_DELETE = (
    "DELETE FROM idempotency_keys WHERE tenant_id = %(t)s AND session_id = %(s)s"
    " AND request_id = ANY(%(ids)s)"
    " AND create_time < now() - make_interval(secs => %(retention)s)"
)


async def sweep_expired_keys(engine: AsyncEngine, retention_seconds: float, batch: int) -> int:
    """Delete up to ``batch`` keys older than the retention window, in one short transaction;
    how many were found expired."""
    async with engine.begin() as connection:
        expired = RawStatement(
            _EXPIRED, {"retention": retention_seconds, "batch": batch}, all_rows=True
        )
        (rows,) = await execute_flight(connection, (expired,))
        by_session: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
        for tenant, session_id, request_id in rows:
            by_session[tenant, session_id].append(request_id)
        if by_session:
            await execute_flight(
                connection,
                [
                    RawStatement(
                        _DELETE,
                        {"t": tenant, "s": session_id, "ids": ids, "retention": retention_seconds},
                    )
                    for (tenant, session_id), ids in by_session.items()
                ],
            )
    return len(rows)
