"""The event loop a server process runs on: uvloop (libuv's loop, the default) or asyncio's.

Every call's path crosses the loop many times (gRPC's completion queue, each PostgreSQL round
trip's wait, the tasks around them); on uvloop a one-call step costs 17 to 27 % less CPU
(docs/BENCHMARKS.md, issue 14's third round). ``PAS_EVENT_LOOP=asyncio`` keeps the standard
library's loop, e.g. to rule the loop out while chasing a problem.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

LOOPS = ("uvloop", "asyncio")


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop named ``name`` (None: asyncio's default)."""
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    if name == "asyncio":
        return None
    raise ValueError(f"unknown event loop {name!r}; one of {', '.join(LOOPS)}")


def run(main: Coroutine[Any, Any, None], name: str) -> None:
    """Run ``main`` to completion on a new loop of the kind ``name``."""
    with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
        runner.run(main)
