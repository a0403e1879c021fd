"""A prototype of the lean one-call step (issue 14 item 3), for measurement only: not the service.

The service's one-call step today sends eight round trips to PostgreSQL (``python -m
bench.roundtrips``): the pool's pre-ping, ``BEGIN``, the session row lock, the admission
lookup, the output's writes, the system nodes and frames read, the admission's writes, and
``COMMIT`` — each statement parsed and planned anew (no prepared statements), through
SQLAlchemy. This server makes the same step on the **real schema** (the service's migrations)
with **the service's own statements** (the lock, the admission lookup, the frames read, the
writes of the output and of the admission: the same tables, columns and rows), but the way the
issue proposes, with raw psycopg 3 and no ORM:

* round trip 1, pipelined: ``BEGIN``, the session row lock, the admission lookup and the
  frames read, in one flight (the positions come from the locked row inside the statement);
* round trip 2, pipelined: ONE data-modifying CTE with every write of the step (two events,
  two surface nodes, the answered request's usage, the new admission and request, the session
  row) and ``COMMIT``, in one flight (an autocommit connection with an explicit transaction:
  psycopg's own ``BEGIN`` would take a flight of its own);
* psycopg's prepared statements (after the fifth call), and a pool without pre-ping.

It serves ``/bench.Floor/Step`` like the floors (a ``RecordRequest``: the session id and the
assistant message, which it records as the previous output, with a user message of the same
size as the next input), so S1's and S2's clients measure it as they measure them. The encoded
``promptadmission.v1.Message`` is stored as the events' payload and (unframed: 2-3 bytes
short) as the nodes' ``message_pb``.

    python -m bench.lean_step --listen 127.0.0.1:PORT --database-url URL [--migrate]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import uuid
from typing import Any

import psycopg
from promptadmission.v1 import admission_service_pb2 as api
from psycopg_pool import AsyncConnectionPool

from bench.floor import serve_step
from bench.physical_floor import libpq_url

TENANT = "bench-lean"
# The service's own lock (storage: SessionStore.read).
PROMPT = b"You are a careful coding agent. Work in small, verified steps. " * 8
PROMPT_HEX = PROMPT.hex()
PROMPT_DIGEST = hashlib.sha256(PROMPT).digest()
LOCK = (
    "SELECT revision, next_seq, next_position, replace_generation, last_request_generation,"
    " last_header, last_context, last_request, shadowed_position, shadowed_system,"
    " request_count, surface_tokens, surface_bytes, surface_nodes, log_bytes"
    " FROM sessions WHERE tenant_id = %(t)s AND session_id = %(s)s FOR UPDATE"
)
# The service's admission lookup (the admission the output answers: the latest here).
ADMISSION = (
    "SELECT a.admission_id, a.turn, a.step, p.body, t.body, a.attempts, a.prompt_digest,"
    " a.tools_digest FROM admissions AS a JOIN admission_inputs AS p"
    " ON p.tenant_id = a.tenant_id AND p.session_id = a.session_id AND p.digest = a.prompt_digest"
    " JOIN admission_inputs AS t ON t.tenant_id = a.tenant_id AND t.session_id = a.session_id"
    " AND t.digest = a.tools_digest"
    " WHERE a.tenant_id = %(t)s AND a.session_id = %(s)s AND a.admission_id ="
    " (SELECT admission_id FROM requests WHERE tenant_id = %(t)s AND session_id = %(s)s"
    " ORDER BY request_index DESC LIMIT 1)"
)
# The service's system nodes and frames read (DELTA: the nodes after the previous request's
# end), its positions taken from the locked session row instead of a parameter.
FRAMES = (
    "SELECT f.*, (SELECT array_agg(seq ORDER BY position) FROM surface_nodes"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s AND is_system) AS system_seqs,"
    " (SELECT array_agg(system_text ORDER BY position) FROM surface_nodes"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s AND is_system) AS system_texts,"
    " (SELECT array_agg(c.call_id ORDER BY c.call_seq, c.call_id) FROM tool_calls AS c"
    " WHERE c.tenant_id = %(t)s AND c.session_id = %(s)s AND c.result_seq IS NULL AND EXISTS"
    " (SELECT 1 FROM surface_nodes AS n WHERE n.tenant_id = %(t)s AND n.session_id = %(s)s"
    " AND n.seq = c.call_seq)) AS open_calls"
    " FROM (SELECT string_agg(message_pb, ''::bytea ORDER BY position) AS frames,"
    " count(message_pb) AS messages, coalesce(sum(tokens), 0)::bigint AS tokens"
    " FROM surface_nodes WHERE tenant_id = %(t)s AND session_id = %(s)s"
    " AND position >= (SELECT greatest(next_position - 2, 0) FROM sessions"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s) AND message_pb IS NOT NULL) AS f"
)
# Every write of the step in one statement: the service's two write statements merged.
WRITES = (
    "WITH ev AS (INSERT INTO events (tenant_id, session_id, seq, kind, turn, step, surface_op,"
    " admission_id, payload) VALUES"
    " (%(t)s, %(s)s, %(seq)s, 'message', %(turn)s, 1, 'append', %(prev)s, %(out)s),"
    " (%(t)s, %(s)s, %(seq)s + 1, 'message', %(turn)s + 1, 0, 'append', %(adm)s, %(in)s)),"
    " nodes AS (INSERT INTO surface_nodes (tenant_id, session_id, seq, is_system,"
    " message_pb, tokens, turn, step, position) VALUES"
    " (%(t)s, %(s)s, %(seq)s, false, %(out)s, 50, %(turn)s, 1, %(pos)s),"
    " (%(t)s, %(s)s, %(seq)s + 1, false, %(in)s, 50, %(turn)s + 1, 0, %(pos)s + 1)),"
    " observed AS (UPDATE requests SET observed = %(usage)s WHERE tenant_id = %(t)s"
    " AND session_id = %(s)s AND request_index = (SELECT max(request_index) FROM requests"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s AND admission_id = %(prev)s)),"
    " admission AS (INSERT INTO admissions (tenant_id, session_id, admission_id, turn, step,"
    " prompt_digest, tools_digest, users_seqs, attempts) VALUES (%(t)s, %(s)s, %(adm)s,"
    " %(turn)s + 1, 0, %(prompt)s, sha256('[]'::bytea), ARRAY[%(seq)s + 1]::bigint[], 1)),"
    " request AS (INSERT INTO requests (tenant_id, session_id, request_index, admission_id,"
    " attempt, forecast) VALUES (%(t)s, %(s)s, %(index)s, %(adm)s, 1, %(forecast)s))"
    " UPDATE sessions SET revision = revision + 1, next_seq = next_seq + 2,"
    " next_position = next_position + 2, last_request = %(last)s,"
    " request_count = request_count + 1, surface_tokens = surface_tokens + 100,"
    " surface_bytes = surface_bytes + %(bytes)s, surface_nodes = surface_nodes + 2,"
    " log_bytes = log_bytes + %(bytes)s, update_time = now()"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s RETURNING revision"
)
CREATE = "INSERT INTO sessions (tenant_id, session_id) VALUES (%(t)s, %(s)s) ON CONFLICT DO NOTHING"
# The session's prompt and (empty) tool set, stored once as the service stores them; every
# step's admission names them by digest (``%(prompt)s`` is the prompt's digest).
INPUTS = (
    "INSERT INTO admission_inputs (tenant_id, session_id, digest, body) VALUES"
    f" (%(t)s, %(s)s, sha256('\\x{PROMPT_HEX}'::bytea), '\\x{PROMPT_HEX}'::bytea),"
    " (%(t)s, %(s)s, sha256('[]'::bytea), '[]'::bytea) ON CONFLICT DO NOTHING"
)
# The one-round-trip variant: the same statements inside one PL/pgSQL function (its plans
# cached by PL/pgSQL), called as one prepared statement in autocommit.
_NAMES = {
    "t": "p_t", "s": "p_s", "seq": "v_seq", "pos": "v_pos", "turn": "v_turn", "prev": "v_prev",
    "adm": "p_adm", "out": "p_out", "in": "p_in", "usage": "p_usage", "prompt": "p_prompt",
    "forecast": "p_forecast", "index": "v_index", "last": "p_last", "bytes": "p_bytes",
}  # fmt: skip


def _bound(statement: str) -> str:
    """``statement`` with its parameters named as the function's arguments and variables."""
    for name, variable in _NAMES.items():
        statement = statement.replace(f"%({name})s", variable)
    return statement


