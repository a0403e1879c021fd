"""Issue 13, bounded growth: session bounds, bounded responses, bounded and expiring idempotency
records, request ids across a session's lifetimes, tenant quotas. Real server, real channel,
real PostgreSQL through the migrations.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from admission_service.api.tenancy import hash_token
from admission_service.app.hooks import Phase
from admission_service.app.limits import Limits, Quotas
from admission_service.storage.engine import create_engine
from promptadmission.v1 import admission_service_pb2 as rpc
from promptadmission.v1 import session_pb2 as pb
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.api.support import (
    REPLACE_ROUTE,
    ApiClient,
    StartApi,
    admit_request,
    async_stub,
    channel_with_metadata,
    create_session,
    new_session_id,
    rich_error,
    user,
)

if TYPE_CHECKING:
    from promptadmission.v1.admission_service_pb2_grpc import AdmissionServiceAsyncStub as Stub

METHOD = "/promptadmission.v1.AdmissionService/"


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    yield engine
    await engine.dispose()


async def raw_call(client: ApiClient, method: str, request: Any) -> bytes:
    """The response's bytes exactly as the server sent them."""
    call = client.channel.unary_unary(
        METHOD + method,
        request_serializer=lambda r: r.SerializeToString(),
        response_deserializer=None,
    )
    data: bytes = await call(request)
    return data


async def expect_error(call: Any, code: grpc.StatusCode, reason: str) -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    error = rich_error(caught.value)
    assert (error.code, error.reason) == (code, reason), error.message
    return error


async def bounded(start_api: StartApi, **limits: int) -> ApiClient:
    return await start_api(limits=replace(Limits(), **limits))


# ---- finding 2: session bounds and bounded responses ---------------------------------------


@pytest.mark.parametrize(
    ("limit", "reason", "bound"),
    [
        ({"max_session_surface_bytes": 2000}, "SESSION_SURFACE_BYTES_EXCEEDED", "bytes"),
        ({"max_session_surface_nodes": 6}, "SESSION_SURFACE_NODES_EXCEEDED", "nodes"),
    ],
)
async def test_a_session_stops_growing_at_its_bound_and_compaction_frees_room(
    start_api: StartApi, limit: dict[str, int], reason: str, bound: str
) -> None:
    client = await bounded(start_api, **limit)
    stub = client.stub
    sid = await create_session(stub)
    step = 0
    while True:
        step += 1
        request = admit_request(sid, "You are terse.", "x" * 300, turn=step)
        try:
            await stub.Admit(request)
        except grpc.aio.AioRpcError as exc:
            error = rich_error(exc)
            break
        assert step < 50, "the bound never applied"
    assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.reason == reason
    info = error.error_infos[0]
    assert info.metadata["bound"].endswith(bound)
    assert int(info.metadata["value"]) > int(info.metadata["limit"])
    assert "compact" in error.message
    # Nothing of the refused call was committed.
    session = (await stub.GetSession(rpc.GetSessionRequest(session_id=sid))).session
    assert session.revision == step - 1
    # A compaction shrinks the surface: always allowed, and then the session grows again.
    plan = await stub.PlanCompaction(rpc.PlanCompactionRequest(session_id=sid, retain_tokens=0))
    await stub.Compact(rpc.CompactRequest(session_id=sid, plan_token=plan.plan_token, summary="s"))
    await stub.Admit(admit_request(sid, "You are terse.", "again", turn=step + 1))


