"""The physical floor: the least one durable, admission-shaped call can cost on this machine.

A ``grpc.aio`` handler (one Python process, one event loop, the same gRPC as the service) over a
raw psycopg 3 async pool (``psycopg_pool``, autocommit, no ORM) that sends ONE statement per
call: a data-modifying CTE that upserts the session row (taking its row lock, bumping its
revision and next seq) and inserts one event row with the request's payload. One round trip,
one durable commit (the server's own, fsync on), psycopg's prepared statement after the first
few calls. Every target of the benchmark is a ratio to this, measured in the same run.

    python -m bench.physical_floor --listen 127.0.0.1:PORT --database-url URL
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import psycopg
from promptadmission.v1 import admission_service_pb2 as api
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.engine import make_url

from bench.floor import serve_step

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


async def serve(listen: str, database_url: str, pool_size: int) -> None:
    conninfo = libpq_url(database_url)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as connection:
        for statement in SCHEMA:
            await connection.execute(statement)
    pool = AsyncConnectionPool(
        conninfo,
        min_size=pool_size,
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
        await serve_step(listen, step)
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--pool-size", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.database_url, args.pool_size))


if __name__ == "__main__":
    main()
