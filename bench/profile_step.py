"""Profile S1's one-call step alone: one caller makes steady in-history steps (the previous
output + the next admission, DELTA, 200-character messages) against a fresh service while
py-spy records the service's processes; a ``py-spy dump`` of the serving worker is taken
half-way.

    python -m bench.profile_step --seconds 60 --out /tmp/step.txt [--as-deployed]
    python -m bench.profile_summary /tmp/step.txt --match admission_service

Needs ``py-spy`` (``.venv/bin/pip install py-spy``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench.client import channel, stub
from bench.infra import bench_database, start_service
from bench.run import py_spy, start_profiler
from bench.scenarios import _step_sessions, one_call_step, percentile


async def run(
    seconds: float, out: Path, prepared_statements: bool | None = True, native: bool = False
) -> None:
    with bench_database() as (url, _), tempfile.TemporaryDirectory() as logs:
        service = start_service(url, Path(logs), prepared_statements=prepared_statements)
        try:
            async with channel(service.target) as ch:
                sessions = await _step_sessions(stub(ch), 20, 40)
                for number, session in enumerate(sessions):  # warm every path up
                    await one_call_step(session, f"w{number}")
                profiler = start_profiler(service.pid, out, native)
                cpu_before = service.cpu_seconds(), embedded_postgres_cpu_seconds()
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
                    service_cpu = service.cpu_seconds() - cpu_before[0]
                    postgres_cpu = embedded_postgres_cpu_seconds() - cpu_before[1]
                    profiler.send_signal(2)  # py-spy writes its output on SIGINT
                    profiler.wait(60)
        finally:
            service.stop()
    steps = len(latencies)
    print(  # noqa: T201
        f"{steps} steps, p50 {percentile(latencies, 50) * 1000:.2f} ms,"
        f" p99 {percentile(latencies, 99) * 1000:.2f} ms; CPU per step: service"
        f" {service_cpu * 1000 / steps:.2f} ms (py-spy included), PostgreSQL"
        f" {postgres_cpu * 1000 / steps:.2f} ms (embedded only, else 0); stacks in {out}"
    )


def embedded_postgres_cpu_seconds() -> float:
    """User + system CPU of the benchmark's embedded PostgreSQL (its postmaster, found by its
    data directory, and every backend and helper process under it); 0 with DATABASE_URL."""
    processes = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    postmasters = set()
    for process in processes:
        with contextlib.suppress(OSError):
            if b"pas-bench-postgres-" in (process / "cmdline").read_bytes():
                postmasters.add(process.name)
    total = 0.0
    for process in processes:
        with contextlib.suppress(OSError, IndexError):
            fields = (process / "stat").read_text().rpartition(")")[2].split()
            if process.name in postmasters or fields[1] in postmasters:
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _dump(pids: list[int], out: Path) -> None:
    with out.with_suffix(".dump.txt").open("w") as dump:
        for pid in pids:
            subprocess.run([py_spy(), "dump", "--pid", str(pid)], stdout=dump, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--as-deployed",
        action="store_true",
        help="PAS_DB_PREPARED_STATEMENTS unset (the service's default for a DATABASE_URL)",
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="native frames too (py-spy --native, 40 samples a second; read with"
        " profile_summary --active)",
    )
    args = parser.parse_args()
    asyncio.run(run(args.seconds, args.out, None if args.as_deployed else True, args.native))


if __name__ == "__main__":
    main()
