"""FULL Admits of a 100 000-node session on two checkouts of the service at once, alternating
call by call, so a change to the FULL path is measured against its parent under the same load
(S3's marginal cost moves ±20 % between runs; this pairs the calls instead).

    git worktree add /tmp/before <commit>
    python -m bench.full_ab /tmp/before .     # then again in the other order
    python -m bench.full_ab A B --nodes 100000 --calls 15

Each checkout's ``service`` folder is put first on its server's ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
from pathlib import Path

from bench.client import PROMPT, Session, channel, stub, text, user
from bench.infra import bench_database, start_service
from bench.scenarios import USER_CHARS, settle


async def measure(trees: dict[str, str], nodes: int, calls: int) -> dict[str, dict[str, float]]:
    """Per checkout (name → its folder): the FULL Admits' p50 and minimum in ms."""
    with bench_database() as (url, _), tempfile.TemporaryDirectory() as logs:
        services = {
            key: start_service(url, Path(logs), env={"PYTHONPATH": f"{tree}/service"}, name=key)
            for key, tree in trees.items()
        }
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="a checkout of the service (its root folder)")
    parser.add_argument("after", type=Path, help="another checkout")
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=15, help="FULL Admits per checkout")
    args = parser.parse_args(argv)
    trees = {"before": str(args.before.resolve()), "after": str(args.after.resolve())}
    results = asyncio.run(measure(trees, args.nodes, args.calls))
    print(json.dumps({"checkouts": trees, **results}, indent=2))  # noqa: T201


if __name__ == "__main__":
    main()