def _plpgsql(statement: str, into: str) -> str:
    statement = _bound(statement)
    if statement.startswith("SELECT "):
        return f"SELECT INTO {into} {statement.removeprefix('SELECT ')}"
    return f"{statement} INTO {into}"


FUNCTION = f"""
CREATE OR REPLACE FUNCTION bench_lean_step(p_t text, p_s text, p_out bytea, p_in bytea,
    p_adm text, p_usage bytea, p_prompt bytea, p_forecast bytea, p_last bytea, p_bytes bigint)
RETURNS TABLE (o_revision bigint, o_frames bytea) LANGUAGE plpgsql AS $fn$
DECLARE
    v_lock record; v_admission record; v_frames record;
    v_rev bigint; v_seq bigint; v_pos bigint; v_turn bigint; v_prev text; v_index bigint;
BEGIN
    {_plpgsql(LOCK, "v_lock")};
    IF NOT FOUND THEN
        INSERT INTO sessions (tenant_id, session_id) VALUES (p_t, p_s) ON CONFLICT DO NOTHING;
        {_bound(INPUTS)};
        RETURN QUERY SELECT 0::bigint, NULL::bytea;
        RETURN;
    END IF;
    {_plpgsql(ADMISSION, "v_admission")};
    IF FOUND THEN v_prev := v_admission.admission_id; END IF;
    {_plpgsql(FRAMES, "v_frames")};
    v_seq := v_lock.next_seq; v_pos := v_lock.next_position; v_turn := v_lock.next_seq / 2;
    v_index := v_lock.request_count;
    {_plpgsql(WRITES, "v_rev")};
    RETURN QUERY SELECT v_rev, v_frames.frames;
END
$fn$"""
CALL = (
    "SELECT o_revision, o_frames FROM bench_lean_step(%(t)s, %(s)s, %(out)s, %(in)s, %(adm)s,"
    " %(usage)s, %(prompt)s, %(forecast)s, %(last)s, %(bytes)s)"
)
FORECAST = b"\x08\xe8\x07\x10\x84\x07" * 8  # a serialized forecast's size
LAST_REQUEST = b"\x01" * 120  # the session row's running prefix (count, price, digest, end)


