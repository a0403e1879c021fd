"""Throughput of the compose topology as local processes (the figures in docs/SCALING.md).

    .venv/bin/python -m tests.deploy.measure [--seconds 10] [--workers 16]

Starts the topology of tests/deploy/test_topology.py (migrate job, two replicas, nginx) on a
fresh database (DATABASE_URL's server, else an embedded PostgreSQL), then, for each of: one
replica called directly, both replicas through nginx, both replicas through nginx on pgbouncer
(transaction mode), runs ``--workers`` concurrent sessions, each doing Admit + Record steps
(in-history route, the prompt changing every fifth step), and prints steps per second and
Admit latency. Everything — PostgreSQL, replicas, nginx, pgbouncer and this client — shares
the one machine, so these are floors for one box, not a scale-out measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from admission_service.storage.embedded import start_embedded_postgres
from admission_service.storage.engine import normalise_database_url
from promptadmission import AdmissionClient, RetryPolicy
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import IN_HISTORY_ROUTE, user
from tests.conftest import TestDatabases
from tests.deploy.sessions import assistant
from tests.deploy.test_topology import Processes, start_topology
from tests.deploy.topology import DEMO_TOKEN


async def load(target: str, seconds: float, workers: int) -> dict[str, float]:
    client = AdmissionClient(target, token=DEMO_TOKEN, retry=RetryPolicy(max_attempts=1))
    latencies: list[float] = []
    steps = 0
    stop_at = 0.0

    async def worker() -> None:
        nonlocal steps
        session_id = (await client.create_session()).session.session_id
        step = 0
        while time.monotonic() < stop_at:
            started = time.monotonic()
            admitted = await client.admit(
                api.AdmitRequest(
                    session_id=session_id,
                    turn=step,
                    rendered_prompt=f"You are a careful agent. Mode {step // 5}.",
                    route=IN_HISTORY_ROUTE,
                    users=[user(f"step {step}: " + "lorem ipsum " * 20)],
                )
            )
            latencies.append(time.monotonic() - started)
            await client.record(
                api.RecordRequest(
                    session_id=session_id,
                    admission_id=admitted.admission_id,
                    assistant=assistant(f"answer {step} " + "dolor sit amet " * 20),
                    usage=pb.Usage(input_tokens=1000, cache_read_tokens=900),
                )
            )
            steps += 1
            step += 1

    warmup = time.monotonic() + 2.0
    stop_at = warmup
    await asyncio.gather(*(worker() for _ in range(workers)))
    latencies.clear()
    steps = 0
    began = time.monotonic()
    stop_at = began + seconds
    await asyncio.gather(*(worker() for _ in range(workers)))
    elapsed = time.monotonic() - began
    await client.close()
    ordered = sorted(latencies)
    return {
        "steps_per_s": round(steps / elapsed, 1),
        "calls_per_s": round(2 * steps / elapsed, 1),
        "admit_p50_ms": round(statistics.median(ordered) * 1000, 1),
        "admit_p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()

    data_dir = None
    server_url = os.environ.get("DATABASE_URL", "")
    if not server_url:
        data_dir = Path(tempfile.mkdtemp(prefix="pas-measure-"))
        server_url = start_embedded_postgres(data_dir).url()
    databases = TestDatabases(normalise_database_url(server_url))
    results = {}
    try:
        for name, pooler in (("direct", False), ("pgbouncer", True)):
            directory = Path(tempfile.mkdtemp(prefix=f"pas-measure-{name}-"))
            processes = Processes(directory)
            try:
                topology = start_topology(processes, databases.create(migrate=False), pooler=pooler)
                if not pooler:
                    one = topology.replicas["service-a"][0]
                    results["one replica, direct"] = asyncio.run(
                        load(one, args.seconds, args.workers)
                    )
                label = "two replicas via nginx" + (" + pgbouncer" if pooler else "")
                results[label] = asyncio.run(load(topology.lb_target, args.seconds, args.workers))
            finally:
                processes.stop_all()
                shutil.rmtree(directory, ignore_errors=True)
    finally:
        databases.drop_all()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
    print(  # noqa: T201 (a report on stdout)
        json.dumps(
            {
                "workers": args.workers,
                "seconds": args.seconds,
                **results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
