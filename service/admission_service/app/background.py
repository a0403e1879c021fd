"""A server's periodic background work (the idempotency sweeper, the database probe), in a task
of its own that stops when asked — also when a cancellation is lost.

Cancelling the task is not enough on Python 3.11: ``asyncio.wait_for``, which psycopg's waits
use, returns the inner result and drops the cancellation when both land in the same loop
iteration (CPython gh-86296, fixed in 3.12). The loop then sleeps on as if it had never been
cancelled, and a shutdown awaiting it waits for ever: a worker's stop hung there until the
shutdown watchdog ended it (a stress run of SIGTERMs under load, docs/SCALING.md). So the loop
also checks a flag before each round, and ``stop`` waits a bounded time: a round still running
then is left to the process's end, logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

_log = logging.getLogger(__name__)

# How long ``stop`` waits for a round in progress (a sweep's batch, a probe's SELECT 1: each a
# short statement bounded by its own timeout).
STOP_SECONDS = 5.0


class PeriodicTask:
    """``body()`` every ``interval_seconds`` (sleeping first: a starting server serves before
    it works in the background), from ``start`` until ``stop``."""

    def __init__(
        self, name: str, interval_seconds: float, body: Callable[[], Awaitable[None]]
    ) -> None:
        self.name = name
        self.interval_seconds = interval_seconds
        self._body = body
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None and self.interval_seconds > 0:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.interval_seconds)
            if self._stopping:  # a cancellation lost in the sleep's last moment
                return
            await self._body()

    async def stop(self, timeout_seconds: float = STOP_SECONDS) -> None:
        """Stop: no round starts after this; the one in progress is cancelled and awaited for
        at most ``timeout_seconds``."""
        self._stopping = True
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=timeout_seconds)
        if not done:
            _log.warning(
                "%s did not stop within %gs of its cancellation; left to the process's end",
                self.name,
                timeout_seconds,
            )
            return
        if not task.cancelled() and (error := task.exception()) is not None:
            _log.warning("%s ended with an error", self.name, exc_info=error)