async def step(
    pool: AsyncConnectionPool[Any], session_id: str, output: bytes
) -> tuple[int, bytes | None]:
    """One lean step in two round trips; the new revision and the frames read.

    The connection is in autocommit mode and the transaction explicit, so ``BEGIN`` travels
    with the reads and ``COMMIT`` with the writes (psycopg's own transaction handling sends
    ``BEGIN`` in a flight of its own and ends the pipeline with another)."""
    key = {"t": TENANT, "s": session_id}
    async with pool.connection() as connection:
        try:
            async with connection.pipeline() as pipeline:
                await connection.execute(b"BEGIN")
                locked = await connection.execute(LOCK, key)
                admitted = await connection.execute(ADMISSION, key)
                frames = await connection.execute(FRAMES, key)
                await pipeline.sync()  # round trip 1: BEGIN, lock, lookup, frames
                row = await locked.fetchone()
                if row is None:  # the session's first call: create it (warm-up only)
                    await connection.execute(CREATE, key)
                    await connection.execute(INPUTS, key)
                    await connection.execute(b"COMMIT")
                    return 0, None
                previous = await admitted.fetchone()
                read = await frames.fetchone()
                next_seq, next_position, request_count = row[1], row[2], row[10]
                written = await connection.execute(
                    WRITES,
                    {
                        **key,
                        "seq": next_seq,
                        "pos": next_position,
                        "turn": next_seq // 2,
                        "prev": previous[0] if previous else None,
                        "adm": uuid.uuid4().hex,
                        "out": output,
                        "in": output,
                        "usage": FORECAST,
                        "prompt": PROMPT_DIGEST,
                        "forecast": FORECAST,
                        "index": request_count,
                        "last": LAST_REQUEST,
                        "bytes": 2 * len(output),
                    },
                )
                await connection.execute(b"COMMIT")
            # round trip 2: the pipeline's end sends the writes and COMMIT and waits for them
            new = await written.fetchone()
        except BaseException:
            await connection.execute(b"ROLLBACK")  # a no-op warning outside a transaction
            raise
    assert new is not None
    return int(new[0]), read[0] if read else None


async def step_in_one_call(
    pool: AsyncConnectionPool[Any], session_id: str, output: bytes
) -> tuple[int, bytes | None]:
    """The same step as ``step`` in ONE round trip: the function above, in autocommit."""
    async with pool.connection() as connection:
        cursor = await connection.execute(
            CALL,
            {
                "t": TENANT,
                "s": session_id,
                "out": output,
                "in": output,
                "adm": uuid.uuid4().hex,
                "usage": FORECAST,
                "prompt": PROMPT_DIGEST,
                "forecast": FORECAST,
                "last": LAST_REQUEST,
                "bytes": 2 * len(output),
            },
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0]), row[1]


async def serve(
    listen: str, database_url: str, pool_size: int, migrate: bool, one_call: bool = False
) -> None:
    if migrate:
        from admission_service.storage.engine import run_migrations

        await asyncio.to_thread(run_migrations, database_url)
    if one_call:
        async with await psycopg.AsyncConnection.connect(
            libpq_url(database_url), autocommit=True
        ) as connection:
            await connection.execute(FUNCTION.encode())
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        libpq_url(database_url),
        # One connection at first, up to pool_size as callers wait (during S2's warm-up): an
        # idle floor holds one, not pool_size, of the server's max_connections.
        min_size=1,
        max_size=pool_size,
        kwargs={"autocommit": True},
        open=False,
    )
    await pool.open(wait=True)

    async def handler(request: api.RecordRequest, context: Any) -> api.RecordResponse:
        run = step_in_one_call if one_call else step
        revision, _ = await run(pool, request.session_id, request.assistant.SerializeToString())
        return api.RecordResponse(revision=revision)

    try:
        await serve_step(listen, handler)
    finally:
        await pool.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument("--migrate", action="store_true", help="run the service's migrations")
    parser.add_argument(
        "--one-call", action="store_true", help="one round trip: the step as a PL/pgSQL function"
    )
    args = parser.parse_args(argv)
    asyncio.run(serve(args.listen, args.database_url, args.pool_size, args.migrate, args.one_call))


if __name__ == "__main__":
    main()
