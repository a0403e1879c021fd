"""S1-S6 (issue 7). Every service figure is paired with the floor measured in the same run."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb
from sqlalchemy import create_engine, pool
from sqlalchemy import text as sql_text

from bench.client import HAS_DELTA, PROMPT, Session, assistant, channel, stub, text, user
from bench.infra import ServerProcess

USER_CHARS = 200


@dataclass(frozen=True)
class Plan:
    """How much of each scenario to run (``full`` for the recorded run, ``smoke`` for CI)."""

    s1_samples: int
    s1_per_session: int
    s2_seconds: float
    s2_warmup: float
    s3_sizes: tuple[int, ...]
    s3_delta_samples: int
    s3_full_samples: int
    s4_samples: int
    s5_samples: int
    s5_range: int
    rss_every: float
    trace_steps: int
    trace_window: int


FULL = Plan(
    2000, 10, 60.0, 3.0, (10, 1_000, 10_000, 100_000), 200, 20, 200, 5, 10_000, 1.0, 300, 128_000
)
SMOKE = Plan(40, 10, 1.0, 0.3, (10, 300), 10, 10, 10, 1, 200, 0.5, 30, 10_000)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between closest ranks."""
    data = sorted(values)
    if len(data) == 1:
        return data[0]
    position = (len(data) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class Floor:
    """A client of the floor server's one RPC."""

    def __init__(self, target: str) -> None:
        self.channel = channel(target)
        self.step = self.channel.unary_unary(
            "/bench.Floor/Step",
            request_serializer=api.RecordRequest.SerializeToString,
            response_deserializer=api.RecordResponse.FromString,
        )
        self.message = assistant(text(USER_CHARS, "floor"))

    async def call(self, session_id: str) -> float:
        started = time.perf_counter()
        await self.step(api.RecordRequest(session_id=session_id, assistant=self.message))
        return time.perf_counter() - started

    async def close(self) -> None:
        await self.channel.close()


async def _timed_blocks(
    blocks: int,
    floor_block: Callable[[], Awaitable[list[float]]],
    service_block: Callable[[], Awaitable[list[float]]],
) -> tuple[list[float], list[float]]:
    """Alternate floor and service blocks so drift on a noisy machine hits both alike."""
    floor: list[float] = []
    service: list[float] = []
    for _ in range(blocks):
        floor += await floor_block()
        service += await service_block()
    return floor, service


async def s1_sequential(
    service: ServerProcess, floor_server: ServerProcess, plan: Plan
) -> dict[str, Any]:
    """One caller, steady state: continuing in-history series, unchanged prompt, one
    200-character user message, FULL derived request of a ~50-node surface."""
    async with channel(service.target) as ch:
        admission = stub(ch)
        floor = Floor(floor_server.target)
        sessions_needed = -(-plan.s1_samples // plan.s1_per_session)
        sessions = []
        for _ in range(sessions_needed):
            session = await Session.create(admission)
            await session.grow_to(50 - plan.s1_per_session // 2)
            sessions.append(session)
        warm = await Session.create(admission)
        await warm.grow_to(10)
        for i in range(30):
            await warm.admit(PROMPT, [user(text(USER_CHARS, f"w{i}"))])
            await floor.call("s1-warm")
        floor_id = f"s1-{uuid.uuid4().hex}"
        blocks = 10
        per_block = plan.s1_samples // blocks or 1
        cursor = iter(range(plan.s1_samples * 2))
        nodes: list[int] = []

        cpu = {"service": 0.0, "floor": 0.0}

        async def service_block() -> list[float]:
            started = service.cpu_seconds()
            out = []
            for _ in range(per_block):
                i = next(cursor)
                session = sessions[min(i // plan.s1_per_session, len(sessions) - 1)]
                nodes.append(session.nodes)
                _, elapsed = await session.admit(PROMPT, [user(text(USER_CHARS, f"s{i}"))])
                out.append(elapsed)
            cpu["service"] += service.cpu_seconds() - started
            return out

        async def floor_block() -> list[float]:
            started = floor_server.cpu_seconds()
            out = [await floor.call(floor_id) for _ in range(per_block)]
            cpu["floor"] += floor_server.cpu_seconds() - started
            return out

        floor_lat, service_lat = await _timed_blocks(blocks, floor_block, service_block)
        await floor.close()
    f50, f99 = percentile(floor_lat, 50), percentile(floor_lat, 99)
    s50, s99 = percentile(service_lat, 50), percentile(service_lat, 99)
    return {
        "samples": len(service_lat),
        "surface_nodes_mean": round(statistics.mean(nodes), 1),
        "floor_p50_ms": ms(f50),
        "floor_p99_ms": ms(f99),
        "admit_p50_ms": ms(s50),
        "admit_p99_ms": ms(s99),
        "p50_ratio": round(s50 / f50, 3),
        "p99_ratio": round(s99 / f99, 3),
        # Server CPU per call (the process's user + system time): steadier than latency on a
        # shared machine, and what throughput is made of.
        "floor_cpu_ms_per_call": round(cpu["floor"] * 1000 / len(floor_lat), 3),
        "admit_cpu_ms_per_call": round(cpu["service"] * 1000 / len(service_lat), 3),
    }


async def _throughput(
    workers: int, seconds: float, warmup: float, step: Callable[[int], Awaitable[None]]
) -> float:
    """Steps per second completed by ``workers`` concurrent loops over ``seconds`` (after a
    warm-up that is not counted)."""
    counting = False
    done = 0
    stop = False

    async def loop(worker: int) -> None:
        nonlocal done
        while not stop:
            await step(worker)
            if counting:
                done += 1

    tasks = [asyncio.create_task(loop(w)) for w in range(workers)]
    await asyncio.sleep(warmup)
    counting = True
    started = time.perf_counter()
    await asyncio.sleep(seconds)
    counted = done
    elapsed = time.perf_counter() - started
    stop = True
    await asyncio.gather(*tasks)
    return counted / elapsed


async def s2_throughput_and_s6_memory(
    service: ServerProcess, floor_server: ServerProcess, plan: Plan, workers: int = 16
) -> tuple[dict[str, Any], dict[str, Any]]:
    """16 concurrent callers on 16 sessions, Admit + Record per step (DELTA view: harness
    workers keep the prefix), against the floor's calls/s at 16 callers. The service's RSS is
    sampled throughout (S6)."""
    floor = Floor(floor_server.target)
    floor_ids = [f"s2-{uuid.uuid4().hex}" for _ in range(workers)]

    async def floor_step(worker: int) -> None:
        await floor.call(floor_ids[worker])

    floor_rate = await _throughput(workers, min(plan.s2_seconds, 20.0), plan.s2_warmup, floor_step)
    await floor.close()

    async with channel(service.target) as ch:
        admission = stub(ch)
        sessions = [await Session.create(admission) for _ in range(workers)]
        for session in sessions:
            await session.grow_to(10)
            await session.admit(PROMPT, [user(text(USER_CHARS, "first"))])
        reply = assistant(text(USER_CHARS, "reply"))

        async def service_step(worker: int) -> None:
            session = sessions[worker]
            await session.admit(PROMPT, [user(text(USER_CHARS, str(session.step)))], delta=True)
            await session.record(
                reply, [], input_tokens=1000, output_tokens=50, cache_read_tokens=900
            )

        rss: list[tuple[float, float]] = []
        started = time.perf_counter()

        async def sample_rss() -> None:
            while True:
                rss.append((time.perf_counter() - started, service.rss_mib()))
                await asyncio.sleep(plan.rss_every)

        sampler = asyncio.create_task(sample_rss())
        rss_before = service.rss_mib()
        rate = await _throughput(workers, plan.s2_seconds, plan.s2_warmup, service_step)
        sampler.cancel()
        rss_after = service.rss_mib()
    half = [value for at, value in rss if at >= (plan.s2_seconds + plan.s2_warmup) / 2]
    s2 = {
        "workers": workers,
        "seconds": plan.s2_seconds,
        "view": "DELTA" if HAS_DELTA else "FULL",
        "floor_calls_per_s": round(floor_rate, 1),
        "steps_per_s": round(rate, 1),
        "throughput_ratio": round(rate / floor_rate, 3),
        "surface_nodes_at_end": max(s.nodes for s in sessions),
    }
    s6 = {
        "rss_before_mib": round(rss_before, 1),
        "rss_after_mib": round(rss_after, 1),
        "rss_peak_mib": round(max(v for _, v in rss), 1),
        "rss_second_half_growth_mib": round(max(half) - min(half), 1) if half else 0.0,
        "samples": [(round(at, 1), round(v, 1)) for at, v in rss],
    }
    return s2, s6


async def settle(database_url: str) -> None:
    """After seeding a long session in bulk: VACUUM ANALYZE, so the measurements that follow see
    the steady state (fresh statistics, no autovacuum of the bulk load competing for the CPU)
    rather than the aftermath of loading 100 000 nodes in a minute."""

    def run() -> None:
        engine = create_engine(database_url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(sql_text("VACUUM (ANALYZE)"))
        finally:
            engine.dispose()

    await asyncio.to_thread(run)


async def s3_length_and_s4_inspect(
    service: ServerProcess, plan: Plan, database_url: str
) -> dict[str, Any]:
    """Admit (DELTA and FULL) and Inspect at growing surfaces.

    Every size is seeded first; then the measurements rotate over the sizes in rounds (a few
    calls per size per round), so a load change on a shared machine hits every size alike
    instead of skewing the ratio between sizes measured minutes apart."""
    rounds = 10
    sessions: dict[int, Session] = {}
    seeded: dict[int, float] = {}
    delta: dict[int, list[float]] = {}
    full: dict[int, list[float]] = {}
    inspect: dict[int, list[float]] = {}
    async with channel(service.target) as ch:
        admission = stub(ch)
        for size in plan.s3_sizes:
            session = await Session.create(admission)
            started = time.perf_counter()
            await session.grow_to(size)
            seeded[size] = time.perf_counter() - started
            sessions[size] = session
            delta[size], full[size], inspect[size] = [], [], []
        await settle(database_url)
        for session in sessions.values():
            await session.admit(PROMPT, [user(text(USER_CHARS, "warm"))])

        async def inspect_once(session: Session) -> float:
            request = api.InspectRequest(session_id=session.session_id)
            if HAS_DELTA:
                request.view = pb.REQUEST_VIEW_DELTA
                request.held_prefix.message_count = session.held.count
                request.held_prefix.digest = session.held.digest
            t0 = time.perf_counter()
            await admission.Inspect(request)
            return time.perf_counter() - t0

        for r in range(rounds):
            for size, session in sessions.items():
                for i in range(plan.s3_delta_samples // rounds):
                    _, elapsed = await session.admit(
                        PROMPT, [user(text(USER_CHARS, f"d{r}-{i}"))], delta=True
                    )
                    delta[size].append(elapsed)
                # Inspect right after a DELTA Admit: the held prefix is current.
                for _ in range(plan.s4_samples // rounds):
                    inspect[size].append(await inspect_once(session))
                if r * plan.s3_full_samples // rounds != (r + 1) * plan.s3_full_samples // rounds:
                    _, elapsed = await session.admit(PROMPT, [user(text(USER_CHARS, f"f{r}"))])
                    full[size].append(elapsed)
                    await session.admit(PROMPT, [user(text(USER_CHARS, f"h{r}"))], delta=True)
    results: dict[str, Any] = {"rounds": rounds, "sizes": {}}
    for size, session in sessions.items():
        results["sizes"][str(size)] = {
            "nodes": session.nodes,
            "seed_s": round(seeded[size], 2),
            "delta_p50_ms": ms(percentile(delta[size], 50)),
            "full_p50_ms": ms(percentile(full[size], 50)),
            "inspect_p50_ms": ms(percentile(inspect[size], 50)),
            "samples": [len(delta[size]), len(full[size]), len(inspect[size])],
        }
    sizes = results["sizes"]
    small, large = sizes[str(plan.s3_sizes[0])], sizes[str(plan.s3_sizes[-1])]
    span = large["nodes"] - small["nodes"]
    results["delta_ratio_large_to_small"] = round(large["delta_p50_ms"] / small["delta_p50_ms"], 3)
    results["full_us_per_node"] = round(
        (large["full_p50_ms"] - small["full_p50_ms"]) * 1000 / span, 3
    )
    results["inspect_ratio_large_to_small"] = round(
        large["inspect_p50_ms"] / small["inspect_p50_ms"], 3
    )
    return results


async def s5_compact(service: ServerProcess, plan: Plan) -> dict[str, Any]:
    """Compact commit over a ``plan.s5_range``-node range (PlanCompaction timed separately)."""
    commits: list[float] = []
    plans: list[float] = []
    ranges: list[int] = []
    async with channel(service.target) as ch:
        admission = stub(ch)
        for _ in range(plan.s5_samples):
            session = await Session.create(admission)
            await session.grow_to(plan.s5_range + 300)
            end_index = max(e for e in session.group_ends if e <= plan.s5_range)
            t0 = time.perf_counter()
            planned = await admission.PlanCompaction(
                api.PlanCompactionRequest(
                    session_id=session.session_id,
                    range=pb.SeqRange(start_seq=session.seqs[1], end_seq=session.seqs[end_index]),
                )
            )
            plans.append(time.perf_counter() - t0)
            ranges.append(len(planned.shadowed_seqs))
            t0 = time.perf_counter()
            await admission.Compact(
                api.CompactRequest(
                    session_id=session.session_id,
                    plan_token=planned.plan_token,
                    summary="The agent read the project files and planned the change.",
                )
            )
            commits.append(time.perf_counter() - t0)
    return {
        "samples": len(commits),
        "range_nodes": min(ranges),
        "compact_p50_ms": ms(percentile(commits, 50)),
        "plan_p50_ms": ms(percentile(plans, 50)),
    }


def rpc_error_text(exc: grpc.RpcError) -> str:
    return f"{exc.code()}: {exc.details()}"  # type: ignore[attr-defined]
