"""One transaction per session at a time in this process, queued before the pool.

The session row lock (``SELECT … FOR UPDATE``) serialises writers of one session across
replicas, but a writer waiting for it holds a pool connection while it waits. With more
concurrent writers on one hot session than the pool has connections, every connection would
wait on that one row and calls on *other* sessions would queue for a connection (SPEC §4:
mutations of different sessions never wait on each other). ``SessionGate`` queues a process's
writers of one session in memory (FIFO) before they take a connection, so a hot session holds
at most one connection per replica. A caller cancelled or past its deadline while queued just
leaves the queue; nothing was started. Entries live only while someone holds or awaits them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class SessionGate:
    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        """Sessions with a writer holding or awaiting the gate."""
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, tenant: str, session_id: str) -> AsyncIterator[None]:
        key = (tenant, session_id)
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
