"""The spec's guarantees over the real server and real PostgreSQL (SPEC §4, §5, §8).

The server runs in-process (same event loop) with a ``PausingHooks`` so a test can stop a
handler at a chosen phase and cancel the call there.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

import grpc
import pytest
from admission_service.api.server import RunningServer, start_server
from admission_service.app.hooks import Phase
from admission_service.config import Settings
from admission_service.domain.events import EventKind
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from .guarantees_support import (
    IN_HISTORY,
    REPLACE,
    PausingHooks,
    admit_request,
    all_events,
    assistant,
    audit,
    error_info,
    snapshot,
    violated_fields,
)

PHASES = [Phase.LOAD, Phase.VALIDATE, Phase.PROJECT, Phase.DERIVE, Phase.COMMIT]


@pytest.fixture(scope="module")
def hooks() -> PausingHooks:
    return PausingHooks()


@pytest.fixture(scope="module")
async def server(database_url: str, hooks: PausingHooks) -> AsyncIterator[RunningServer]:
    settings = Settings(listen="127.0.0.1:0", database_url=database_url, migrate_on_start=False)
    running = await start_server(settings, hooks=hooks)
    yield running
    await running.stop(0)


@pytest.fixture(scope="module")
async def stub(server: RunningServer) -> AsyncIterator[api_grpc.AdmissionServiceAsyncStub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield cast("api_grpc.AdmissionServiceAsyncStub", api_grpc.AdmissionServiceStub(channel))


async def new_session(stub: api_grpc.AdmissionServiceAsyncStub) -> str:
    session_id = f"g-{uuid.uuid4().hex}"
    await stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
    return session_id


async def busy_session(stub: api_grpc.AdmissionServiceAsyncStub) -> tuple[str, str]:
    """A session with history: two admitted steps, a tool call and its result."""
    sid = await new_session(stub)
    first = await stub.Admit(admit_request(sid, "A", "hello"))
    await stub.Record(
        api.RecordRequest(
            session_id=sid, admission_id=first.admission_id, assistant=assistant("x" * 80, "c1")
        )
    )
    await stub.Record(
        api.RecordRequest(
            session_id=sid,
            admission_id=first.admission_id,
            tool_results=[
                pb.ToolResult(call_id="c1", content=[pb.ContentBlock(text=pb.TextBlock(text="r"))])
            ],
        )
    )
    second = await stub.Admit(admit_request(sid, "B", "again", step=2))
    return sid, second.admission_id


def mutation(method: str, sid: str, admission_id: str, plan_token: str) -> tuple[object, ...]:
    """One call of ``method`` that would commit something on the busy session."""
    if method == "Admit":
        return ("Admit", admit_request(sid, "C", "new user", step=3, route=REPLACE))
    if method == "Reconcile":
        return (
            "Reconcile",
            api.ReconcileRequest(session_id=sid, admission_id=admission_id, route=REPLACE),
        )
    if method == "Record":
        return (
            "Record",
            api.RecordRequest(
                session_id=sid, admission_id=admission_id, assistant=assistant("reply")
            ),
        )
    return ("Compact", api.CompactRequest(session_id=sid, plan_token=plan_token, summary="s"))


# ---- cancellation commits nothing ------------------------------------------------------------


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("method", ["Admit", "Reconcile", "Record", "Compact"])
@pytest.mark.parametrize("how", ["cancel", "deadline"])
async def test_cancellation_before_commit_commits_nothing(
    stub: api_grpc.AdmissionServiceAsyncStub,
    hooks: PausingHooks,
    phase: Phase,
    method: str,
    how: str,
) -> None:
    sid, admission_id = await busy_session(stub)
    plan = await stub.PlanCompaction(api.PlanCompactionRequest(session_id=sid, retain_tokens=0))
    before = await snapshot(stub, sid)
    name, request = mutation(method, sid, admission_id, plan.plan_token)
    rpc = getattr(stub, str(name))
    if how == "cancel":
        hooks.arm(method, phase)
        call = rpc(request)
        await asyncio.wait_for(hooks.reached_phase.wait(), 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    else:
        await expire_at_phase(rpc, request, hooks, method, phase)
    await asyncio.wait_for(hooks.unwound.wait(), 10)
    assert await snapshot(stub, sid) == before
    # The session is not wedged: the same call goes through now.
    await rpc(request, timeout=10)
    assert await snapshot(stub, sid) != before
    await audit(stub, sid)


async def expire_at_phase(
    rpc: Callable[..., Awaitable[object]],
    request: object,
    hooks: PausingHooks,
    method: str,
    phase: Phase,
) -> None:
    """Call ``rpc`` with a deadline that expires while its handler is held at ``phase``. A
    deadline that expired before the handler got there (a loaded machine: the server runs on
    the test's event loop) proved nothing, so the call is made again with a longer one; the
    session is unchanged by such a call, which the caller's snapshot checks after."""
    for deadline in (0.5, 2.0, 8.0):
        hooks.arm(method, phase)
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await rpc(request, timeout=deadline)
        assert failure.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        # The server may reach the phase just after the caller gave up, before its own
        # cancellation of the handler arrives: it is held there and cancelled.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hooks.reached_phase.wait(), 2)
        if hooks.reached_phase.is_set():
            return
    pytest.fail(f"{method} never reached {phase} within its deadline")


# ---- one writer per session ------------------------------------------------------------------


async def test_concurrent_admits_on_one_session_serialise(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    sid = await new_session(stub)
    callers = 16
    responses = await asyncio.gather(
        *(stub.Admit(admit_request(sid, "AB"[i % 2], f"user {i}", step=i)) for i in range(callers))
    )
    assert sorted(r.revision for r in responses) == list(range(1, callers + 1))
    log = await audit(stub, sid)
    users = [e.message.text for e in log.events if e.kind is EventKind.USER_MESSAGE and e.message]
    assert sorted(users) == sorted(f"user {i}" for i in range(callers))


async def test_a_held_session_does_not_block_another(
    stub: api_grpc.AdmissionServiceAsyncStub, hooks: PausingHooks
) -> None:
    held, other = await new_session(stub), await new_session(stub)
    hooks.arm("Admit", Phase.COMMIT)  # holds the row lock of `held` until released
    holder = asyncio.ensure_future(stub.Admit(admit_request(held, "A", "first")))
    await asyncio.wait_for(hooks.reached_phase.wait(), 10)
    # Liveness, not timing: the other session's call completes while `held` is locked.
    await stub.Admit(admit_request(other, "A", "meanwhile"), timeout=10)
    hooks.release.set()
    assert (await holder).revision == 1


async def test_expected_revision_mismatch_is_aborted_and_commits_nothing(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    sid = await new_session(stub)
    await stub.Admit(admit_request(sid, "A", "one"))
    before = await snapshot(stub, sid)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Admit(admit_request(sid, "B", "two", step=2, expected_revision=0))
    assert failure.value.code() is grpc.StatusCode.ABORTED
    assert error_info(failure.value).reason == "REVISION_MISMATCH"
    assert await snapshot(stub, sid) == before
    ok = await stub.Admit(admit_request(sid, "B", "two", step=2, expected_revision=1))
    assert ok.revision == 2


# ---- idempotency -------------------------------------------------------------------------------


async def test_a_repeated_request_id_returns_the_identical_response(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    sid = await new_session(stub)
    request = admit_request(sid, "A", "once", request_id=str(uuid.uuid4()))
    first = await stub.Admit(request)
    again = await stub.Admit(request)
    assert again.SerializeToString(deterministic=True) == first.SerializeToString(
        deterministic=True
    )
    events = await all_events(stub, sid)
    assert sum(e.kind == pb.EVENT_KIND_USER_MESSAGE for e in events) == 1
    changed = admit_request(sid, "B", "other", request_id=request.request_id)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Admit(changed)
    assert failure.value.code() is grpc.StatusCode.ALREADY_EXISTS
    assert error_info(failure.value).reason == "REQUEST_ID_REUSED"


@pytest.mark.parametrize("method", ["Admit", "Record", "Compact"])
async def test_a_response_lost_after_commit_is_replayed_not_redone(
    stub: api_grpc.AdmissionServiceAsyncStub, hooks: PausingHooks, method: str
) -> None:
    sid, admission_id = await busy_session(stub)
    plan = await stub.PlanCompaction(api.PlanCompactionRequest(session_id=sid, retain_tokens=0))
    name, request = mutation(method, sid, admission_id, plan.plan_token)
    request.request_id = str(uuid.uuid4())  # type: ignore[attr-defined]
    rpc = getattr(stub, str(name))
    hooks.arm(method, Phase.COMMITTED)  # committed; the response never reaches the caller
    call = rpc(request)
    await asyncio.wait_for(hooks.reached_phase.wait(), 10)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    committed = await snapshot(stub, sid)
    retried = await rpc(request)
    assert retried.revision == committed[0]
    assert await snapshot(stub, sid) == committed  # the retry committed nothing more
    await audit(stub, sid)


# ---- reconcile after compaction ------------------------------------------------------------------


async def test_reconcile_after_compaction_rebaselines_and_admits_no_user_again(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    sid, admission_id = await busy_session(stub)
    plan = await stub.PlanCompaction(api.PlanCompactionRequest(session_id=sid, retain_tokens=0))
    await stub.Compact(api.CompactRequest(session_id=sid, plan_token=plan.plan_token, summary="s"))
    retry = await stub.Reconcile(
        api.ReconcileRequest(session_id=sid, admission_id=admission_id, route=IN_HISTORY)
    )
    assert retry.starts_series
    assert retry.header.reason == pb.HEADER_REASON_SERIES
    assert retry.effective_prompt.text == "B"
    assert retry.effective_prompt.location == pb.PROMPT_LOCATION_HEAD
    log = await audit(stub, sid)
    assert sum(e.kind is EventKind.USER_MESSAGE for e in log.events) == 2
    before = await snapshot(stub, sid)
    unchanged = await stub.Reconcile(
        api.ReconcileRequest(
            session_id=sid,
            admission_id=admission_id,
            route=IN_HISTORY,
        )
    )
    assert not unchanged.commits
    assert not unchanged.HasField("header")
    after = await snapshot(stub, sid)
    # Nothing committed to the history: same revision, same log, same derived request. (The
    # ledger gains the attempt's row: it is a new provider request with its own forecast.)
    assert after[:4] == before[:4]
    assert unchanged.revision == before[0]


# ---- bad input -----------------------------------------------------------------------------


def oversized_users(sid: str) -> api.AdmitRequest:
    return admit_request(sid, "A", *["u"] * 65)


BAD_ADMITS = [
    (lambda sid: admit_request(sid, "x" * (1024 * 1024 + 1)), "rendered_prompt"),
    (oversized_users, "users"),
    (lambda sid: admit_request(sid, "A", turn=-1), "turn"),
    (
        lambda sid: admit_request(sid, "A", tools=[pb.Tool(name="t", parameters_json="{not json")]),
        "tools[0].parameters_json",
    ),
    (
        lambda sid: admit_request(
            sid,
            "A",
            tools=[
                pb.Tool(name="t", parameters_json="{}"),
                pb.Tool(name="t", parameters_json="{}"),
            ],
        ),
        "tools[1].name",
    ),
    (lambda sid: admit_request(sid, "A", route=pb.Route(model="m")), "route.provider"),
    (
        lambda sid: admit_request(
            sid,
            "A",
            route=pb.Route(
                provider="p",
                model="m",
                system_prompt_update=cast(pb.SystemPromptUpdate.ValueType, 9),
            ),
        ),
        "route.system_prompt_update",
    ),
    (
        lambda sid: api.AdmitRequest(
            session_id=sid,
            rendered_prompt="A",
            route=IN_HISTORY,
            users=[pb.Message(role=pb.MESSAGE_ROLE_USER, content=[pb.ContentBlock()])],
        ),
        "users[0].content[0]",
    ),
    (lambda sid: admit_request(sid, "A", wire_format=42), "wire_format"),
    (lambda sid: admit_request(sid, "A", request_id="r" * 200), "request_id"),
]


@pytest.mark.parametrize(("build", "field"), BAD_ADMITS)
async def test_bad_input_names_the_field_and_touches_nothing(
    stub: api_grpc.AdmissionServiceAsyncStub,
    build: Callable[[str], api.AdmitRequest],
    field: str,
) -> None:
    sid = await new_session(stub)
    await stub.Admit(admit_request(sid, "A", "ok"))
    before = await snapshot(stub, sid)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Admit(build(sid))
    assert failure.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert field in violated_fields(failure.value)
    assert error_info(failure.value).reason in {"INVALID_FIELD", "INVALID_MODEL_INFO"}
    assert await snapshot(stub, sid) == before
    # Still serving.
    await stub.Admit(admit_request(sid, "A", "still fine", step=2))


async def test_bad_identifiers_and_pages(stub: api_grpc.AdmissionServiceAsyncStub) -> None:
    cases: list[tuple[Awaitable[object], str]] = [
        (stub.GetSession(api.GetSessionRequest(session_id="")), "session_id"),
        (stub.GetSession(api.GetSessionRequest(session_id="a\x00b")), "session_id"),
        (stub.ListSessions(api.ListSessionsRequest(page_size=-1)), "page_size"),
        (stub.ListSessions(api.ListSessionsRequest(page_token="garbage")), "page_token"),
        (stub.CreateSession(api.CreateSessionRequest(session_id="x" * 129)), "session_id"),
    ]
    for call, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await call
        assert failure.value.code() is grpc.StatusCode.INVALID_ARGUMENT, field
        assert field in violated_fields(failure.value)


async def test_nul_and_astral_text_round_trip_byte_for_byte(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    sid = await new_session(stub)
    text = "nul:\x00 astral:\U0001f600\U00010348 end"
    response = await stub.Admit(admit_request(sid, text, text))
    assert [m.content[0].text.text for m in response.request.messages] == [text, text]
    events = await all_events(stub, sid)
    assert events[0].message.content[0].text.text == text
    assert events[1].message.content[0].text.text == text
    inspected = await stub.Inspect(api.InspectRequest(session_id=sid))
    assert inspected.effective_prompt.text == text
    assert inspected.system_nodes[0].text == text
    assert inspected.system_nodes[0].text.encode("utf-8") == text.encode("utf-8")


async def test_unknown_session_is_not_found(stub: api_grpc.AdmissionServiceAsyncStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Admit(admit_request("no-such-session", "A", "x"))
    assert failure.value.code() is grpc.StatusCode.NOT_FOUND
    assert error_info(failure.value).reason == "SESSION_NOT_FOUND"
