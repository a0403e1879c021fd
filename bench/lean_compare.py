"""``python -m bench.lean_compare``: the physical floor against the lean step prototype, alone.

One caller makes ``--calls`` sequential calls (after 300 to warm up) to each of: the physical
floor (``bench/physical_floor.py``), the lean step in two pipelined round trips
(``bench/lean_step.py``) and in one (``bench/lean_function.py``: the same statements in a
PL/pgSQL function), on one fresh database migrated by the service; then 16 callers for
``--seconds`` each. Prints p50, p99, server CPU per call (``/proc``; PostgreSQL's is not
included) and calls/s, each as a ratio to the floor's. Alternates the kinds in blocks, as S1
does, so drift hits all alike.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import uuid
from pathlib import Path

from bench.infra import ServerProcess, bench_database, start_floor, start_service
from bench.scenarios import Floor, percentile

KINDS = ("bench.physical_floor", "bench.lean_step", "bench.lean_function")


async def _block(
    client: Floor, server: ServerProcess, session: str, calls: int
) -> tuple[list[float], float]:
    started = server.cpu_seconds()
    latencies = [await client.call(session) for _ in range(calls)]
    return latencies, server.cpu_seconds() - started


async def _rate(client: Floor, callers: int, seconds: float) -> float:
    ids = [f"cmp-{uuid.uuid4().hex}" for _ in range(callers)]
    for session in ids:  # create the sessions first
        await client.call(session)
    done = 0
    stop = asyncio.get_running_loop().time() + seconds

    async def loop(session: str) -> None:
        nonlocal done
        while asyncio.get_running_loop().time() < stop:
            await client.call(session)
            done += 1

    await asyncio.gather(*(loop(s) for s in ids))
    return done / seconds


async def run(calls: int, seconds: float) -> None:
    with bench_database() as (url, _), tempfile.TemporaryDirectory() as logs:
        start_service(url, Path(logs)).stop()  # the service's migrations
        servers = [start_floor(url, Path(logs), 16, kind) for kind in KINDS]
        try:
            clients = [Floor(server.target) for server in servers]
            for client in clients:
                for _ in range(300):
                    await client.call("cmp")
            latencies: list[list[float]] = [[] for _ in KINDS]
            cpu = [0.0 for _ in KINDS]
            for _ in range(10):
                for index, (client, server) in enumerate(zip(clients, servers, strict=True)):
                    block, used = await _block(client, server, "cmp", calls // 10)
                    latencies[index] += block
                    cpu[index] += used
            rates = [await _rate(client, 16, seconds) for client in clients]
            for client in clients:
                await client.close()
        finally:
            for server in servers:
                server.stop()
    floor_p50, floor_p99 = percentile(latencies[0], 50), percentile(latencies[0], 99)
    floor_cpu = cpu[0] / len(latencies[0])
    for index, kind in enumerate(KINDS):
        p50, p99 = percentile(latencies[index], 50), percentile(latencies[index], 99)
        per_call = cpu[index] / len(latencies[index])
        print(  # noqa: T201
            f"{kind:<22} p50 {p50 * 1000:6.2f} ms ({p50 / floor_p50:4.2f}x)"
            f"  p99 {p99 * 1000:6.2f} ms ({p99 / floor_p99:4.2f}x)"
            f"  CPU {per_call * 1000:5.2f} ms/call ({per_call / floor_cpu:4.2f}x)"
            f"  16 callers {rates[index]:7.1f}/s ({rates[index] / rates[0]:5.3f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(run(args.calls, args.seconds))


if __name__ == "__main__":
    main()
