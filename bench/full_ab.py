"""FULL Admits of a 100 000-node session on two checkouts of the service at once, alternating
call by call, so a change to the FULL path is measured against its parent under the same load
(S3's marginal cost moves ±20 % between runs; this pairs the calls instead).

    git worktree add /tmp/before <commit>
    python -m bench.full_ab /tmp/before .     # then again in the other order
    python -m bench.full_ab A B --nodes 100000 --calls 15

Each checkout's ``service`` folder is put first on its server's ``PYTHONPATH`` (``bench.paired``).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
from pathlib import Path

from bench import paired
from bench.client import PROMPT, Session, channel, stub, text, user
from bench.infra import bench_database
from bench.scenarios import USER_CHARS, settle


async def measure(trees: dict[str, str], nodes: int, calls: int) -> dict[str, dict[str, float]]:
    """Per checkout (name → its folder): the FULL Admits' p50 and minimum in ms."""
    with bench_database() as (url, _), tempfile.TemporaryDirectory() as logs:
        services = paired.serve(url, Path(logs), trees)
        try:
            async with contextlib.AsyncExitStack() as stack:
                sessions: dict[str, Session] = {}
                for key, service in services.items():
                    served = await stack.enter_async_context(channel(service.target))
                    sessions[key] = await Session.create(stub(served))
                    await sessions[key].grow_to(nodes)
                await settle(url)
                for session in sessions.values():  # the first FULL read seals the chunks
                    await session.admit(PROMPT, [user(text(USER_CHARS, "warm"))])
                times: dict[str, list[float]] = {key: [] for key in trees}
                for call in range(calls):
                    for key, session in sessions.items():
                        _, elapsed = await session.admit(
                            PROMPT, [user(text(USER_CHARS, f"f{call}"))]
                        )
                        times[key].append(elapsed * 1000)
        finally:
            for service in services.values():
                service.stop()
    return {
        key: {
            "nodes": sessions[key].nodes,
            "full_p50_ms": round(statistics.median(times[key]), 2),
            "full_min_ms": round(min(times[key]), 2),
        }
        for key in trees
    }


def main(argv: list[str] | None = None) -> None:
    parser = paired.parser(__doc__)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=15, help="FULL Admits per checkout")
    args = parser.parse_args(argv)
    trees = paired.checkouts(args)
    paired.report(trees, asyncio.run(measure(trees, args.nodes, args.calls)))


if __name__ == "__main__":
    main()
