"""Page and plan tokens minted the way an attacker would, on every paged RPC of the real server
over a real channel (issue 21, item 4).

Before issue 21 the key was derived from the database URL's user, password and database name:
with trust authentication (no password: the compose default, CI) anybody could mint tokens
byte for byte (``tests/attacker_tokens.py``), and a minted cursor of the wrong shape reached
decoding paths that answered INTERNAL (ListEvents ``after`` = "abc" or missing, ListTrajectory
``after`` a string, ListSessions ``t`` missing, garbage or an int, ``i`` with NUL). Now the key
is a random secret stored in the database; every such token, and a well-signed token of the
wrong shape, is INVALID_ARGUMENT naming the field, and the inspector's ``?page=`` is HTTP 400.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from admission_service.app.page_tokens import KEY_ID_BYTES, TAG_BYTES, PageTokens
from admission_service.inspector.http import start_inspector
from promptadmission.v1 import admission_service_pb2 as messages
from sqlalchemy.engine import make_url

from tests.api.support import (
    ApiClient,
    StartApi,
    admit_request,
    api_settings,
    create_session,
    rich_error,
)
from tests.attacker_tokens import mint_v1

TENANT = "default"
# Cursors a paged RPC must refuse: of its shape (a forged position) and of every wrong shape.
EVENTS_CURSORS: list[dict[str, int | str]] = [{"after": 0}, {"after": "abc"}, {}, {"b": 1}]
SESSIONS_CURSORS: list[dict[str, int | str]] = [
    {"t": "2026-12-01T00:00:00+00:00", "i": "a"},
    {"i": "a"},
    {"t": "garbage", "i": "a"},
    {"t": 5, "i": "a"},
    {"t": "2026-12-01T00:00:00+00:00", "i": "a\x00b"},
    {"t": "2026-12-01T00:00:00+00:00", "i": 7},
]
PLAN_CURSORS: list[dict[str, int | str]] = [
    {"generation": 0, "next_seq": 3, "start": 0, "end": 2},
    {"generation": "0", "next_seq": 3, "start": 0, "end": 2},
    {},
]

Call = Callable[[str], Awaitable[Any]]


async def refused(call: Awaitable[Any], field: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    error = rich_error(caught.value)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD")
    assert error.violated_fields == [field], error.message


def guessed_key_token(genuine: str, scope: str, cursor: dict[str, int | str]) -> str:
    """The current format under a guessed key, naming the genuine key (its id copied from a
    token the attacker was given)."""
    guessed = base64.urlsafe_b64decode(PageTokens([b"g" * 32]).encode(scope, cursor) + "==")
    real = base64.urlsafe_b64decode(genuine + "==")
    forged = guessed[:1] + real[1 : 1 + KEY_ID_BYTES] + guessed[1 + KEY_ID_BYTES :]
    assert len(forged) > TAG_BYTES
    return base64.urlsafe_b64encode(forged).decode().rstrip("=")


def attacker_tokens(
    client: ApiClient, genuine: str, scope: str, cursors: list[dict[str, int | str]]
) -> list[str]:
    """For each cursor: minted with the old derivation from the server's database URL, and
    under a guessed key; and signed with the server's own key when it is of another shape
    (what a leaked key, or an older version's token, would give)."""
    url = make_url(client.server.engine.url.render_as_string(hide_password=False))
    user, password, database = url.username or "", url.password, url.database or ""
    minted = []
    for index, cursor in enumerate(cursors):
        minted.append(mint_v1(user, password, database, scope, cursor))
        minted.append(guessed_key_token(genuine, scope, cursor))
        if index > 0:  # the first cursor is of the right shape
            minted.append(client.server.deps.page_tokens.encode(scope, cursor))
    return minted


@pytest.fixture
async def session_with_pages(api: ApiClient) -> str:
    sid = await create_session(api.stub)
    for step in (1, 2):
        await api.stub.Admit(admit_request(sid, "P", f"u{step}", turn=step))
    return sid


async def test_every_paged_rpc_refuses_minted_tokens(
    api: ApiClient, session_with_pages: str
) -> None:
    stub, sid = api.stub, session_with_pages
    await create_session(stub)  # two sessions at least: ListSessions has a second page

    def events(token: str) -> Awaitable[Any]:
        return stub.ListEvents(api_events(sid, token))

    def trajectory(token: str) -> Awaitable[Any]:
        request = messages.ListTrajectoryRequest(session_id=sid, page_size=1, page_token=token)
        return stub.ListTrajectory(request)

    def sessions(token: str) -> Awaitable[Any]:
        return stub.ListSessions(messages.ListSessionsRequest(page_size=1, page_token=token))

    cases: list[tuple[str, list[dict[str, int | str]], Call]] = [
        (f"events/{TENANT}/{sid}", EVENTS_CURSORS, events),
        (f"trajectory/{TENANT}/{sid}", EVENTS_CURSORS, trajectory),
        (f"sessions/{TENANT}", SESSIONS_CURSORS, sessions),
    ]
    for scope, cursors, call in cases:
        genuine = (await call("")).next_page_token
        assert genuine, scope
        await call(genuine)  # the genuine token reads
        for minted in attacker_tokens(api, genuine, scope, cursors):
            await refused(call(minted), "page_token")

    plan = await stub.PlanCompaction(
        messages.PlanCompactionRequest(session_id=sid, retain_tokens=0)
    )
    for minted in attacker_tokens(api, plan.plan_token, f"compaction/{TENANT}/{sid}", PLAN_CURSORS):
        compact = messages.CompactRequest(session_id=sid, plan_token=minted, summary="s")
        await refused(stub.Compact(compact), "plan_token")
    info = await stub.GetSession(messages.GetSessionRequest(session_id=sid))
    assert info.session.revision == 2  # nothing was compacted


def api_events(sid: str, token: str) -> messages.ListEventsRequest:
    return messages.ListEventsRequest(session_id=sid, page_size=1, page_token=token)


async def test_replicas_sign_with_the_key_stored_in_the_database(start_api: StartApi) -> None:
    """No configuration: every server on one database reads the same stored key."""
    one, two = await start_api(), await start_api()
    sid = await create_session(one.stub)
    await one.stub.Admit(admit_request(sid, "P", "u"))
    page = await one.stub.ListEvents(api_events(sid, ""))
    assert (await two.stub.ListEvents(api_events(sid, page.next_page_token))).events


async def test_the_inspector_answers_400_to_a_minted_page(
    api: ApiClient, database_url: str
) -> None:
    """The inspector (a process of its own in ``serve``; here in this one) reads the same stored
    key: a token signed with it for the inspector's session list (newest first) reads its
    page, every minted one is 400."""
    inspector = await start_inspector(api_settings(database_url, inspector_listen="127.0.0.1:0"))
    try:
        await create_session(api.stub)
        tokens = await api.server.deps.page_tokens.ready()
        scope = f"sessions/{TENANT}/newest/"
        genuine = tokens.encode(scope, {"t": "2999-01-01T00:00:00+00:00", "i": "z"})
        base = f"http://127.0.0.1:{inspector.port}/?page="
        await _get(base + genuine)
        for minted in attacker_tokens(api, genuine, scope, SESSIONS_CURSORS):
            with pytest.raises(urllib.error.HTTPError) as caught:
                await _get(base + minted)
            assert caught.value.code == 400, minted
    finally:
        await inspector.stop()


async def _get(url: str) -> bytes:
    import asyncio

    def fetch() -> bytes:
        with urllib.request.urlopen(url, timeout=30) as response:
            return bytes(response.read())

    return await asyncio.to_thread(fetch)