async def test_a_full_request_over_the_response_bound_points_at_delta(
    start_api: StartApi,
) -> None:
    client = await bounded(start_api, max_response_bytes=4096)
    stub = client.stub
    sid = await create_session(stub)
    first = await stub.Admit(admit_request(sid, "P", "a" * 1500, turn=1))
    held = first.request
    second = await stub.Admit(
        admit_request(
            sid,
            "P",
            "b" * 1500,
            turn=2,
            view=pb.REQUEST_VIEW_DELTA,
            held_prefix=pb.HeldPrefix(message_count=held.total_messages, digest=held.digest),
        )
    )
    revision = second.revision
    error = await expect_error(
        stub.Admit(admit_request(sid, "P", "c" * 1500, turn=3)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "RESPONSE_TOO_LARGE",
    )
    assert "REQUEST_VIEW_DELTA" in error.message
    assert error.error_infos[0].metadata["limit"] == "4096"
    session = (await stub.GetSession(rpc.GetSessionRequest(session_id=sid))).session
    assert session.revision == revision  # the refused Admit committed nothing
    # The DELTA view still carries the step: only the messages since the held prefix.
    third = await stub.Admit(
        admit_request(
            sid,
            "P",
            "c" * 1500,
            turn=3,
            view=pb.REQUEST_VIEW_DELTA,
            held_prefix=pb.HeldPrefix(
                message_count=second.request.total_messages, digest=second.request.digest
            ),
        )
    )
    assert third.request.view == pb.REQUEST_VIEW_DELTA
    assert [m.content[0].text.text for m in third.request.messages] == ["c" * 1500]
    # Inspect likewise: FULL is refused, DELTA answers.
    await expect_error(
        stub.Inspect(rpc.InspectRequest(session_id=sid)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "RESPONSE_TOO_LARGE",
    )
    held_now = pb.HeldPrefix(
        message_count=third.request.total_messages, digest=third.request.digest
    )
    inspected = await stub.Inspect(
        rpc.InspectRequest(session_id=sid, view=pb.REQUEST_VIEW_DELTA, held_prefix=held_now)
    )
    assert inspected.request.view == pb.REQUEST_VIEW_DELTA


async def test_a_compaction_plan_over_the_response_bound_asks_for_a_smaller_range(
    start_api: StartApi,
) -> None:
    client = await bounded(start_api, max_response_bytes=4096)
    stub = client.stub
    sid = await create_session(stub)
    seqs: list[int] = []
    held = pb.HeldPrefix()
    for turn in (1, 2, 3):
        admitted = await stub.Admit(
            admit_request(
                sid, "P", str(turn) * 1500, turn=turn, view=pb.REQUEST_VIEW_DELTA, held_prefix=held
            )
        )
        seqs += list(admitted.user_seqs)
        held = pb.HeldPrefix(
            message_count=admitted.request.total_messages, digest=admitted.request.digest
        )
    error = await expect_error(
        stub.PlanCompaction(rpc.PlanCompactionRequest(session_id=sid, retain_tokens=0)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "RESPONSE_TOO_LARGE",
    )
    assert "smaller" in error.message
    plan = await stub.PlanCompaction(
        rpc.PlanCompactionRequest(
            session_id=sid, range=pb.SeqRange(start_seq=seqs[0], end_seq=seqs[1])
        )
    )
    assert plan.plan_token and plan.summarization_input  # a smaller range fits


async def test_list_events_pages_by_bytes_and_continues(start_api: StartApi) -> None:
    client = await bounded(start_api, max_events_page_bytes=2000)
    stub = client.stub
    sid = await create_session(stub)
    sizes = [100, 100, 700, 100, 5000, 100, 100, 100, 900, 900]
    for turn, size in enumerate(sizes, start=1):
        await stub.Admit(admit_request(sid, "P", "u" * size, turn=turn))
    total = (await stub.GetSession(rpc.GetSessionRequest(session_id=sid))).session.event_count
    seen: list[int] = []
    pages: list[list[rpc.ListEventsResponse]] = []
    token = ""
    while True:
        page = await stub.ListEvents(
            rpc.ListEventsRequest(session_id=sid, page_size=1000, page_token=token)
        )
        events = list(page.events)
        assert events, "a page with a next token is never empty"
        big = [e for e in events if len(e.message.content) and len(e.SerializeToString()) > 2000]
        if big:
            assert len(events) == 1, "an event over the budget comes alone"
        else:
            assert sum(len(e.SerializeToString()) for e in events) < 2 * 2000
        seen += [e.seq for e in events]
        pages.append(events)  # type: ignore[arg-type]
        token = page.next_page_token
        if not token:
            break
    assert seen == list(range(total))
    assert len(pages) > 2
    # page_size still applies with the byte budget.
    page = await stub.ListEvents(rpc.ListEventsRequest(session_id=sid, page_size=2))
    assert [e.seq for e in page.events] == [0, 1] and page.next_page_token


# ---- finding 3: bounded, replayable, expiring idempotency records -----------------------


async def stored_sizes(db: AsyncEngine, sid: str) -> tuple[int, int]:
    """(bytes of the session's stored responses and recipes, bytes of its event log)."""
    async with db.connect() as connection:
        stored = (
            await connection.execute(
                text(
                    "SELECT coalesce(sum(octet_length(response)"
                    " + coalesce(octet_length(derived_request), 0)), 0)"
                    " FROM idempotency_keys WHERE session_id = :s"
                ),
                {"s": sid},
            )
        ).scalar_one()
        logged = (
            await connection.execute(
                text(
                    "SELECT coalesce(sum(octet_length(payload)), 0) FROM events"
                    " WHERE session_id = :s"
                ),
                {"s": sid},
            )
        ).scalar_one()
    return int(stored), int(logged)


async def test_idempotency_records_do_not_grow_with_the_session(
    api: ApiClient, db: AsyncEngine
) -> None:
    stub = api.stub
    sid = await create_session(stub)
    turns = 60
    for turn in range(1, turns + 1):
        request = admit_request(sid, "You are a careful agent.", "t" * 500, turn=turn)
        request.request_id = uuid.uuid4().hex
        response = await stub.Admit(request)
        recorded = rpc.RecordRequest(
            session_id=sid,
            admission_id=response.admission_id,
            assistant=pb.Message(
                role=pb.MESSAGE_ROLE_ASSISTANT,
                content=[pb.ContentBlock(text=pb.TextBlock(text="a" * 500))],
            ),
            request_id=uuid.uuid4().hex,
        )
        await stub.Record(recorded)
    stored, logged = await stored_sizes(db, sid)
    # Each record is the response head and a recipe: a few hundred bytes, not the request.
    assert stored < 1000 * 2 * turns
    assert stored < logged / 2, (stored, logged)


async def test_a_retry_replays_the_same_bytes_after_later_steps_and_compaction(
    api: ApiClient,
) -> None:
    stub = api.stub
    sid = await create_session(stub)
    await stub.Admit(admit_request(sid, "A", "one", turn=1))
    originals: list[tuple[rpc.AdmitRequest, bytes]] = []
    for turn, wire in ((2, pb.WIRE_FORMAT_NEUTRAL), (3, pb.WIRE_FORMAT_OPENAI_CHAT)):
        request = admit_request(sid, "B" * turn, f"step {turn}", turn=turn, wire_format=wire)
        request.request_id = uuid.uuid4().hex
        originals.append((request, await raw_call(api, "Admit", request)))
    parsed = rpc.AdmitResponse.FromString(originals[-1][1])
    delta = admit_request(
        sid,
        "C",
        "delta",
        turn=4,
        request_id=uuid.uuid4().hex,
        view=pb.REQUEST_VIEW_DELTA,
        held_prefix=pb.HeldPrefix(
            message_count=parsed.request.total_messages, digest=parsed.request.digest
        ),
    )
    delta_bytes = await raw_call(api, "Admit", delta)
    assert rpc.AdmitResponse.FromString(delta_bytes).request.view == pb.REQUEST_VIEW_DELTA
    originals.append((delta, delta_bytes))
    # A retry right away (the stored nodes still hold that surface).
    for request, first in originals:
        assert await raw_call(api, "Admit", request) == first
    # Later steps and a compaction shadow nodes the first responses carried.
    await stub.Admit(admit_request(sid, "D", "later", turn=5))
    plan = await stub.PlanCompaction(rpc.PlanCompactionRequest(session_id=sid, retain_tokens=0))
    await stub.Compact(rpc.CompactRequest(session_id=sid, plan_token=plan.plan_token, summary="s"))
    for request, first in originals:
        assert await raw_call(api, "Admit", request) == first
    # Reconcile is recorded the same way.
    admitted = rpc.AdmitResponse.FromString(originals[0][1])
    reconcile = rpc.ReconcileRequest(
        session_id=sid,
        admission_id=admitted.admission_id,
        route=REPLACE_ROUTE,
        request_id=uuid.uuid4().hex,
    )
    first = await raw_call(api, "Reconcile", reconcile)
    await stub.Admit(admit_request(sid, "E", "after", turn=6))
    assert await raw_call(api, "Reconcile", reconcile) == first


async def count_keys(db: AsyncEngine, sid: str) -> dict[str, str]:
    async with db.connect() as connection:
        rows = await connection.execute(
            text("SELECT request_id, method FROM idempotency_keys WHERE session_id = :s"),
            {"s": sid},
        )
        return {row.request_id: row.method for row in rows}


async def test_delete_session_keeps_only_its_own_key(api: ApiClient, db: AsyncEngine) -> None:
    stub = api.stub
    sid = new_session_id()
    await stub.CreateSession(rpc.CreateSessionRequest(session_id=sid, request_id="c1"))
    await stub.Admit(admit_request(sid, "P", "u", turn=1, request_id="a1"))
    assert set(await count_keys(db, sid)) == {"c1", "a1"}
    await stub.DeleteSession(rpc.DeleteSessionRequest(session_id=sid, request_id="d1"))
    assert await count_keys(db, sid) == {"d1": "DeleteSession"}
    # Its retry replays.
    await stub.DeleteSession(rpc.DeleteSessionRequest(session_id=sid, request_id="d1"))


async def test_expired_keys_are_swept_and_counted(start_api: StartApi, db: AsyncEngine) -> None:
    client = await start_api(idempotency_retention_seconds=3600, idempotency_sweep_seconds=0)
    stub = client.stub
    sid = new_session_id()
    await stub.CreateSession(rpc.CreateSessionRequest(session_id=sid, request_id="c1"))
    await stub.Admit(admit_request(sid, "P", "u", turn=1, request_id="old"))
    await stub.Admit(admit_request(sid, "P", "v", turn=2, request_id="new"))
    async with db.begin() as connection:
        await connection.execute(
            text(
                "UPDATE idempotency_keys SET create_time = now() - interval '2 hours'"
                " WHERE session_id = :s AND request_id IN ('c1', 'old')"
            ),
            {"s": sid},
        )
    sweeper = client.server.sweeper
    assert sweeper is not None
    sweeper.batch = 1  # several batches
    before = sweeper.swept._value.get()
    swept = await sweeper.sweep()
    assert swept >= 2
    assert sweeper.swept._value.get() - before == swept
    assert set(await count_keys(db, sid)) == {"new"}
    # After the window the request id is new again: the Admit runs again.
    again = await stub.Admit(admit_request(sid, "P", "u", turn=1, request_id="old"))
    assert again.revision == 3


async def test_the_sweeper_runs_in_the_background(start_api: StartApi, db: AsyncEngine) -> None:
    client = await start_api(idempotency_retention_seconds=0.2, idempotency_sweep_seconds=0.1)
    sid = new_session_id()
    await client.stub.CreateSession(rpc.CreateSessionRequest(session_id=sid, request_id="c1"))
    for _ in range(100):
        if not await count_keys(db, sid):
            break
        await asyncio.sleep(0.1)
    assert not await count_keys(db, sid)


# ---- finding 6: a request id across a session's lifetimes ----------------------------------


async def test_a_request_id_of_a_deleted_session_is_new_for_the_next(stub: Stub) -> None:
    sid = new_session_id()
    await stub.CreateSession(rpc.CreateSessionRequest(session_id=sid, request_id="r1"))
    await stub.DeleteSession(rpc.DeleteSessionRequest(session_id=sid, request_id="r2"))
    # Was INTERNAL (a unique violation on the DeleteSession's key).
    created = await stub.CreateSession(rpc.CreateSessionRequest(session_id=sid, request_id="r2"))
    assert created.session.session_id == sid
    # r2 now names this lifetime's CreateSession: a Delete with it is refused, not replayed.
    await expect_error(
        stub.DeleteSession(rpc.DeleteSessionRequest(session_id=sid, request_id="r2")),
        grpc.StatusCode.ALREADY_EXISTS,
        "REQUEST_ID_REUSED",
    )
    await stub.GetSession(rpc.GetSessionRequest(session_id=sid))  # still there


async def test_an_old_delete_is_not_replayed_while_the_session_exists_again(stub: Stub) -> None:
    sid = new_session_id()
    await stub.CreateSession(rpc.CreateSessionRequest(session_id=sid, request_id="r1"))
    await stub.DeleteSession(rpc.DeleteSessionRequest(session_id=sid, request_id="r2"))
    await stub.CreateSession(rpc.CreateSessionRequest(session_id=sid, request_id="r3"))
    # Was OK by replaying the old response, leaving the session in place.
    await stub.DeleteSession(rpc.DeleteSessionRequest(session_id=sid, request_id="r2"))
    await expect_error(
        stub.GetSession(rpc.GetSessionRequest(session_id=sid)),
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
    )


# ---- per-tenant quotas ------------------------------------------------------------------


async def tenant_stub(start_api: StartApi, quotas: Quotas, **settings: Any) -> Stub:
    token = uuid.uuid4().hex
    client = await start_api(
        token_tenants={hash_token(token): f"q-{token[:12]}"}, quotas=quotas, **settings
    )
    channel = channel_with_metadata(client.server.target, ("authorization", f"Bearer {token}"))
    return async_stub(channel)


async def test_the_sessions_quota(start_api: StartApi) -> None:
    stub = await tenant_stub(start_api, Quotas(sessions=2))
    first = await create_session(stub)
    await create_session(stub)
    error = await expect_error(
        create_session(stub), grpc.StatusCode.RESOURCE_EXHAUSTED, "SESSIONS_QUOTA_EXCEEDED"
    )
    assert error.error_infos[0].metadata["quota"] == "sessions"
    listed = await stub.ListSessions(rpc.ListSessionsRequest())
    assert len(listed.sessions) == 2  # the refused one was not created
    await stub.DeleteSession(rpc.DeleteSessionRequest(session_id=first))
    await create_session(stub)


async def test_the_stored_bytes_quota(start_api: StartApi) -> None:
    stub = await tenant_stub(start_api, Quotas(stored_bytes=5000, usage_refresh_seconds=0))
    sid = await create_session(stub)
    await stub.Admit(admit_request(sid, "P", "x" * 2000, turn=1))
    error = await expect_error(
        stub.Admit(admit_request(sid, "P", "y" * 4000, turn=2)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "STORED_BYTES_QUOTA_EXCEEDED",
    )
    assert error.error_infos[0].metadata["quota"] == "stored_bytes"
    session = (await stub.GetSession(rpc.GetSessionRequest(session_id=sid))).session
    assert session.revision == 1
    await stub.Admit(admit_request(sid, "P", "z" * 100, turn=2))  # a small one still fits


class HoldAtLoad:
    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def reached(self, method: str, phase: Phase) -> None:
        if method == "Admit" and phase is Phase.LOAD:
            self.arrived.set()
            await self.release.wait()


async def test_the_concurrent_calls_quota(start_api: StartApi) -> None:
    hooks = HoldAtLoad()
    stub = await tenant_stub(start_api, Quotas(concurrent_calls=1), hooks=hooks)
    sid = await create_session(stub)
    held = asyncio.ensure_future(stub.Admit(admit_request(sid, "P", "u", turn=1)))
    await asyncio.wait_for(hooks.arrived.wait(), 10)
    error = await expect_error(
        stub.GetSession(rpc.GetSessionRequest(session_id=sid)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "CONCURRENT_CALLS_QUOTA_EXCEEDED",
    )
    assert error.error_infos[0].metadata["quota"] == "concurrent_calls"
    hooks.release.set()
    await held
    await stub.GetSession(rpc.GetSessionRequest(session_id=sid))


async def test_the_quotas_are_off_by_default(api: ApiClient) -> None:
    assert api.server.deps.quotas.quotas == Quotas()
    sid = await create_session(api.stub)
    await api.stub.Admit(admit_request(sid, "P", user("u").content[0].text.text, turn=1))
