"""``python -m tests.citus.measure``: the benchmark's step scenarios on one PostgreSQL and on the
local Citus cluster, same machine, same code (docs/SCALING.md records a run).

For each target, in alternating rounds (drift on a shared machine hits both alike): a fresh
database, the real service process (which migrates it: on the cluster that distributes it),
the bench's two floor servers, then ``bench.scenarios``' S1 (one caller, sequential one-call
steps and Admits on ~50-node sessions: p50/p99) and S2 (16 callers on 16 sessions: one-call
steps/s, and Admit + Record steps/s). Both targets run the wheel's PostgreSQL 18 with the same
(durable) settings; the cluster is a coordinator and two workers on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from admission_service.storage.embedded import start_embedded_postgres
from admission_service.storage.engine import libpq_url, normalise_database_url
from sqlalchemy.engine import make_url

from bench import scenarios
from bench.infra import _execute, start_floor, start_service
from tests.citus.cluster import CitusCluster

PLAN = dataclasses.replace(scenarios.SMOKE, s1_samples=400, s2_seconds=20.0, s2_warmup=3.0)
# The same-stack floor's tables are sharded by session like the service's. The physical floor's
# stay plain tables on the coordinator: its upsert sets now() in ON CONFLICT DO UPDATE, which
# Citus refuses on distributed tables (only immutable functions there); it measures the
# coordinator's own PostgreSQL.
FLOOR_TABLES = ("floor_sessions", "floor_events")


@contextlib.contextmanager
def single_database() -> Iterator[str]:
    data_dir = Path(tempfile.mkdtemp(prefix="pas-measure-postgres-"))
    server = start_embedded_postgres(data_dir, durable=True)
    name = f"pas_measure_{secrets.token_hex(4)}"
    try:
        _execute(normalise_database_url(server.url()), f'CREATE DATABASE "{name}"')
        yield normalise_database_url(server.url(name))
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@contextlib.contextmanager
def cluster_database() -> Iterator[str]:
    with CitusCluster.start(durable=True) as cluster:
        yield normalise_database_url(cluster.create_database(f"pas_measure_{secrets.token_hex(4)}"))


def distribute_floor(url: str) -> None:
    """The floors' tables, sharded by session like the service's (they create them at start)."""
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        for table in FLOOR_TABLES:
            connection.execute("SELECT create_distributed_table(%s, 'session_id')", (table,))


async def measure(url: str, log_dir: Path, *, citus: bool) -> dict[str, Any]:
    service = start_service(url, log_dir)
    floor = start_floor(url, log_dir)
    physical = start_floor(url, log_dir, module="bench.physical_floor")
    try:
        if citus:
            distribute_floor(url)
        s1 = await scenarios.s1_sequential(service, floor, physical, PLAN)
        s2, _ = await scenarios.s2_throughput_and_s6_memory(service, floor, physical, PLAN)
    finally:
        for server in (service, floor, physical):
            server.stop()
    return {
        "step_p50_ms": s1["step_p50_ms"],
        "step_p99_ms": s1["step_p99_ms"],
        "admit_p50_ms": s1["admit_p50_ms"],
        "physical_floor_p50_ms": s1["physical_floor_p50_ms"],
        "steps_per_s_16": s2["steps_per_s"],
        "two_call_steps_per_s_16": s2["two_call_steps_per_s"],
        "physical_floor_calls_per_s_16": s2["physical_floor_calls_per_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.citus.measure", description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(".data/citus-measure.json"))
    args = parser.parse_args()
    targets = {"single PostgreSQL": single_database, "Citus (1 + 2 workers)": cluster_database}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
    for _ in range(args.rounds):
        for name, database in targets.items():
            with tempfile.TemporaryDirectory() as logs, database() as url:
                citus = database is cluster_database
                results[name].append(asyncio.run(measure(url, Path(logs), citus=citus)))
                print(name, make_url(url).database, results[name][-1], flush=True)  # noqa: T201
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"plan": dataclasses.asdict(PLAN), **results}, indent=2))
    print(json.dumps(results, indent=2))  # noqa: T201


if __name__ == "__main__":
    main()
