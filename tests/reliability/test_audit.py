"""The audit catches what it exists to catch: each check is shown failing on a session that
was damaged behind the service's back (so a green scenario means something)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from admission_service.domain.events import EventKind
from admission_service.storage.engine import libpq_url
from promptadmission.v1 import admission_service_pb2 as api

from tests.api.support import IN_HISTORY_ROUTE, ApiClient, start_client, user

from .checks import audit_book
from .harness import Book, assistant


@pytest.fixture
async def client(fresh_database: str) -> AsyncIterator[ApiClient]:
    started = await start_client(fresh_database)
    yield started
    await started.close()


async def busy(client: ApiClient, book: Book) -> str:
    """A session with two admitted steps and a reply, all acknowledged in ``book``."""
    sid = book.new_session_id()
    await client.stub.CreateSession(api.CreateSessionRequest(session_id=sid))
    session = book.add(sid)
    for turn, prompt in enumerate(["A", "B"]):
        text = book.unique("user")
        request = api.AdmitRequest(
            session_id=sid,
            request_id=str(uuid.uuid4()),
            turn=turn,
            rendered_prompt=prompt,
            route=IN_HISTORY_ROUTE,
            users=[user(text)],
        )
        response = await client.stub.Admit(request)
        claims = {c.seq: (EventKind.SYSTEM_MESSAGE, c.text) for c in response.commits}
        claims[response.user_seqs[0]] = (EventKind.USER_MESSAGE, text)
        session.expect("Admit", request.request_id, (text,)).ack(response.revision, claims)
    reply = book.unique("assistant")
    recorded = await client.stub.Record(
        api.RecordRequest(
            session_id=sid, admission_id=response.admission_id, assistant=assistant(reply, None)
        )
    )
    session.expect("Record", "r", (reply,)).ack(
        recorded.revision, {recorded.assistant_seq: (EventKind.ASSISTANT_MESSAGE, reply)}
    )
    return sid


async def execute(database_url: str, statement: str, *params: object) -> None:
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as connection:
        await connection.execute(statement, params)


async def test_a_sound_session_passes(client: ApiClient, fresh_database: str) -> None:
    book = Book("audit")
    await busy(client, book)
    figures = await audit_book(client.stub, fresh_database, book)
    assert figures.sessions == 1 and figures.acked == 3


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("DELETE FROM events WHERE session_id = %s AND seq = 1", None),  # seqs not dense
        ("DELETE FROM surface_nodes WHERE session_id = %s AND seq = 1", None),  # surface
        (
            "UPDATE events SET admission_id = NULL WHERE session_id = %s AND kind = 'user/message'",
            "admission",
        ),
    ],
)
async def test_damage_is_found(
    client: ApiClient, fresh_database: str, damage: str, message: str | None
) -> None:
    book = Book("audit")
    sid = await busy(client, book)
    await execute(fresh_database, damage, sid)
    with pytest.raises(AssertionError, match=message):
        await audit_book(client.stub, fresh_database, book)


async def test_a_lost_acknowledged_effect_is_found(client: ApiClient, fresh_database: str) -> None:
    book = Book("audit")
    sid = await busy(client, book)
    book.sessions[sid].effects[0].texts = ("a text that was never committed",)
    with pytest.raises(AssertionError, match="occurs 0x"):
        await audit_book(client.stub, fresh_database, book)


async def test_a_partial_step_is_found(client: ApiClient, fresh_database: str) -> None:
    book = Book("audit")
    sid = await busy(client, book)
    session = book.sessions[sid]
    committed = session.effects[0].texts[0]
    # An unacknowledged call said to commit two messages, of which only one is in the log.
    session.expect("Admit", "lost", (committed, "the other half"))
    session.effects[0].acked = False
    with pytest.raises(AssertionError, match="partial step"):
        await audit_book(client.stub, fresh_database, book)
