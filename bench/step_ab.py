"""S1's one-call steps on two checkouts of the service at once, in alternating blocks, so a
change to a warm step is measured against its parent under the same load (S1's step CPU moves
±15 % between runs of ``python -m bench --only S1``; this pairs the blocks instead).

    git worktree add /tmp/before <commit>
    python -m bench.step_ab /tmp/before .     # then again in the other order
    python -m bench.step_ab A B --blocks 20 --steps 150

Both services run as deployments run them (their default prepared-statement setting for a
``DATABASE_URL``, every default worker), each caller on a connection of its own. A block is
``--steps`` steps on one checkout, cycling over its sessions; the blocks alternate, the first
checkout of each pair alternating too. Each checkout's ``service`` folder is put first on its
server's ``PYTHONPATH``. Reported per checkout: the steps' p50 and p99, and its processes' CPU
a step over its own blocks (the other service idles meanwhile).

Run it in both orders. The two are warmed call by call: warmed one after the other, the one
warmed first measured slower through the whole run (docs/BENCHMARKS.md, seventeenth round).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path
from typing import Any

from bench import paired
from bench.client import channel, stub
from bench.infra import bench_database
from bench.scenarios import _step_sessions, one_call_step, percentile, settle

SESSIONS = 20  # per checkout, each ~40 nodes, as S1's
NODES = 40


async def measure(trees: dict[str, str], blocks: int, steps: int) -> dict[str, dict[str, Any]]:
    """Per checkout (name → its folder): its steps' p50 and p99 in ms, CPU ms a step (from
    /proc, counted in 10 ms clock ticks: meaningful over many steps), and each block's p50 in
    the order run (drift shows there)."""
    with bench_database() as (url, _), tempfile.TemporaryDirectory() as logs:
        services = paired.serve(url, Path(logs), trees, prepared_statements=None)
        try:
            async with contextlib.AsyncExitStack() as stack:
                sessions = {}
                for key, service in services.items():
                    served = await stack.enter_async_context(
                        channel(service.target, own_connection=True)
                    )
                    sessions[key] = await _step_sessions(stub(served), SESSIONS, NODES)
                await settle(url)
                # Every path warm before the first block counts, the two warmed call by call: a
                # checkout warmed wholly first measured slower through the whole run (the same
                # checkout served twice: its p50 +7 to +18 % in each of seven runs).
                for number in range(steps):
                    for key in trees:
                        await one_call_step(sessions[key][number % SESSIONS], f"w{number}")
                latencies: dict[str, list[float]] = {key: [] for key in trees}
                block_p50s: dict[str, list[float]] = {key: [] for key in trees}
                cpu = dict.fromkeys(trees, 0.0)
                order = list(trees)
                for block in range(blocks):
                    for key in order if block % 2 == 0 else reversed(order):
                        before = services[key].cpu_seconds()
                        timed = []
                        for number in range(steps):
                            session = sessions[key][number % SESSIONS]
                            timed.append(await one_call_step(session, f"b{block}-{number}"))
                        cpu[key] += services[key].cpu_seconds() - before
                        latencies[key] += timed
                        block_p50s[key].append(round(percentile(timed, 50) * 1000, 2))
        finally:
            for service in services.values():
                service.stop()
    return {
        key: {
            "steps": len(latencies[key]),
            "step_p50_ms": round(percentile(latencies[key], 50) * 1000, 3),
            "step_p99_ms": round(percentile(latencies[key], 99) * 1000, 3),
            "cpu_ms_per_step": round(cpu[key] * 1000 / len(latencies[key]), 3),
            "block_p50s_ms": block_p50s[key],
        }
        for key in trees
    }


def main(argv: list[str] | None = None) -> None:
    parser = paired.parser(__doc__)
    parser.add_argument("--blocks", type=int, default=20, help="blocks per checkout")
    parser.add_argument("--steps", type=int, default=150, help="steps per block")
    args = parser.parse_args(argv)
    trees = paired.checkouts(args)
    paired.report(trees, asyncio.run(measure(trees, args.blocks, args.steps)))


if __name__ == "__main__":
    main()
