"""``python -m bench.memory``: S6 per route family — what a worker holds after S2's load.

For each tokenizer family (``deepseek``, ``openai``, ``anthropic``, and ``other``: the
heuristic) and each way of loading it (``preload``: ``PAS_TOKENIZER_PRELOAD`` names it, so the
parent loads it before forking the workers; ``lazy``: ``PAS_TOKENIZER_PRELOAD=none``, each
worker loads it on its first request of the family; ``all``: every family preloaded, as with a
catalog that names all three), the benchmark starts the real service
(``PAS_WORKERS`` workers, default the usable cores), drives S2's load on routes of that family
(16 callers, 16 sessions, one-call steps, DELTA) and reads every process's RSS, PSS and USS
(``/proc/<pid>/smaps_rollup``) idle, after the load and after a second stretch of it (flat or
not). Prints a table and writes JSON (``--out``).

RSS counts a page a worker shares with the parent or its siblings in full in every worker;
PSS divides it among them (the server's PSS total is what it occupies); USS is a worker's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from bench.client import PROMPT, Session, assistant, channel, stub, text, user
from bench.infra import bench_database, start_service

FAMILIES = ("deepseek", "openai", "anthropic", "other")
MODES = ("preload", "lazy")
CALLERS = 16
USER_CHARS = 200
REPLY = assistant(text(USER_CHARS, "reply"))


async def _load(target: str, provider: str, seconds: float) -> float:
    """S2's one-call loop on ``provider`` routes for ``seconds``; steps/s."""
    route = pb.Route(provider=provider, model="deepseek-flash", context_window=128_000)
    # One connection per caller, as 16 harnesses: the kernel spreads them over the workers.
    channels = [channel(target, own_connection=True) for _ in range(CALLERS)]
    try:
        sessions = []
        for ch in channels:
            admission = stub(ch)
            session_id = f"mem-{uuid.uuid4().hex}"
            await admission.CreateSession(api.CreateSessionRequest(session_id=session_id))
            session = Session(admission, session_id, route=route)
            await session.admit(PROMPT, [user(text(USER_CHARS, "start"))], delta=True)
            sessions.append(session)
        done = 0
        stop = time.perf_counter() + seconds

        async def loop(session: Session) -> None:
            nonlocal done
            while time.perf_counter() < stop:
                await session.one_call(
                    PROMPT, [user(text(USER_CHARS, str(session.step)))], REPLY, []
                )
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(loop(s) for s in sessions))
        return done / (time.perf_counter() - started)
    finally:
        for ch in channels:
            await ch.close(None)


async def measure(
    url: str, family: str, mode: str, seconds: float, log_dir: Path
) -> dict[str, Any]:
    preload = {"preload": family if family != "other" else "none", "lazy": "none"}.get(
        mode, "openai,anthropic,deepseek"
    )
    service = start_service(url, log_dir, env={"PAS_TOKENIZER_PRELOAD": preload})
    try:
        idle = service.memory()
        rate = await _load(service.target, family, seconds)
        after = service.memory()
        await _load(service.target, family, seconds)
        again = service.memory()
    finally:
        service.stop()
    return {
        "family": family,
        "mode": mode,
        "preload": preload,
        "steps_per_s": round(rate, 1),
        "idle": idle,
        "after": after,
        "after_again": again,
        "rss_growth_second_stretch_mib": round(again["rss_max_mib"] - after["rss_max_mib"], 1),
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| family | loaded | worker RSS idle → after | worker PSS | worker USS | server PSS "
        "(all processes) | RSS growth, 2nd stretch | steps/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        idle, after = row["idle"], row["after"]
        lines.append(
            f"| {row['family']} | {row['mode']} | {idle['rss_max_mib']} → "
            f"{after['rss_max_mib']} MiB | {after['pss_max_mib']} MiB | "
            f"{after['uss_max_mib']} MiB | {after['server_pss_mib']} MiB | "
            f"{row['rss_growth_second_stretch_mib']:+} MiB | {row['steps_per_s']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--modes", default=",".join(MODES), help="preload, lazy, all")
    parser.add_argument("--seconds", type=float, default=20.0, help="each stretch of load")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="pas-bench-memory-") as logs,
        bench_database() as (url, _),
    ):
        for family in args.families.split(","):
            for mode in args.modes.split(","):
                rows.append(asyncio.run(measure(url, family, mode, args.seconds, Path(logs))))
                print(table(rows[-1:]).splitlines()[-1], flush=True)  # noqa: T201
    print(table(rows))  # noqa: T201
    if args.out is not None:
        args.out.write_text(json.dumps({"workers": os.cpu_count(), "runs": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
