"""Per-tenant quotas (issue 13): sessions, stored bytes and concurrent calls.

Each is off (0) unless configured. A call over a quota gets ``RESOURCE_EXHAUSTED`` with a reason
naming the quota and commits nothing:

* ``sessions``: a CreateSession that would give the tenant more sessions. Exact across replicas
  (creations of one tenant take a transaction-scoped advisory lock while the quota is on).
* ``stored_bytes``: a write that adds to the tenant's event logs (the summed ``log_bytes`` of its
  sessions) beyond the quota. The tenant's usage is read at most every
  ``usage_refresh_seconds`` per replica, so concurrent writers may overshoot by what they write
  within that window; deleting sessions frees quota.
* ``concurrent_calls``: calls of the tenant in progress on this replica (each replica counts its
  own, so the tenant's total is at most the quota times the replicas).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from admission_service.app.limits import Quotas
from admission_service.app.ports import TenantUsage
from admission_service.domain.errors import (
    ConcurrentCallsQuotaExceeded,
    ResourceExhausted,
    SessionsQuotaExceeded,
    StoredBytesQuotaExceeded,
)


def _exceeded(
    error: type[ResourceExhausted], quota: str, limit: int, message: str, **values: str
) -> ResourceExhausted:
    return error(
        f"the tenant's {quota} quota ({limit}, PAS_QUOTA_{quota.upper()}) {message}",
        quota=quota,
        limit=str(limit),
        **values,
    )


class TenantQuotas:
    """Enforces ``Quotas``; one per process."""

    def __init__(self, quotas: Quotas) -> None:
        self.quotas = quotas
        self._calls: dict[str, int] = {}
        self._stored: dict[str, tuple[float, int]] = {}  # tenant -> (read at, bytes)

    @asynccontextmanager
    async def call(self, tenant: str) -> AsyncIterator[None]:
        """One call of ``tenant`` in progress (refused when at the concurrency quota)."""
        limit = self.quotas.concurrent_calls
        if not limit:
            yield
            return
        running = self._calls.get(tenant, 0)
        if running >= limit:
            raise _exceeded(
                ConcurrentCallsQuotaExceeded,
                "concurrent_calls",
                limit,
                "is reached on this replica: retry when a call has finished",
            )
        self._calls[tenant] = running + 1
        try:
            yield
        finally:
            left = self._calls[tenant] - 1
            if left:
                self._calls[tenant] = left
            else:
                del self._calls[tenant]

    async def check_new_session(self, usage: TenantUsage) -> None:
        """After inserting a new session, in the creating transaction (so a retried create
        that replays is never refused): the count, the new one included, under the tenant's
        lock, which also sees every creation committed before it."""
        limit = self.quotas.sessions
        if not limit:
            return
        await usage.lock_sessions()
        if await usage.count_sessions() > limit:
            raise _exceeded(
                SessionsQuotaExceeded,
                "sessions",
                limit,
                "is reached: delete sessions to create more",
            )

    async def check_stored_bytes(self, usage: TenantUsage, tenant: str, added: int) -> None:
        """Before committing a write that adds ``added`` bytes to the tenant's event logs. The
        bytes count as stored only once committed (``stored``): a dry run, a refusal or a
        cancellation after the check takes nothing of the quota."""
        limit = self.quotas.stored_bytes
        if not limit or added <= 0:
            return
        now = time.monotonic()
        read_at, stored = self._stored.get(tenant, (float("-inf"), 0))
        if now - read_at >= self.quotas.usage_refresh_seconds:
            stored = await usage.stored_bytes()
            self._stored[tenant] = (now, stored)
        if stored + added > limit:
            raise _exceeded(
                StoredBytesQuotaExceeded,
                "stored_bytes",
                limit,
                f"would be exceeded ({stored} bytes stored, {added} more): delete sessions",
                stored=str(stored),
                added=str(added),
            )

    def stored(self, tenant: str, added: int) -> None:
        """A write that added ``added`` bytes to the tenant's event logs committed: counted in
        the usage this replica knows until it reads it again."""
        known = self._stored.get(tenant)
        if known is not None and added > 0:
            self._stored[tenant] = (known[0], known[1] + added)
