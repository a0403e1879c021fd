"""The event loop a server process runs on: uvloop (libuv's loop, the default) or asyncio's.

Every call's path crosses the loop many times (gRPC's completion queue, each PostgreSQL round
trip's wait, the tasks around them); on uvloop a one-call step costs 17 to 27 % less CPU
(docs/BENCHMARKS.md, issue 14's third round). ``PAS_EVENT_LOOP=asyncio`` keeps the standard
library's loop, e.g. to rule the loop out while chasing a problem.

While a server process runs its loop, the interpreter hands the GIL between threads every
0.5 ms instead of every 5 ms. Large requests are parsed, converted and counted on worker
threads so that the loop can go on serving other calls (issue 23 item 5). A thread that
runs Python keeps the GIL until the loop has waited one switch interval for it, and a small
call needs the GIL at each of its several loop wake-ups. With 5 ms, every wake-up waited up
to 5 ms behind a 15 MiB request's conversion. The interval only matters while two threads
want the GIL, so a step that has no worker thread costs the same. Measured with
``python -m bench.large_content`` (docs/BENCHMARKS.md, tenth round): another session's Admit
p99 under 15 MiB refused requests went from 51 to 41-42 ms, and its max from 125-164 to 49 ms.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

LOOPS = ("uvloop", "asyncio")
SWITCH_INTERVAL_SECONDS = 0.0005


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop named ``name`` (None: asyncio's default)."""
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    if name == "asyncio":
        return None
    raise ValueError(f"unknown event loop {name!r}; one of {', '.join(LOOPS)}")


def run(main: Coroutine[Any, Any, None], name: str) -> None:
    """Run ``main`` to completion on a new loop of the kind ``name``, with the GIL's switch
    interval at ``SWITCH_INTERVAL_SECONDS`` meanwhile."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    try:
        with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
            runner.run(main)
    finally:
        sys.setswitchinterval(interval)
