"""A stop that cannot finish must not hold the port: the shutdown watchdog.

On SIGTERM the server gives in-flight calls ``PAS_SHUTDOWN_GRACE_SECONDS``, cancels what is
left, then stops its sweeper, closes its database pool and flushes its spans. Each of those is
bounded, so a stop that runs ``PAS_SHUTDOWN_OVERRUN_SECONDS`` past the grace is stuck: a task
that swallows its cancellation, a C call that never returns, a lock never released. Left alone,
the process would hold the port (and, under ``PAS_WORKERS``, keep its parent waiting) until an
orchestrator's SIGKILL, which hides where it stuck. The watchdog instead writes every thread's
stack and every pending asyncio task's stack to stderr (the log's stream) and ends the process
with status ``EXIT_STUCK``: the supervisor above restarts it, and the stacks say what to fix.

It runs in a thread of its own, so it fires even when the event loop itself is blocked.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import sys
import threading
from types import TracebackType

_log = logging.getLogger(__name__)

EXIT_STUCK = 70  # EX_SOFTWARE (sysexits.h): an internal error, not a configuration one


class ShutdownWatchdog:
    """``with ShutdownWatchdog(limit):`` around a stop: if the block has not left ``limit``
    seconds after it entered, the stacks go to stderr and the process exits ``EXIT_STUCK``."""

    def __init__(self, limit_seconds: float) -> None:
        self.limit_seconds = limit_seconds
        self._left = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._watch, name="shutdown-watchdog", daemon=True)

    def __enter__(self) -> ShutdownWatchdog:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # a stop outside any event loop: only the threads are reported
            self._loop = None
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._left.set()
        self._thread.join()

    def _watch(self) -> None:
        if self._left.wait(self.limit_seconds):
            return
        _log.critical(
            "the shutdown did not finish within %gs: every thread's and task's stack follows; "
            "exiting with status %d",
            self.limit_seconds,
            EXIT_STUCK,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        self._print_pending_tasks()
        sys.stderr.flush()
        os._exit(EXIT_STUCK)  # the stuck stop would never let an orderly exit through

    def _print_pending_tasks(self) -> None:
        """The loop's pending tasks, where each awaits. Read from this thread while the loop's
        own may run: a diagnostic that reads a frame as it changes is still worth printing."""
        if self._loop is None:
            return
        try:
            tasks = asyncio.all_tasks(self._loop)
        except RuntimeError:  # the set kept changing under the read
            return
        for task in tasks:
            try:
                task.print_stack(file=sys.stderr)
            except Exception as exc:  # a frame torn down mid-read
                sys.stderr.write(f"  (stack unreadable: {exc!r})\n")
