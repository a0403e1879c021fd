"""What a tenant holds, for its quotas (app/quotas.py): read only when a quota is configured."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from admission_service.storage.raw import execute_raw
from admission_service.storage.tables import SessionRow

sessions = cast(Table, SessionRow.__table__)

# Serialises a tenant's session creations (transaction-scoped), so a session quota is exact
# across replicas. Only taken when that quota is configured.
_LOCK_TENANT = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))"


async def lock_tenant_sessions(connection: AsyncConnection, tenant: str) -> None:
    await execute_raw(connection, _LOCK_TENANT, {"key": f"sessions/{tenant}"})


async def count_sessions(connection: AsyncConnection, tenant: str) -> int:
    """The tenant's sessions (an index-only scan of its part of the listing index)."""
    statement = select(func.count()).select_from(sessions).where(sessions.c.tenant_id == tenant)
    return int((await connection.execute(statement)).scalar_one())


async def stored_bytes(connection: AsyncConnection, tenant: str) -> int:
    """The summed event-log bytes of the tenant's sessions (their running ``log_bytes``)."""
    statement = select(func.coalesce(func.sum(sessions.c.log_bytes), 0)).where(
        sessions.c.tenant_id == tenant
    )
    return int((await connection.execute(statement)).scalar_one())
