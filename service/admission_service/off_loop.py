"""Work on large content kept off a worker's event loop.

Every call a worker serves shares its one event loop, so CPU work on a large request done there
holds every other session's call on the worker: encoding, hashing or rendering 15 MiB takes tens
of milliseconds each (issue 23 item 5; ``bench.large_content`` measures another session's Admit
meanwhile). Such work runs in a thread instead. hashlib releases the GIL while it hashes;
protobuf and JSON writing hold it, but a thread gives it up between calls and every switch
interval (0.5 ms while serving: ``api/event_loop.py``), so the loop's other calls go on. Below
``LARGE_BYTES`` the thread hop costs more than the work it moves.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# The size (bytes or characters handled) from which work goes to a thread.
LARGE_BYTES = 256 * 1024


async def off_the_loop_if_large(size: int, work: Callable[[], T]) -> T:
    """``work()``, in a thread when ``size``, what it handles, is at least ``LARGE_BYTES``."""
    if size < LARGE_BYTES:
        return work()
    return await asyncio.to_thread(work)


def sha256_started(data: bytes) -> asyncio.Task[bytes]:
    """The SHA-256 of ``data``, begun now (on a thread when large) while the caller goes on:
    a streamed response's digest, which one of its chunks carries."""
    return asyncio.create_task(
        off_the_loop_if_large(len(data), lambda: hashlib.sha256(data).digest())
    )
