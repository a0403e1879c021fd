"""Profile S1's one-call step alone: one caller makes steady in-history steps (the previous
output + the next admission, DELTA, 200-character messages) against a fresh service while
py-spy records the service's processes; a ``py-spy dump`` of the serving worker is taken
half-way.

    python -m bench.profile_step --seconds 60 --out /tmp/step.txt
    python -m bench.profile_summary /tmp/step.txt --match admission_service

Needs ``py-spy`` (``.venv/bin/pip install py-spy``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import subprocess
import tempfile
import time
from pathlib import Path

from bench.client import channel, stub
from bench.infra import bench_database, start_service
from bench.run import py_spy, start_profiler
from bench.scenarios import _step_sessions, one_call_step, percentile


async def run(seconds: float, out: Path) -> None:
    with bench_database() as (url, _), tempfile.TemporaryDirectory() as logs:
        service = start_service(url, Path(logs))
        try:
            async with channel(service.target) as ch:
                sessions = await _step_sessions(stub(ch), 20, 40)
                for number, session in enumerate(sessions):  # warm every path up
                    await one_call_step(session, f"w{number}")
                profiler = start_profiler(service.pid, out)
                latencies: list[float] = []
                started = time.monotonic()
                dumped = False
                try:
                    for number in itertools.count():
                        session = sessions[number % len(sessions)]
                        latencies.append(await one_call_step(session, f"p{number}"))
                        elapsed = time.monotonic() - started
                        if not dumped and elapsed > seconds / 2:
                            dumped = True
                            await asyncio.to_thread(_dump, service.workers(), out)
                        if elapsed > seconds:
                            break
                finally:
                    profiler.send_signal(2)  # py-spy writes its output on SIGINT
                    profiler.wait(60)
        finally:
            service.stop()
    print(  # noqa: T201
        f"{len(latencies)} steps, p50 {percentile(latencies, 50) * 1000:.2f} ms,"
        f" p99 {percentile(latencies, 99) * 1000:.2f} ms; stacks in {out}"
    )


def _dump(pids: list[int], out: Path) -> None:
    with out.with_suffix(".dump.txt").open("w") as dump:
        for pid in pids:
            subprocess.run([py_spy(), "dump", "--pid", str(pid)], stdout=dump, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(run(args.seconds, args.out))


if __name__ == "__main__":
    main()
