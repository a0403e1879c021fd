"""Scenario 1, load: 64 concurrent harness loops over 200 sessions for a fixed number of steps.

Admit, Record (with tool calls and results), occasional prompt changes, non-in-history routes,
declared series, Reconcile retries and compactions, through the Python client over a real
channel to the real server process on real PostgreSQL. Zero errors other than documented
ABORTED retries; the audit passes.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import pytest

from .checks import audit_book
from .conftest import StartService
from .harness import Book, Caller, HarnessLoop, harness_client
from .process import CHANNEL_OPTIONS
from .profile import Profile
from .scenario import create_sessions, plain_stub
from .stats import CallStats, Figures, counting_channel

pytestmark = pytest.mark.slow


async def test_load(
    fresh_database: str,
    services: StartService,
    profile: Profile,
    figures: Callable[[str], Figures],
    seed: int,
) -> None:
    report = figures("1. load")
    service = await services(fresh_database)
    book = Book("load")
    stats = CallStats()
    async with plain_stub(service.target) as stub:
        await create_sessions(stub, book, profile.load_sessions)
        async with counting_channel(service.target, stats, CHANNEL_OPTIONS) as channel:
            client = harness_client(channel)
            loops = [
                HarnessLoop(book, Caller(client), random.Random(seed + i))
                for i in range(profile.load_loops)
            ]
            started = time.monotonic()
            await asyncio.wait_for(
                asyncio.gather(*(loop.run(steps=profile.load_steps) for loop in loops)),
                timeout=600,
            )
            elapsed = time.monotonic() - started
        audited = await audit_book(stub, fresh_database, book)

    errors = stats.errors()
    report.set(
        seed=seed,
        loops=profile.load_loops,
        sessions=profile.load_sessions,
        steps=sum(loop.steps_done for loop in loops),
        calls=stats.calls,
        errors_by_code=errors,
        load_seconds=round(elapsed, 1),
        calls_per_second=round(stats.calls / elapsed, 1),
        latency_ok=stats.ok_latency(),
        audit=audited.as_dict(),
    )
    report.finish()
    assert set(errors) <= {"ABORTED"}, f"errors other than ABORTED retries: {errors}"
    assert audited.unknown_committed == audited.unknown_not_committed == 0
