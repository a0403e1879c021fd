"""Scenario 6, process crash: ``kill -9`` the service process under load, start it again.

The harness loops keep going: while the process is down their calls fail (UNAVAILABLE) and
they repeat each call with its ``request_id`` until it is acknowledged. At each kill the
calls in flight are noted, and which of them had committed (their response is stored) is
read from the database while no process runs: those are responses lost to the crash after
the commit, and their retries must return the stored result, not commit again. Afterwards
everything acknowledged is there exactly once, nothing half-written is visible (the audit),
and the dead process's database connections are gone.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import pytest

from .checks import audit_book, committed_request_ids, service_connections
from .conftest import StartService
from .harness import Book, Running, harness_client
from .process import CHANNEL_OPTIONS
from .profile import Profile
from .scenario import create_sessions, plain_stub
from .stats import CallStats, Figures, counting_channel

pytestmark = pytest.mark.slow
POOL_SIZE, MAX_OVERFLOW = 6, 4


async def test_process_crash(
    fresh_database: str,
    services: StartService,
    profile: Profile,
    figures: Callable[[str], Figures],
    seed: int,
) -> None:
    report = figures("6. process crash")
    rng = random.Random(seed)
    service = await services(fresh_database, pool_size=POOL_SIZE, max_overflow=MAX_OVERFLOW)
    book = Book("crash")
    stats = CallStats()
    in_flight: list[int] = []
    committed_at_kill: list[int] = []
    downtimes: list[float] = []
    async with plain_stub(service.target) as stub:
        await create_sessions(stub, book, 2 * profile.crash_loops)
        async with counting_channel(service.target, stats, CHANNEL_OPTIONS) as channel:
            client = harness_client(channel)
            running = Running(client, book, profile.crash_loops, seed, give_up_after=300)
            for _ in range(profile.crash_kills):
                await asyncio.sleep(rng.uniform(1.0, 3.0))
                killed = time.monotonic()
                await service.kill()
                pending = [e for e in book.effects() if not e.acked]
                committed = await committed_request_ids(
                    fresh_database, [e.request_id for e in pending]
                )
                in_flight.append(len(pending))
                committed_at_kill.append(len(committed))
                await service.start()
                downtimes.append(time.monotonic() - killed)
            await running.every_loop_steps("after the last restart")
            await running.finish()
        connections = await service_connections(fresh_database, "admission-service")
        audited = await audit_book(stub, fresh_database, book)

    unacknowledged = [e for e in book.effects() if not e.acked]
    report.set(
        seed=seed,
        loops=profile.crash_loops,
        kills=profile.crash_kills,
        calls=stats.calls,
        errors_by_code=stats.errors(),
        calls_in_flight_at_each_kill=in_flight,
        of_which_committed_before_the_kill=committed_at_kill,
        restart_seconds=[round(d, 2) for d in downtimes],
        steps=running.steps,
        connections_after=connections,
        audit=audited.as_dict(),
    )
    report.finish()
    assert set(stats.errors()) <= {"UNAVAILABLE"}, stats.errors()
    assert not unacknowledged, "every call was acknowledged in the end"
    # The killed processes' connections were closed by the kernel and dropped by PostgreSQL.
    assert connections <= POOL_SIZE + MAX_OVERFLOW
