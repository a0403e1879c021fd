"""S1-S6 (issue 7). Every service figure is paired with the floor measured in the same run."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb
from sqlalchemy import create_engine, pool
from sqlalchemy import text as sql_text

from bench import transport_floor
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
    # S7 (bench/streamed_full.py): FULL Admits per wire format, and the session's tool outputs
    # of ~0.9 MB (5: over a million tokens).
    s7_samples: int = 30
    s7_text_results: int = 5


FULL = Plan(
    2000, 10, 60.0, 3.0, (10, 1_000, 10_000, 100_000), 200, 20, 200, 5, 10_000, 1.0, 300, 128_000
)
SMOKE = replace(
    Plan(40, 10, 1.0, 0.3, (10, 300), 10, 10, 10, 1, 200, 0.5, 30, 10_000),
    s7_samples=2,
    s7_text_results=1,
)


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
    """One caller of a floor server's one RPC, on a connection of its own (as each of the
    service's callers is): with a multi-process floor the kernel hands each connection to one
    process, so callers sharing one connection would load only one of them."""

    def __init__(self, target: str) -> None:
        self.channel = channel(target, own_connection=True)
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
        await self.channel.close(None)


async def _timed_blocks(
    blocks: int, *kinds: Callable[[], Awaitable[list[float]]]
) -> list[list[float]]:
    """Alternate one block of each kind of call, ``blocks`` times, so drift on a noisy machine
    hits every kind alike; the latencies of each kind."""
    samples: list[list[float]] = [[] for _ in kinds]
    for _ in range(blocks):
        for kind, out in zip(kinds, samples, strict=True):
            out += await kind()
    return samples


async def _step_sessions(admission: Any, count: int, nodes: int) -> list[Session]:
    """Sessions grown to ``nodes`` nodes whose latest admission awaits its output (and whose
    caller holds the derived request's prefix): ready for one-call steps."""
    sessions = []
    for _ in range(count):
        session = await Session.create(admission)
        await session.grow_to(nodes)
        await session.admit(PROMPT, [user(text(USER_CHARS, "start"))], delta=True)
        sessions.append(session)
    return sessions


REPLY = assistant(text(USER_CHARS, "reply"))
USAGE = {"input_tokens": 1000, "output_tokens": 50, "cache_read_tokens": 900}


async def one_call_step(session: Session, label: str) -> float:
    """One agent step in one call: the previous admission's output (a 200-character assistant
    message and the provider's usage) and the next step's 200-character user message, DELTA."""
    _, elapsed = await session.one_call(PROMPT, [user(text(USER_CHARS, label))], REPLY, [], **USAGE)
    return elapsed


async def s1_sequential(
    service: ServerProcess,
    floor_server: ServerProcess,
    physical_server: ServerProcess,
    plan: Plan,
    leans: dict[str, ServerProcess] | None = None,
    deployed: ServerProcess | None = None,
) -> dict[str, Any]:
    """One caller, steady state, four kinds of call in alternating blocks: the physical floor's
    call, the same-stack floor's call, an Admit (continuing in-history series, unchanged prompt,
    one 200-character user message, FULL derived request of a ~50-node surface) and a one-call
    step (the previous output + the next admission, DELTA); one more kind per server in
    ``leans`` (name → server: the lean step prototypes, ``bench/lean_step.py``), reported
    under ``<name>_*``; and with ``deployed`` (the service as deployments run it: its default
    prepared-statement setting for a ``DATABASE_URL``) the same one-call step on it, reported
    under ``step_as_deployed_*``. Every kind's caller has a connection of its own."""
    async with contextlib.AsyncExitStack() as stack:
        ch = await stack.enter_async_context(channel(service.target, own_connection=True))
        admission = stub(ch)
        floor = Floor(floor_server.target)
        physical = Floor(physical_server.target)
        lean_clients = {name: Floor(server.target) for name, server in (leans or {}).items()}
        sessions_needed = -(-plan.s1_samples // plan.s1_per_session)
        sessions = []
        for _ in range(sessions_needed):
            session = await Session.create(admission)
            await session.grow_to(50 - plan.s1_per_session // 2)
            sessions.append(session)
        steppers = await _step_sessions(admission, sessions_needed, 50 - plan.s1_per_session)
        warm = await Session.create(admission)
        await warm.grow_to(10)
        warm_steps = await _step_sessions(admission, 1, 10)
        # The as-deployed service's caller: its own channel, sessions and warm-up alike.
        deployed_steppers: list[Session] = []
        deployed_warm: list[Session] = []
        if deployed is not None:
            dch = await stack.enter_async_context(channel(deployed.target, own_connection=True))
            deployed_steppers = await _step_sessions(
                stub(dch), sessions_needed, 50 - plan.s1_per_session
            )
            deployed_warm = await _step_sessions(stub(dch), 1, 10)
        for i in range(30):
            await warm.admit(PROMPT, [user(text(USER_CHARS, f"w{i}"))])
            await one_call_step(warm_steps[0], f"w{i}")
            for session in deployed_warm:
                await one_call_step(session, f"w{i}")
            await floor.call("s1-warm")
            await physical.call("s1-warm")
            for client in lean_clients.values():
                await client.call("s1-warm")
        floor_id = f"s1-{uuid.uuid4().hex}"
        blocks = 10
        per_block = plan.s1_samples // blocks or 1
        nodes: list[int] = []
        cpu = {"service": 0.0, "step": 0.0, "deployed": 0.0, "floor": 0.0, "physical": 0.0}
        cpu |= {name: 0.0 for name in lean_clients}
        admits = iter(range(plan.s1_samples * 2))

        async def admit_block() -> list[float]:
            started = service.cpu_seconds()
            out = []
            for _ in range(per_block):
                i = next(admits)
                session = sessions[min(i // plan.s1_per_session, len(sessions) - 1)]
                nodes.append(session.nodes)
                _, elapsed = await session.admit(PROMPT, [user(text(USER_CHARS, f"s{i}"))])
                out.append(elapsed)
            cpu["service"] += service.cpu_seconds() - started
            return out

        def step_block(
            server: ServerProcess, sessions: list[Session], key: str
        ) -> Callable[[], Any]:
            steps = iter(range(plan.s1_samples * 2))

            async def block() -> list[float]:
                started = server.cpu_seconds()
                out = []
                for _ in range(per_block):
                    i = next(steps)
                    session = sessions[min(i // plan.s1_per_session, len(sessions) - 1)]
                    out.append(await one_call_step(session, f"t{i}"))
                cpu[key] += server.cpu_seconds() - started
                return out

            return block

        def floor_block(client: Floor, server: ServerProcess, key: str) -> Callable[[], Any]:
            async def block() -> list[float]:
                started = server.cpu_seconds()
                out = [await client.call(floor_id) for _ in range(per_block)]
                cpu[key] += server.cpu_seconds() - started
                return out

            return block

        kinds = [
            floor_block(physical, physical_server, "physical"),
            floor_block(floor, floor_server, "floor"),
            admit_block,
            step_block(service, steppers, "step"),
        ]
        if deployed is not None:
            kinds.append(step_block(deployed, deployed_steppers, "deployed"))
        for name, client in lean_clients.items():
            kinds.append(floor_block(client, (leans or {})[name], name))
        physical_lat, floor_lat, service_lat, step_lat, *others = await _timed_blocks(
            blocks, *kinds
        )
        deployed_lat = others.pop(0) if deployed is not None else []
        lean_lat = others
        await floor.close()
        await physical.close()
        for client in lean_clients.values():
            await client.close()
    p50, p99 = percentile(physical_lat, 50), percentile(physical_lat, 99)
    f50, f99 = percentile(floor_lat, 50), percentile(floor_lat, 99)
    s50, s99 = percentile(service_lat, 50), percentile(service_lat, 99)
    t50, t99 = percentile(step_lat, 50), percentile(step_lat, 99)

    def per_call(key: str, samples: list[float]) -> float:
        # Server CPU per call (user + system time of the server's processes): steadier than
        # latency on a shared machine, and what throughput is made of.
        return round(cpu[key] * 1000 / len(samples), 3)

    lean_figures: dict[str, float] = {}
    for name, samples in zip(lean_clients, lean_lat, strict=True):
        l50, l99 = percentile(samples, 50), percentile(samples, 99)
        lean_figures |= {
            f"{name}_p50_ms": ms(l50),
            f"{name}_p99_ms": ms(l99),
            f"{name}_p50_ratio_physical": round(l50 / p50, 3),
            f"{name}_p99_ratio_physical": round(l99 / p99, 3),
            f"{name}_cpu_ms_per_call": per_call(name, samples),
        }
    deployed_figures: dict[str, float] = {}
    if deployed_lat:
        d50, d99 = percentile(deployed_lat, 50), percentile(deployed_lat, 99)
        deployed_figures = {
            "step_as_deployed_p50_ms": ms(d50),
            "step_as_deployed_p99_ms": ms(d99),
            "step_as_deployed_p50_ratio_physical": round(d50 / p50, 3),
            "step_as_deployed_p99_ratio_physical": round(d99 / p99, 3),
            "step_as_deployed_cpu_ms_per_call": per_call("deployed", deployed_lat),
        }
    return {
        **lean_figures,
        **deployed_figures,
        "samples": len(service_lat),
        "surface_nodes_mean": round(statistics.mean(nodes), 1),
        "physical_floor_p50_ms": ms(p50),
        "physical_floor_p99_ms": ms(p99),
        "floor_p50_ms": ms(f50),
        "floor_p99_ms": ms(f99),
        "admit_p50_ms": ms(s50),
        "admit_p99_ms": ms(s99),
        "step_p50_ms": ms(t50),
        "step_p99_ms": ms(t99),
        "p50_ratio": round(s50 / f50, 3),
        "p99_ratio": round(s99 / f99, 3),
        "step_p50_ratio_physical": round(t50 / p50, 3),
        "step_p99_ratio_physical": round(t99 / p99, 3),
        "admit_p50_ratio_physical": round(s50 / p50, 3),
        "floor_p50_ratio_physical": round(f50 / p50, 3),
        "physical_floor_cpu_ms_per_call": per_call("physical", physical_lat),
        "floor_cpu_ms_per_call": per_call("floor", floor_lat),
        "admit_cpu_ms_per_call": per_call("service", service_lat),
        "step_cpu_ms_per_call": per_call("step", step_lat),
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


def _cpu_spent(before: dict[int, float], after: dict[int, float]) -> list[float]:
    """Each process's CPU seconds between two ``cpu_by_worker`` readings: whether every
    process served its share."""
    return [round(after[pid] - before.get(pid, 0.0), 2) for pid in sorted(after)]


async def _floor_rate(server: ServerProcess, plan: Plan, workers: int) -> tuple[float, list[float]]:
    """A floor's calls/s with ``workers`` concurrent callers, each on its own session and its
    own connection (as the service's callers); and each of its processes' CPU seconds."""
    clients = [Floor(server.target) for _ in range(workers)]
    ids = [f"s2-{uuid.uuid4().hex}" for _ in range(workers)]

    async def call(worker: int) -> None:
        await clients[worker].call(ids[worker])

    cpu_before = server.cpu_by_worker()
    rate = await _throughput(workers, min(plan.s2_seconds, 20.0), plan.s2_warmup, call)
    cpu = _cpu_spent(cpu_before, server.cpu_by_worker())
    for client in clients:
        await client.close()
    return rate, cpu


async def _one_call_rate(
    server: ServerProcess, sessions: list[Session], plan: Plan
) -> tuple[float, list[float]]:
    """The one-call step's steps/s with one concurrent caller per session (each on its own
    connection); and each of the server's workers' CPU seconds over the run."""

    async def service_step(worker: int) -> None:
        session = sessions[worker]
        await one_call_step(session, str(session.step))

    cpu_before = server.cpu_by_worker()
    rate = await _throughput(len(sessions), plan.s2_seconds, plan.s2_warmup, service_step)
    return rate, _cpu_spent(cpu_before, server.cpu_by_worker())


async def s2_throughput_and_s6_memory(
    service: ServerProcess,
    floor_server: ServerProcess,
    physical_server: ServerProcess,
    plan: Plan,
    workers: int = 16,
    leans: dict[str, ServerProcess] | None = None,
    deployed: ServerProcess | None = None,
    floor_measured: Callable[[ServerProcess], None] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """16 concurrent callers on 16 sessions, one call per step (the previous output + the next
    admission, DELTA view: harness workers keep the prefix), against both floors' calls/s at
    16 callers (every caller on a connection of its own, to the floors too); with ``deployed``
    (the service as deployments run it) the same on it, right after; then, for comparison, the
    two-call loop (Admit + Record) for a third of the time. The service's RSS is sampled
    throughout its one-call run (S6). ``floor_measured`` is called with each floor once it is
    measured: the caller may stop it, so that its pool's connections (up to 20) do not count
    against the server's ``max_connections`` (100 by default, shared with whoever else uses it)
    while the next floor and both services open theirs."""
    measured = floor_measured or (lambda server: None)
    physical_processes = len(physical_server.workers())
    physical_rate, physical_cpu = await _floor_rate(physical_server, plan, workers)
    measured(physical_server)
    floor_rate, _ = await _floor_rate(floor_server, plan, workers)
    measured(floor_server)
    lean_rates = {}
    for name, server in (leans or {}).items():
        lean_rates[name] = (await _floor_rate(server, plan, workers))[0]
        measured(server)

    # One connection per caller, as 16 harnesses would open: the kernel hands each connection
    # to one of the service's workers (SO_REUSEPORT), so one shared channel would load only one.
    channels = [channel(service.target, own_connection=True) for _ in range(workers)]
    deployed_channels = (
        []
        if deployed is None
        else [channel(deployed.target, own_connection=True) for _ in channels]
    )
    try:
        sessions = [(await _step_sessions(stub(ch), 1, 10))[0] for ch in channels]
        pairs = [(await _step_sessions(stub(ch), 1, 10))[0] for ch in channels]
        deployed_sessions = [(await _step_sessions(stub(ch), 1, 10))[0] for ch in deployed_channels]

        async def two_call_step(worker: int) -> None:
            session = pairs[worker]
            await session.admit(PROMPT, [user(text(USER_CHARS, str(session.step)))], delta=True)
            await session.record(REPLY, [], **USAGE)

        rss: list[tuple[float, float]] = []
        started = time.perf_counter()

        async def sample_rss() -> None:
            while True:
                rss.append((time.perf_counter() - started, service.rss_mib()))
                await asyncio.sleep(plan.rss_every)

        sampler = asyncio.create_task(sample_rss())
        rss_before = service.rss_mib()
        rate, worker_cpu = await _one_call_rate(service, sessions, plan)
        sampler.cancel()
        rss_after = service.rss_mib()
        memory_after = service.memory()
        deployed_figures: dict[str, Any] = {}
        if deployed is not None:
            deployed_rate, deployed_cpu = await _one_call_rate(deployed, deployed_sessions, plan)
            deployed_figures = {
                "steps_per_s_as_deployed": round(deployed_rate, 1),
                "steps_ratio_physical_as_deployed": round(deployed_rate / physical_rate, 3),
                "worker_cpu_seconds_as_deployed": deployed_cpu,
            }
        two_call_rate = await _throughput(
            workers, plan.s2_seconds / 3, plan.s2_warmup, two_call_step
        )
    finally:
        for ch in [*channels, *deployed_channels]:
            await ch.close(None)
    half = [value for at, value in rss if at >= (plan.s2_seconds + plan.s2_warmup) / 2]
    s2 = {
        "workers": workers,
        "service_processes": len(service.workers()),
        "seconds": plan.s2_seconds,
        "view": "DELTA",
        "physical_floor_calls_per_s": round(physical_rate, 1),
        # Each physical floor process's CPU seconds over its run: every process served.
        "physical_floor_processes": physical_processes,
        "physical_floor_cpu_seconds": physical_cpu,
        "floor_calls_per_s": round(floor_rate, 1),
        "steps_per_s": round(rate, 1),
        "throughput_ratio": round(rate / floor_rate, 3),
        "steps_ratio_physical": round(rate / physical_rate, 3),
        "two_call_steps_per_s": round(two_call_rate, 1),
        "two_call_steps_ratio_physical": round(two_call_rate / physical_rate, 3),
        "surface_nodes_at_end": max(s.nodes for s in sessions),
        **{f"{name}_calls_per_s": round(rate, 1) for name, rate in lean_rates.items()},
        **{
            f"{name}_ratio_physical": round(rate / physical_rate, 3)
            for name, rate in lean_rates.items()
        },
        # Each worker's CPU seconds over the one-call run: every worker served its share.
        "worker_cpu_seconds": worker_cpu,
        **deployed_figures,
    }
    s6 = {
        "rss_before_mib": round(rss_before, 1),
        "rss_after_mib": round(rss_after, 1),
        "rss_peak_mib": round(max(v for _, v in rss), 1),
        "rss_second_half_growth_mib": round(max(half) - min(half), 1) if half else 0.0,
        # RSS counts the pages shared with the parent (forked after the tokenizers' preload) in
        # every worker; PSS shares them out, USS is a worker's own (bench/infra.py).
        "pss_after_mib": memory_after["pss_max_mib"],
        "uss_after_mib": memory_after["uss_max_mib"],
        "server_pss_after_mib": memory_after["server_pss_mib"],
        "processes_after": memory_after["workers"],
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
    full_responses: dict[int, bytes] = {}  # each size's last FULL response, for the transport
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
                    response, elapsed = await session.admit(
                        PROMPT, [user(text(USER_CHARS, f"f{r}"))]
                    )
                    full[size].append(elapsed)
                    full_responses[size] = response.SerializeToString()
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
    # The same responses through gRPC and the client's parse alone (bench/transport_floor.py).
    first, last = plan.s3_sizes[0], plan.s3_sizes[-1]
    if first in full_responses and last in full_responses:
        floor = await transport_floor.measure(
            {small["nodes"]: full_responses[first], large["nodes"]: full_responses[last]},
            max(3, plan.s3_full_samples),
        )
        small["full_transport_p50_ms"] = ms(floor[small["nodes"]] / 1000)
        large["full_transport_p50_ms"] = ms(floor[large["nodes"]] / 1000)
        results["full_transport_us_per_node"] = round(
            (floor[large["nodes"]] - floor[small["nodes"]]) * 1000 / span, 3
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
    return f"{exc.code()}: {exc.details()}"
