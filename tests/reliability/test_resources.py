"""Scenario 8, resource bounds: a long-running loop against the real server process.

Harness loops run for a while (plus a trickle of calls that fail validation, name unknown
sessions or are cancelled mid-flight: error paths leak first). The server's resident memory is
sampled throughout; after a warm-up it must stay flat (the end within a small margin of the
start, reported with its trend), and the service's connections to PostgreSQL
(``pg_stat_activity`` for its database and ``application_name``) never exceed its pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as api

from tests.api.support import IN_HISTORY_ROUTE, user

from .checks import audit_book, idle_service_connections, service_connections
from .conftest import StartService
from .harness import Book, Running, harness_client
from .process import CHANNEL_OPTIONS
from .profile import Profile
from .scenario import create_sessions, plain_stub
from .stats import CallStats, Figures, counting_channel

pytestmark = pytest.mark.slow
POOL_SIZE, MAX_OVERFLOW = 4, 2
MIB = 2**20


async def test_resource_bounds(
    fresh_database: str,
    services: StartService,
    profile: Profile,
    figures: Callable[[str], Figures],
    seed: int,
) -> None:
    report = figures("8. resource bounds")
    service = await services(fresh_database, pool_size=POOL_SIZE, max_overflow=MAX_OVERFLOW)
    rng = random.Random(seed)
    book = Book("soak")
    stats = CallStats()
    rss: list[tuple[float, int, int]] = []  # (seconds, calls so far, bytes)
    connections: list[int] = []
    side_calls = 0
    async with plain_stub(service.target) as stub:
        await create_sessions(stub, book, 4 * profile.soak_loops)
        async with counting_channel(service.target, stats, CHANNEL_OPTIONS) as channel:
            client = harness_client(channel)
            running = Running(client, book, profile.soak_loops, seed, give_up_after=60)
            stop = running.stop

            async def error_paths() -> None:
                nonlocal side_calls
                raw = stub  # not counted with the harness calls
                while not stop.is_set():
                    side_calls += 1
                    kind = side_calls % 3
                    with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
                        if kind == 0:  # invalid: over the users limit
                            request = api.AdmitRequest(
                                session_id="soak-x", route=IN_HISTORY_ROUTE, users=[user("u")] * 65
                            )
                            await raw.Admit(request, timeout=5)
                        elif kind == 1:  # unknown session
                            await raw.Inspect(api.InspectRequest(session_id="soak-none"), timeout=5)
                        else:  # cancelled mid-flight
                            sid = rng.choice(list(book.sessions))
                            call = raw.Inspect(api.InspectRequest(session_id=sid))
                            await asyncio.sleep(rng.uniform(0, 0.01))
                            call.cancel()
                            await call
                    await asyncio.sleep(0.02)

            async def sample() -> None:
                started = time.monotonic()
                while not stop.is_set():
                    rss.append((time.monotonic() - started, stats.calls, service.rss()))
                    connections.append(
                        await service_connections(fresh_database, "admission-service")
                    )
                    await asyncio.sleep(0.5)

            side = asyncio.gather(error_paths(), sample())
            await asyncio.sleep(profile.soak_seconds)  # the soak: its length is the test
            await running.finish()
            await side
        idle_connections = await idle_service_connections(fresh_database, "admission-service")
        audited = await audit_book(stub, fresh_database, book)

    # The first fifth is warm-up (imports, caches, pool, allocator arenas).
    warm = [r for r in rss if r[0] >= profile.soak_seconds / 5]
    (_, calls0, start), (_, calls1, end) = warm[0], warm[-1]
    peak = max(b for _, _, b in warm)
    per_1000_calls = (end - start) / max(1, calls1 - calls0) * 1000
    report.set(
        seed=seed,
        loops=profile.soak_loops,
        soak_seconds=profile.soak_seconds,
        calls=stats.calls + side_calls,
        errors_by_code=stats.errors(),
        error_path_calls=side_calls,
        rss_mib_at_start_after_warmup=round(start / MIB, 1),
        rss_mib_at_end=round(end / MIB, 1),
        rss_mib_peak=round(peak / MIB, 1),
        rss_kib_growth_per_1000_calls=round(per_1000_calls / 1024, 1),
        db_connections_max=max(connections),
        db_connections_idle_after=idle_connections,
        pool=f"{POOL_SIZE}+{MAX_OVERFLOW}",
        audit=audited.as_dict(),
    )
    report.finish()
    assert not stats.errors(), stats.errors()
    assert max(connections) <= POOL_SIZE + MAX_OVERFLOW
    assert idle_connections <= POOL_SIZE + MAX_OVERFLOW
    assert end <= start * 1.15 + 16 * MIB, "resident memory grew"
