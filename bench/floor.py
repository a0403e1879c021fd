"""The same-stack floor: the cost of one admission-shaped call on the service's own stack.

A minimal ``grpc.aio`` server on the service's stack and process model (one Python process, one
event loop, the same gRPC, SQLAlchemy async + psycopg 3 engine built by
``storage.engine.create_engine`` with the same pool settings). Its one unary handler does the
durable work every mutating RPC must do: lock one session row, update it, insert one event row,
commit. Everything the service does beyond that is overhead of the service itself; what the
stack costs beyond the machine's limit is measured by the physical floor
(``bench/physical_floor.py``: one statement per call, no ORM), the reference of every target.

    python -m bench.floor --listen 127.0.0.1:PORT --database-url URL
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from admission_service.storage.engine import create_engine
from promptadmission.v1 import admission_service_pb2 as api
from sqlalchemy import text

METHOD = "/bench.Floor/Step"
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS floor_sessions ("
    " tenant_id text NOT NULL, session_id text NOT NULL, revision bigint NOT NULL DEFAULT 0,"
    " next_seq bigint NOT NULL DEFAULT 0, update_time timestamptz NOT NULL DEFAULT now(),"
    " PRIMARY KEY (tenant_id, session_id))",
    "CREATE TABLE IF NOT EXISTS floor_events ("
    " tenant_id text NOT NULL, session_id text NOT NULL, seq bigint NOT NULL,"
    " payload bytea NOT NULL, commit_time timestamptz NOT NULL DEFAULT now(),"
    " PRIMARY KEY (tenant_id, session_id, seq))",
)
LOCK = text(
    "SELECT revision, next_seq FROM floor_sessions"
    " WHERE tenant_id = :t AND session_id = :s FOR UPDATE"
)
UPDATE = text(
    "UPDATE floor_sessions SET revision = :r, next_seq = :n, update_time = now()"
    " WHERE tenant_id = :t AND session_id = :s"
)
INSERT = text(
    "INSERT INTO floor_events (tenant_id, session_id, seq, payload) VALUES (:t, :s, :q, :p)"
)
CREATE = text(
    "INSERT INTO floor_sessions (tenant_id, session_id) VALUES (:t, :s) ON CONFLICT DO NOTHING"
)


async def serve(listen: str, database_url: str, pool_size: int, max_overflow: int) -> None:
    engine = create_engine(database_url, pool_size=pool_size, max_overflow=max_overflow)
    async with engine.begin() as connection:
        for statement in SCHEMA:
            await connection.execute(text(statement))

    async def step(request: api.RecordRequest, context: Any) -> api.RecordResponse:
        keys = {"t": "bench", "s": request.session_id}
        async with engine.connect() as connection, connection.begin():
            row = (await connection.execute(LOCK, keys)).first()
            if row is None:
                await connection.execute(CREATE, keys)
                row = (await connection.execute(LOCK, keys)).first()
                assert row is not None
            payload = request.assistant.SerializeToString()
            await connection.execute(INSERT, {**keys, "q": row.next_seq, "p": payload})
            await connection.execute(UPDATE, {**keys, "r": row.revision + 1, "n": row.next_seq + 1})
        return api.RecordResponse(revision=row.revision + 1)

    await serve_step(listen, step)
    await engine.dispose()


Step = Callable[[api.RecordRequest, Any], Awaitable[api.RecordResponse]]


def print_ready() -> None:
    print("ready", flush=True)  # noqa: T201 (the parent process waits for this line)


async def serve_step(
    listen: str,
    step: Step,
    *,
    share_port: bool = False,
    ready: Callable[[], None] = print_ready,
) -> None:
    """Serve ``step`` as ``/bench.Floor/Step`` until SIGTERM or SIGINT; call ``ready`` once
    listening (by default print ``ready``: the benchmark waits for that line). Shared by both
    floors. ``share_port``: bind with ``SO_REUSEPORT``, as the service's workers do, so several
    processes serve one port (``bench/physical_floor.py --processes``)."""
    handler = grpc.unary_unary_rpc_method_handler(
        step,
        request_deserializer=api.RecordRequest.FromString,
        response_serializer=api.RecordResponse.SerializeToString,
    )
    server = grpc.aio.server(options=[("grpc.so_reuseport", 1 if share_port else 0)])
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Floor", {"Step": handler}),)
    )
    server.add_insecure_port(listen)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready()
    await stop.wait()
    await server.stop(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument("--max-overflow", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.database_url, args.pool_size, args.max_overflow))


if __name__ == "__main__":
    main()
