"""Scenario 5, database outage: PostgreSQL stops in the middle of the load (a fast shutdown:
open connections are terminated), the service keeps running, PostgreSQL starts again.

During the outage every call fails fast with UNAVAILABLE (DATABASE_UNAVAILABLE), never hangs
until its deadline and is never UNKNOWN or INTERNAL; afterwards the same service process
recovers by itself (no restart) and the harness loops, which repeat each call with its
``request_id`` until it is acknowledged, finish; the audit passes. This runs on an embedded
PostgreSQL of the test's own, never on the shared server.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

import pytest

from .checks import audit_book, service_connections
from .conftest import OwnPostgres, StartService
from .harness import Book, Running, harness_client
from .process import CHANNEL_OPTIONS
from .profile import Profile
from .scenario import create_sessions, plain_stub
from .stats import CallStats, Figures, counting_channel, latency_summary

pytestmark = pytest.mark.slow
POOL_SIZE, MAX_OVERFLOW = 6, 4
FAIL_FAST_SECONDS = 2.5  # far below the 10 s deadline a hanging call would run into


async def test_database_outage(
    own_postgres: OwnPostgres,
    services: StartService,
    profile: Profile,
    figures: Callable[[str], Figures],
    seed: int,
) -> None:
    report = figures("5. database outage")
    service = await services(
        own_postgres.url(), migrate=True, pool_size=POOL_SIZE, max_overflow=MAX_OVERFLOW
    )
    pid = service.pid
    book = Book("outage")
    stats = CallStats()
    windows: list[tuple[float, float]] = []
    recoveries: list[float] = []
    async with plain_stub(service.target) as stub:
        await create_sessions(stub, book, 2 * profile.outage_loops)
        async with counting_channel(service.target, stats, CHANNEL_OPTIONS) as channel:
            client = harness_client(channel)
            running = Running(client, book, profile.outage_loops, seed, give_up_after=300)
            await running.every_loop_steps("before the outage")
            for _ in range(profile.outages):
                down = time.monotonic()
                await own_postgres.stop()
                await asyncio.sleep(profile.outage_seconds)
                await own_postgres.start()
                up = time.monotonic()
                windows.append((down, up))
                # Recovered by itself: a call succeeds again, same process.
                while not any(t > up for t in stats.ok_times):
                    assert time.monotonic() - up < 30, "the service did not recover"
                    await asyncio.sleep(0.05)
                recoveries.append(min(t for t in stats.ok_times if t > up) - up)
                await running.every_loop_steps("after the outage")
            await running.finish()
        assert service.running and service.pid == pid and service.starts == 1
        connections = await service_connections(own_postgres.url(), "admission-service")
        audited = await audit_book(stub, own_postgres.url(), book)

    during = [f for f in stats.failures if any(a <= f[3] <= b + 0.5 for a, b in windows)]
    outside = [f for f in stats.failures if f not in during]
    during_codes = Counter(code for code, *_ in during)
    report.set(
        seed=seed,
        loops=profile.outage_loops,
        outages=profile.outages,
        outage_seconds=profile.outage_seconds,
        calls=stats.calls,
        errors_by_code=stats.errors(),
        failed_attempts_during_outages=dict(during_codes),
        failed_attempt_latency=latency_summary([seconds for _, seconds, *_ in during]),
        failures_outside_outages=dict(Counter(code for code, *_ in outside)),
        recovery_seconds_after_postgres_ready=[round(r, 2) for r in recoveries],
        steps=running.steps,
        service_restarts=service.starts - 1,
        connections_after=connections,
        audit=audited.as_dict(),
    )
    report.finish()
    assert set(stats.errors()) <= {"UNAVAILABLE"}, stats.errors()
    assert during_codes["UNAVAILABLE"] > 0, "no call met the outage"
    slowest = max(seconds for _, seconds, *_ in during)
    assert slowest < FAIL_FAST_SECONDS, f"a failed call took {slowest:.2f}s"
    assert connections <= POOL_SIZE + MAX_OVERFLOW
