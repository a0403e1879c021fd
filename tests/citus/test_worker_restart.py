"""The reliability suite's load on the Citus cluster, with one worker restarted in the middle.

240 sessions are spread over both workers (counted inside the shards: sessions per worker);
32 harness loops drive them through the real service process on the coordinator, while one
worker is restarted with ``pg_ctl restart`` (fast: its connections are cut). Calls that met
the restart fail as retryable (UNAVAILABLE or ABORTED) and are repeated with their
``request_id``; afterwards the sessions on the restarted worker carry on; the audit finds every
acknowledged effect exactly once and every unacknowledged one whole or absent.

The service runs with ``citus.multi_task_query_log_level = error``: any statement it sends
that needs more than one shard fails (and the call with it), so a green run also shows that
every call of a harness step is routed to a single shard (the idempotency-key sweeper, whose
batch read is meant to read every shard, is off for the run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Callable

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as api
from sqlalchemy.engine import make_url

from tests.citus.cluster import CitusCluster
from tests.reliability.checks import audit_book
from tests.reliability.conftest import StartService
from tests.reliability.harness import Book, Caller, HarnessLoop, harness_client
from tests.reliability.process import CHANNEL_OPTIONS, ServiceProcess
from tests.reliability.scenario import create_sessions, plain_stub
from tests.reliability.stats import CallStats, Figures, counting_channel

pytestmark = pytest.mark.slow
SESSIONS = 240
LOOPS = 32
BEFORE_SECONDS, AFTER_SECONDS = 4.0, 4.0


def single_shard_only(url: str) -> str:
    """``url`` with every statement that would touch more than one shard made an error."""
    # No space in the value: libpq does not decode "+" in a URL (the health probe connects so).
    options = "--citus.multi_task_query_log_level=error"
    return make_url(url).update_query_dict({"options": options}).render_as_string(False)


def failures_logged(service: ServiceProcess) -> str:
    """The service's error lines (a definite failure's cause), the last few."""
    found = []
    for line in service.log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("level") == "ERROR":
                found.append(f"{record['message']}: {record.get('exception', '')[-600:]}")
    return "\n".join(found[-5:])


async def test_a_worker_restarts_mid_run_and_no_acknowledged_step_is_lost(
    cluster: CitusCluster,
    fresh_database: str,
    services: StartService,
    figures: Callable[[str], Figures],
    seed: int,
) -> None:
    report = figures("citus: worker restart under load")
    database = make_url(fresh_database).database
    assert database is not None
    # The key sweeper's batch read is a deliberate fan-out, and not a call: off for this run.
    service = await services(
        single_shard_only(fresh_database), env={"PAS_IDEMPOTENCY_SWEEP_SECONDS": "0"}
    )
    book = Book("citus")
    stats = CallStats()
    restarted = cluster.workers[0]
    async with plain_stub(service.target) as stub:
        await create_sessions(stub, book, SESSIONS)
        placement = cluster.rows_per_worker(database, "sessions")
        assert sum(placement.values()) == SESSIONS, placement
        assert min(placement.values()) >= SESSIONS // 4, f"sessions not spread: {placement}"

        async with counting_channel(service.target, stats, CHANNEL_OPTIONS) as channel:
            client = harness_client(channel)
            stop = asyncio.Event()
            loops = [
                HarnessLoop(book, Caller(client, give_up_after=120), random.Random(seed + i))
                for i in range(LOOPS)
            ]
            running = asyncio.gather(*(loop.run(stop=stop) for loop in loops))
            await asyncio.sleep(BEFORE_SECONDS)
            steps_before = sum(loop.steps_done for loop in loops)
            down = time.monotonic()
            await asyncio.to_thread(cluster.restart, restarted)
            up = time.monotonic()
            restarted_at = cluster.now(database)
            await asyncio.sleep(AFTER_SECONDS)
            stop.set()
            try:
                await asyncio.wait_for(running, timeout=300)
            except Exception as error:  # a definite failure: show what the service logged
                raise AssertionError(f"{error!r}\n{failures_logged(service)}") from error
            steps_after = sum(loop.steps_done for loop in loops) - steps_before
        audited = await audit_book(stub, fresh_database, book)
        # The guard is live: the one RPC that reads every shard fails on this service.
        with pytest.raises(grpc.aio.AioRpcError) as fan_out:
            await stub.ListSessions(api.ListSessionsRequest(page_size=5))
        assert fan_out.value.code() == grpc.StatusCode.INTERNAL
    # Events the sessions on each worker committed after the restart (in the shards).
    since = cluster.rows_per_worker(database, "events", f"commit_time > '{restarted_at}'")

    errors = stats.errors()
    after_restart = [t for t in stats.ok_times if t > up]
    report.set(
        seed=seed,
        sessions=SESSIONS,
        sessions_per_worker=placement,
        restarted=restarted.name,
        restart_seconds=round(up - down, 2),
        loops=LOOPS,
        steps_before_restart=steps_before,
        steps_after_restart=steps_after,
        events_after_restart_per_worker=since,
        calls=stats.calls,
        errors_by_code=errors,
        latency_ok=stats.ok_latency(),
        audit=audited.as_dict(),
    )
    report.finish()
    assert set(errors) <= {"UNAVAILABLE", "ABORTED"}, (
        f"non-retryable failures: {errors}\n{failures_logged(service)}"
    )
    assert steps_before > 0 and steps_after > 0 and after_restart
    assert since[restarted.name] > 0, f"no session on {restarted.name} carried on: {since}"
    assert audited.sessions == SESSIONS
