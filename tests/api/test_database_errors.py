"""Database errors in the hand-written statements map to their documented codes (issue 13,
finding 5). The deferred writes are sent as raw statements (``SessionStore._execute_raw``);
their errors used to meet an ``AttributeError`` (SQLAlchemy 2.0 has no ``handle_error`` on a
connection's dispatch) that replaced them, so every one was INTERNAL, and clients did not retry.

Each conflict is produced for real, by a second PostgreSQL connection acting while the call's
transaction is open (paused at a phase hook):

* a deadlock (40P01): ``LOCK TABLE events IN SHARE MODE``, then ``FOR UPDATE`` on the session
  row the call holds, while the call's writes wait for the table;
* a unique violation (23505): the call's idempotency key committed by someone else first;
* a serialization failure (40001): the same, on a database whose transactions are
  SERIALIZABLE (an operator's ``default_transaction_isolation``).

All three are ABORTED with ``CONCURRENT_MODIFICATION``: the transaction was rolled back, and a
retry with the same ``request_id`` is safe (both clients retry it).

These calls read their session under its lock (the server runs without its session cache). On
a session the worker cached, nothing is locked before the commit: a key stored first by someone
else fails the commit, and the call runs again on a fresh read, which finds that key (the last
test; the cache's other conflicts: tests/integration/test_session_cache.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import psycopg
import pytest
from admission_service.app.hooks import Phase
from admission_service.storage.engine import normalise_database_url
from promptadmission.v1 import admission_service_pb2 as api

from .support import StartApi, admit_request, create_session, rich_error

Action = Callable[[str, str], Awaitable[None]]  # (session_id, request_id)


class ActAt:
    """Runs ``action`` inside the first call that reaches (method, phase)."""

    def __init__(self, method: str, phase: Phase) -> None:
        self.target: tuple[str, Phase] | None = (method, phase)
        self.action: Callable[[], Awaitable[None]] | None = None

    async def reached(self, method: str, phase: Phase) -> None:
        if self.target != (method, phase) or self.action is None:
            return
        self.target = None
        await self.action()


def libpq_url(database_url: str) -> str:
    return database_url.replace("postgresql+psycopg://", "postgresql://")


@contextlib.asynccontextmanager
async def second_connection(database_url: str) -> Any:
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as connection:
        yield connection


async def admit_during(
    start_api: StartApi,
    database_url: str,
    phase: Phase,
    act: Callable[[str, str], Any],
    session_cache_bytes: int = 0,
) -> grpc.aio.AioRpcError:
    hooks = ActAt("Admit", phase)
    client = await start_api(
        hooks=hooks, database_url=database_url, session_cache_bytes=session_cache_bytes
    )
    sid = await create_session(client.stub)
    request_id = str(uuid.uuid4())
    hooks.action = lambda: act(sid, request_id)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await client.stub.Admit(admit_request(sid, "P", "u", request_id=request_id), timeout=30)
    # Nothing was committed by the refused call, and the session still serves.
    session = await client.stub.GetSession(api.GetSessionRequest(session_id=sid), timeout=10)
    assert session.session.revision == 0
    return failure.value


def assert_concurrent_modification(error: grpc.aio.AioRpcError) -> None:
    assert error.code() is grpc.StatusCode.ABORTED, error.details()
    assert rich_error(error).reason == "CONCURRENT_MODIFICATION"


async def wait_until_blocked(database_url: str, backend_pid: int) -> None:
    """Returns once the backend ``backend_pid`` waits for a lock another one holds."""
    async with second_connection(database_url) as watcher:
        await watcher.set_autocommit(True)  # each poll sees the lock table as it is now
        async with asyncio.timeout(30):
            while True:
                cursor = await watcher.execute(
                    "SELECT cardinality(pg_blocking_pids(%s)) > 0", (backend_pid,)
                )
                row = await cursor.fetchone()
                if row is not None and row[0]:
                    return
                await asyncio.sleep(0.01)  # polling: another server process's state


async def test_a_deadlock_is_aborted_concurrent_modification(
    start_api: StartApi, database_url: str
) -> None:
    blocker_done: list[asyncio.Task[None]] = []

    async def lock_then_wait_for_the_session(sid: str, request_id: str) -> None:
        async def blocker() -> None:
            async with second_connection(database_url) as other:
                # This side waits longer before looking for a deadlock: the call finds it.
                await other.execute("SET deadlock_timeout = '20s'")
                await other.execute("LOCK TABLE events IN SHARE MODE")
                locked.set_result(other.info.backend_pid)
                await other.execute(
                    "SELECT 1 FROM sessions WHERE session_id = %s FOR UPDATE", (sid,)
                )
                await other.rollback()

        locked: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        blocker_done.append(asyncio.create_task(blocker()))
        # The blocker holds the events table and now waits for the call's session row lock.
        await wait_until_blocked(database_url, await locked)

    error = await admit_during(
        start_api, database_url, Phase.DERIVE, lock_then_wait_for_the_session
    )
    await asyncio.gather(*blocker_done)
    assert_concurrent_modification(error)
    assert "deadlock" not in (error.details() or "")  # the database's text stays in the log


async def insert_the_calls_key(database_url: str, sid: str, request_id: str) -> None:
    async with second_connection(database_url) as other:
        await other.execute(
            "INSERT INTO idempotency_keys (tenant_id, session_id, request_id, method,"
            " request_digest, response) VALUES ('default', %s, %s, 'Admit', '\\x00', '\\x00')",
            (sid, request_id),
        )
        await other.commit()


async def test_a_unique_violation_is_aborted_concurrent_modification(
    start_api: StartApi, database_url: str
) -> None:
    async def someone_stores_the_key_first(sid: str, request_id: str) -> None:
        await insert_the_calls_key(database_url, sid, request_id)

    error = await admit_during(start_api, database_url, Phase.DERIVE, someone_stores_the_key_first)
    assert_concurrent_modification(error)


async def test_on_a_cached_session_a_key_stored_first_is_found_by_the_call_run_again(
    start_api: StartApi, database_url: str
) -> None:
    async def someone_stores_the_key_first(sid: str, request_id: str) -> None:
        await insert_the_calls_key(database_url, sid, request_id)

    error = await admit_during(
        start_api,
        database_url,
        Phase.DERIVE,
        someone_stores_the_key_first,
        session_cache_bytes=1 << 24,
    )
    # The stored key is for another request (its digest): the retry-safe answer to a reuse.
    assert error.code() is grpc.StatusCode.ALREADY_EXISTS, error.details()
    assert rich_error(error).reason == "REQUEST_ID_REUSED"


async def test_a_serialization_failure_is_aborted_concurrent_modification(
    start_api: StartApi, database_url: str
) -> None:
    serializable = normalise_database_url(
        database_url + "?options=-c%20default_transaction_isolation%3Dserializable"
    )

    async def someone_stores_the_key_first(sid: str, request_id: str) -> None:
        await insert_the_calls_key(database_url, sid, request_id)

    error = await admit_during(start_api, serializable, Phase.DERIVE, someone_stores_the_key_first)
    assert_concurrent_modification(error)
