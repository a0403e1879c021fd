"""What a harness's step writes to PostgreSQL when it sends the same system prompt and tool set
every step, as harnesses do: the server's WAL bytes per step (``pg_current_wal_insert_lsn``
before and after the steps: everything the server wrote, the service's commits and the
session's indexes included), the bytes the session's tables hold at the end, and the step's
p50 and p99 through the service as deployed (a real process; ``DATABASE_URL`` or an embedded
PostgreSQL, as every bench here), one session per case, one call per step (the previous output
recorded, DELTA view).

    python -m bench.harness_writes [--steps 100] [--out report.json]

The cases: a coding harness's inputs (a 100 KiB prompt, 40 tools of ~1.1 KB) and a large one
(a 512 KiB prompt, 1 MiB of tools). Each step has a ``request_id``, as the clients send, so
its response is stored for retries too. Nothing is asserted: speed and volume are measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import string
import tempfile
from pathlib import Path
from typing import Any

from promptadmission.v1 import session_pb2 as pb
from sqlalchemy import create_engine, pool, text

from bench import client
from bench.infra import bench_database, print_report, start_service

ROUTE = pb.Route(provider="deepseek", model="deepseek-flash", context_window=1_000_000)
WARM_UP = 3
# The tables that hold a session's admissions, its row and its stored responses (before
# migration 0011 the inputs lived in ``admissions``; a table a schema lacks counts 0).
TABLES = (
    "sessions",
    "admissions",
    "admission_inputs",
    "events",
    "surface_nodes",
    "idempotency_keys",
)


def prose(characters: int, seed: int) -> str:
    """Text as a prompt or a tool's description is: words of a 2 000-word vocabulary in no
    order (a repeated phrase would compress to nothing and hide what is written)."""
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 10)))
        for _ in range(2_000)
    ]
    words: list[str] = []
    length = 0
    while length < characters:
        words.append(rng.choice(vocabulary))
        length += len(words[-1]) + 1
    return " ".join(words)[:characters]


def tools_of(count: int, schema_bytes: int) -> list[pb.Tool]:
    """``count`` tools, each with a schema of about ``schema_bytes``."""
    return [
        pb.Tool(
            name=f"tool_{i}",
            description=prose(200, seed=i),
            parameters_json=json.dumps(
                {"type": "object", "description": prose(schema_bytes, seed=1_000 + i)}
            ),
        )
        for i in range(count)
    ]


def cases() -> dict[str, tuple[str, list[pb.Tool]]]:
    return {
        "coding harness (100 KiB prompt, 40 tools of 1 KiB)": (
            prose(100 * 1024, seed=0),
            tools_of(40, 1024),
        ),
        # Each tool under the default per-tool bound (256 KiB).
        "large harness (512 KiB prompt, 1 MiB of tools)": (
            prose(512 * 1024, seed=0),
            tools_of(5, 200 * 1024),
        ),
    }


def wal_lsn(url: str) -> int:
    """The server's WAL insert position, in bytes."""
    with _connection(url) as connection:
        return int(
            connection.execute(
                text("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint")
            ).scalar_one()
        )


def table_bytes(url: str) -> int:
    with _connection(url) as connection:
        total = 0
        for table in TABLES:
            size = connection.execute(
                text("SELECT pg_total_relation_size(to_regclass(:t))"), {"t": table}
            ).scalar()
            total += int(size or 0)
        return total


def _connection(url: str) -> Any:
    return create_engine(url, poolclass=pool.NullPool).connect()


async def run_case(
    target: str, url: str, prompt: str, tools: list[pb.Tool], steps: int
) -> dict[str, float]:
    async with client.channel(target) as channel:
        session = await client.Session.create(client.stub(channel), route=ROUTE)
        await session.admit(prompt, [client.user("start")], tools=tools)
        latencies = []
        wal_before = 0
        for step in range(WARM_UP + steps):
            if step == WARM_UP:
                wal_before = wal_lsn(url)
            request = session.admit_request(prompt, [client.user(f"step {step}")], tools=tools)
            request.request_id = f"step-{step}"  # as the clients send one: its response is kept
            output = request.previous_output
            output.admission_id = session.last_admission
            output.assistant.CopyFrom(client.assistant(f"done {step}"))
            loop = asyncio.get_running_loop()
            started = loop.time()
            response = await session.stub.Admit(request)
            if step >= WARM_UP:
                latencies.append(loop.time() - started)
            session.last_admission = response.admission_id
        wal_after = wal_lsn(url)
    latencies.sort()
    return {
        "steps": steps,
        "wal_bytes_per_step": (wal_after - wal_before) / steps,
        "step_p50_ms": statistics.median(latencies) * 1000,
        "step_p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    with bench_database() as (url, where), tempfile.TemporaryDirectory() as logs:
        report["database"] = where
        service = start_service(url, Path(logs), prepared_statements=None)
        try:
            for name, (prompt, tools) in cases().items():
                before = table_bytes(url)
                figures = asyncio.run(run_case(service.target, url, prompt, tools, args.steps))
                figures["table_bytes_per_step"] = (table_bytes(url) - before) / (
                    args.steps + WARM_UP + 1
                )
                report[name] = figures
        finally:
            service.stop()
    print_report(report, args.out)


if __name__ == "__main__":
    main()
