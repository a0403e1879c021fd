"""The physical floor: the least one durable, admission-shaped call can cost on this machine.

A ``grpc.aio`` handler (one Python process, one event loop, the same gRPC as the service) over a
raw psycopg 3 async pool (``psycopg_pool``, autocommit, no ORM) that sends ONE statement per
call: a data-modifying CTE that upserts the session row (taking its row lock, bumping its
revision and next seq) and inserts one event row with the request's payload. One round trip,
one durable commit (the server's own, fsync on), psycopg's prepared statement after the first
few calls. Every target of the benchmark is a ratio to this, measured in the same run.

With ``--processes N`` (the benchmark passes the service's worker count) N such processes
serve one port, each with its own event loop and pool, bound with ``SO_REUSEPORT`` as the
service's workers are (``admission_service/api/workers.py``): the kernel hands each new
connection to one of them. One process is the floor of one worker; the service's S2 throughput
uses every core it has, so its floor must too.

    python -m bench.physical_floor --listen 127.0.0.1:PORT --database-url URL [--processes N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import signal
from collections.abc import Callable
from typing import Any

import psycopg
from promptadmission.v1 import admission_service_pb2 as api
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.engine import make_url

from bench.floor import print_ready, serve_step

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS physical_sessions ("
    " tenant_id text NOT NULL, session_id text NOT NULL, revision bigint NOT NULL,"
    " next_seq bigint NOT NULL, update_time timestamptz NOT NULL DEFAULT now(),"
    " PRIMARY KEY (tenant_id, session_id))",
    "CREATE TABLE IF NOT EXISTS physical_events ("
    " tenant_id text NOT NULL, session_id text NOT NULL, seq bigint NOT NULL,"
    " payload bytea NOT NULL, commit_time timestamptz NOT NULL DEFAULT now(),"
    " PRIMARY KEY (tenant_id, session_id, seq))",
)
# The upsert locks the session row (ON CONFLICT DO UPDATE takes the row lock, so concurrent
# calls on one session serialise as the service's do); the event takes the seq it returned.
STEP = (
    "WITH session AS ("
    " INSERT INTO physical_sessions AS s (tenant_id, session_id, revision, next_seq)"
    " VALUES ('bench', %(s)s, 1, 1)"
    " ON CONFLICT (tenant_id, session_id) DO UPDATE"
    " SET revision = s.revision + 1, next_seq = s.next_seq + 1, update_time = now()"
    " RETURNING revision, next_seq)"
    " INSERT INTO physical_events (tenant_id, session_id, seq, payload)"
    " SELECT 'bench', %(s)s, next_seq - 1, %(p)s FROM session"
    " RETURNING (SELECT revision FROM session)"
)


def libpq_url(database_url: str) -> str:
    """``postgresql+psycopg://…`` (SQLAlchemy's form) as a libpq connection string."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def create_schema(conninfo: str) -> None:
    """The floor's two tables, once (before any process serves)."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        for statement in SCHEMA:
            connection.execute(statement)


async def serve(
    listen: str,
    database_url: str,
    pool_size: int,
    *,
    share_port: bool = False,
    ready: Callable[[], None] = print_ready,
) -> None:
    """One process of the floor: its pool, its event loop, the one RPC."""
    conninfo = libpq_url(database_url)
    pool = AsyncConnectionPool(
        conninfo,
        # One connection at first, up to pool_size as callers wait (during S2's warm-up): an
        # idle floor holds one, not pool_size, of the server's max_connections.
        min_size=1,
        max_size=pool_size,
        kwargs={"autocommit": True},
        open=False,
    )
    await pool.open(wait=True)

    async def step(request: api.RecordRequest, context: Any) -> api.RecordResponse:
        payload = request.assistant.SerializeToString()
        async with pool.connection() as connection:
            cursor = await connection.execute(STEP, {"s": request.session_id, "p": payload})
            row = await cursor.fetchone()
        assert row is not None
        return api.RecordResponse(revision=row[0])

    try:
        await serve_step(listen, step, share_port=share_port, ready=ready)
    finally:
        await pool.close()


def _process_main(listen: str, database_url: str, pool_size: int, started: Any) -> None:
    """A forked process of a multi-process floor: serve the shared port until SIGTERM, and
    die with the parent (``prctl(PR_SET_PDEATHSIG)``), so no orphan keeps serving the port
    and loading the machine after a killed benchmark."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    asyncio.run(
        serve(
            listen, database_url, pool_size, share_port=True, ready=lambda: started.put(os.getpid())
        )
    )


def serve_processes(listen: str, database_url: str, pool_size: int, processes: int) -> None:
    """``processes`` forked floor processes on one port; print ``ready`` once every one
    listens, and stop them all on SIGTERM or SIGINT. The parent serves nothing itself (as the
    service's supervising parent): it creates no event loop, gRPC object or connection that
    the processes would inherit."""
    context = multiprocessing.get_context("fork")
    started = context.Queue()
    children = [
        context.Process(target=_process_main, args=(listen, database_url, pool_size, started))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    try:
        for _ in children:
            started.get(timeout=60)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        print_ready()
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    finally:
        for child in children:
            if child.is_alive():
                child.terminate()  # SIGTERM: serve_step stops the server
        for child in children:
            child.join(15)
            if child.is_alive():
                child.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--pool-size", type=int, default=10, help="connections per process")
    parser.add_argument("--processes", type=int, default=1, help="processes sharing the port")
    args = parser.parse_args()
    create_schema(libpq_url(args.database_url))
    if args.processes > 1:
        serve_processes(args.listen, args.database_url, args.pool_size, args.processes)
    else:
        asyncio.run(serve(args.listen, args.database_url, args.pool_size))


if __name__ == "__main__":
    main()
