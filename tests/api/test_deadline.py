"""The call's deadline bounds its database work (``storage/deadline.py``).

A call waits for a session's row lock that another connection holds. When its deadline passes
the server cancels the call, and the driver asks PostgreSQL to cancel the statement over a new
connection; here that request cannot get through (a network gone silent, made by a proxy that
stops forwarding new connections). PostgreSQL must stop the statement by itself, at the
deadline, and the lock's holder must not be disturbed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc
import psycopg
import pytest
from admission_service.storage.engine import libpq_url
from promptadmission.v1 import admission_service_pb2 as api
from sqlalchemy.engine import make_url

from .proxy import DatabaseProxy, database_proxy
from .support import admit_request, create_session, start_client

__all__ = ["database_proxy"]  # the fixture

DEADLINE = 1.0
# How long after the deadline a server-side statement may still be seen (the server's timer,
# then the backend's bookkeeping); far below the time a stuck lock wait would show.
SETTLE = 3.0


def waiting_statements(admin: psycopg.Connection, database: str) -> list[str]:
    """Statements of the service waiting for a lock in ``database``."""
    rows = admin.execute(
        "SELECT query FROM pg_stat_activity WHERE datname = %s AND state = 'active'"
        " AND application_name = 'admission-service' AND wait_event_type = 'Lock'",
        (database,),
    ).fetchall()
    return [row[0] for row in rows]


async def wait_for(condition: Callable[[], object], seconds: float) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if condition():
            return True
        await asyncio.sleep(0.05)
    return bool(condition())


async def test_a_call_waiting_for_a_locked_session_stops_waiting_at_its_deadline(
    database_proxy: tuple[DatabaseProxy, str], database_url: str
) -> None:
    proxy, proxied_url = database_proxy
    client = await start_client(proxied_url, db_pool_size=2, db_max_overflow=0)
    url = libpq_url(database_url)
    database = make_url(url).database or ""
    try:
        session_id = await create_session(client.stub)
        await client.stub.Admit(admit_request(session_id, "Be brief.", "first"))
        with (
            psycopg.connect(url) as holder,
            psycopg.connect(url, autocommit=True) as admin,
        ):
            # Another connection holds the session's row lock (an open transaction elsewhere).
            holder.execute(
                "SELECT 1 FROM sessions WHERE tenant_id = 'default' AND session_id = %s FOR UPDATE",
                (session_id,),
            )
            started = time.monotonic()
            call = client.stub.Admit(
                admit_request(session_id, "Be brief.", "second"), timeout=DEADLINE
            )
            assert await wait_for(lambda: waiting_statements(admin, database), DEADLINE / 2)
            proxy.silent = True  # the driver's cancel request will not get through
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await call
            assert failed.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            assert time.monotonic() - started < DEADLINE + SETTLE

            # PostgreSQL stopped the statement itself: nothing of the service waits on.
            assert await wait_for(lambda: not waiting_statements(admin, database), SETTLE)

            # The lock holder's transaction is untouched: it still works and commits.
            assert holder.execute("SELECT 1").fetchone() == (1,)
            holder.commit()

        # The session goes on; the call that timed out wrote nothing.
        proxy.silent = False
        third = await client.stub.Admit(admit_request(session_id, "Be brief.", "third"), timeout=30)
        assert third.admission_id
        got = await client.stub.GetSession(api.GetSessionRequest(session_id=session_id))
        assert got.session.revision == 2  # the first and the third Admit
    finally:
        await client.close()
