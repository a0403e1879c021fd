"""Expiry of idempotency keys (AIP-155): the SQL the sweeper (app/sweeper.py) runs."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

# One small batch, oldest first by the create_time index. SKIP LOCKED: a key a call is writing
# or replaying right now is left for the next sweep, so the sweep never waits on a call (and
# replicas sweeping at once take different rows).
_SWEEP = text(
    "DELETE FROM idempotency_keys AS k USING ("
    " SELECT tenant_id, session_id, request_id FROM idempotency_keys"
    " WHERE create_time < now() - make_interval(secs => :retention)"
    " ORDER BY create_time LIMIT :batch FOR UPDATE SKIP LOCKED) AS old"
    " WHERE k.tenant_id = old.tenant_id AND k.session_id = old.session_id"
    " AND k.request_id = old.request_id"
)


async def sweep_expired_keys(engine: AsyncEngine, retention_seconds: float, batch: int) -> int:
    """Delete up to ``batch`` keys older than the retention window, in one short transaction;
    how many were deleted."""
    async with engine.begin() as connection:
        result = await connection.execute(_SWEEP, {"retention": retention_seconds, "batch": batch})
    return int(result.rowcount or 0)
