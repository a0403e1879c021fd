"""One transaction per session at a time in this process, queued before the pool.

The session row lock (``SELECT … FOR UPDATE``) serialises writers of one session across
replicas, but a writer waiting for it holds a pool connection while it waits. With more
concurrent writers on one hot session than the pool has connections, every connection would
wait on that one row and calls on *other* sessions would queue for a connection (SPEC §4:
mutations of different sessions never wait on each other). ``SessionGate`` queues a process's
writers of one session in memory (FIFO) before they take a connection, so a hot session holds
at most one connection per replica. A caller cancelled or past its deadline while queued just
leaves the queue; nothing was started. Entries live only while someone holds or awaits them.
``until_writers`` and ``until_idle`` let an observer (a test) wait for a queue to form or for
the gate to empty without polling.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class SessionGate:
    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}
        self._entered = asyncio.Condition()
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        """Sessions with a writer holding or awaiting the gate."""
        return len(self._locks)

    def writers(self, tenant: str, session_id: str) -> int:
        """The writers of the session holding or awaiting the gate."""
        return self._locks.get((tenant, session_id), (None, 0))[1]

    async def until_writers(self, tenant: str, session_id: str, count: int) -> None:
        """Returns once at least ``count`` writers of the session hold or await the gate."""
        async with self._entered:
            await self._entered.wait_for(lambda: self.writers(tenant, session_id) >= count)

    async def until_idle(self) -> None:
        """Returns once no writer holds or awaits the gate."""
        await self._idle.wait()

    @asynccontextmanager
    async def hold(self, tenant: str, session_id: str) -> AsyncIterator[None]:
        key = (tenant, session_id)
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        self._idle.clear()
        async with self._entered:  # uncontended: no suspension on the writers' path
            self._entered.notify_all()
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
                if not self._locks:
                    self._idle.set()
            else:
                self._locks[key] = (lock, users - 1)
