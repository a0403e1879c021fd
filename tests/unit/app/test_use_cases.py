"""The use cases on the in-memory storage (``tests/fakes``): the service layer without
PostgreSQL. ``tests/contract`` checks the fake answers like the real repository."""

from __future__ import annotations

import asyncio
import copy
import pickle
import uuid
from typing import Any

import pytest
from admission_service.api import convert
from admission_service.app import handlers
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    CompactCommand,
    CompactResult,
    Idempotency,
    PlanCompactionCommand,
    ReconcileCommand,
    RecordCommand,
    RecordResult,
    SessionInfo,
    Usage,
)
from admission_service.app.deps import Deps
from admission_service.app.hooks import Phase
from admission_service.app.limits import Quotas
from admission_service.app.page_tokens import PageTokens
from admission_service.app.unit_of_work import Reply
from admission_service.domain.accounting import PricedNode, breakdown, message_tokens
from admission_service.domain.errors import (
    AdmissionNotFound,
    RequestIdReused,
    RevisionMismatch,
    SessionAlreadyExists,
    SessionNotFound,
    SessionsQuotaExceeded,
    StaleCompactionPlan,
    UnknownToolCall,
)
from admission_service.domain.events import EventKind
from admission_service.domain.messages import Message, Role, Text, ToolCall, ToolResult
from admission_service.domain.session import RequestView
from admission_service.domain.surface import SessionLog
from admission_service.domain.wire import WireFormat
from admission_service.tokenizers import counter_for
from promptadmission.v1 import admission_service_pb2 as api

from tests.app_support import CATALOG, ROUTE, user
from tests.fakes.storage import FakeStorage
from tests.unit.app.steps import BEFORE_COMMIT, Cancelling, LosingTheCancellation

TOKENS = PageTokens([b"k" * 32])


# Every response encoded as the pickled result: the replays return what the first call did.
ENCODERS = dict.fromkeys(
    ("CreateSession", "DeleteSession", "Admit", "Reconcile", "Record", "Compact"), pickle.dumps
)


def decode(reply: Reply[Any]) -> Any:
    """The call's result, or the one a replayed response carries."""
    if reply.result is not None:
        return reply.result
    assert reply.encoded is not None
    return pickle.loads(reply.encoded)


def make_app(storage: FakeStorage, **kwargs: Any) -> Deps:
    kwargs.setdefault("encoders", ENCODERS)
    return Deps.compose(None, CATALOG, page_tokens=TOKENS, storage=storage, **kwargs)


@pytest.fixture
def storage() -> FakeStorage:
    return FakeStorage()


@pytest.fixture
def deps(storage: FakeStorage) -> Deps:
    return make_app(storage)


async def create(deps: Deps, session_id: str = "s", key: Idempotency | None = None) -> str:
    info: SessionInfo = decode(await handlers.create_session(deps, "t", session_id, key))
    return info.session_id


async def admit(deps: Deps, session_id: str, prompt: str, **kwargs: Any) -> AttemptResult:
    key = kwargs.pop("idempotency", None)
    command = AdmitCommand(session_id, 1, 1, prompt, (), ROUTE, **kwargs)
    result: AttemptResult = decode(await handlers.admit(deps, "t", command, key))
    return result


async def test_a_step_admits_records_compacts_and_reconciles(deps: Deps) -> None:
    sid = await create(deps)
    first = await admit(deps, sid, "A", users=(user("hi"),))
    assert [c.commit.op.value for c in first.commits] == ["append"]
    assert first.header is not None and first.context is not None
    assert first.route.capability_source.value == "catalog"
    assert [m.role for m in first.request.messages] == [Role.SYSTEM, Role.USER]
    assert first.forecast.divergence_reason.value == "first_request"
    assert first.revision == 1 and first.log_seq == 4
    call = Message(Role.ASSISTANT, (Text("look"), ToolCall("c1", "read", "{}")))
    recorded: RecordResult = decode(
        await handlers.record(deps, "t", RecordCommand(sid, first.admission_id, call), None)
    )
    assert recorded.assistant_seq == 4 and recorded.revision == 2
    answer = ToolResult("c1", (Text("body"),))
    command = RecordCommand(sid, first.admission_id, None, (answer,), Usage(10, 1, 0, 0))
    recorded = decode(await handlers.record(deps, "t", command, None))
    assert recorded.tool_result_seqs == (5,)
    with pytest.raises(UnknownToolCall):
        await handlers.record(deps, "t", command, None)

    second = await admit(deps, sid, "B", users=(user("next"),), wire_format=WireFormat.OPENAI_CHAT)
    assert [c.commit.op.value for c in second.commits] == ["append"]
    assert second.header is None
    assert second.forecast.divergence_reason.value == "none"
    assert second.forecast.reused_messages == 2  # the whole previous request
    assert '"role":"system","content":"B"' in second.request.body_json

    plan = await handlers.plan_compaction(deps, "t", PlanCompactionCommand(sid, retain_tokens=0))
    assert plan.plan.start_seq == 1
    assert [m.text for m in plan.summarization_input][:2] == ["A", "hi"]
    compacted: CompactResult = decode(
        await handlers.compact(deps, "t", CompactCommand(sid, plan.plan_token, "sum"), None)
    )
    assert compacted.effective_prompt.text == "B"
    assert compacted.effective_prompt.location == "head"
    with pytest.raises(StaleCompactionPlan):
        await handlers.compact(deps, "t", CompactCommand(sid, plan.plan_token, "sum"), None)

    retry: AttemptResult = decode(
        await handlers.reconcile(deps, "t", ReconcileCommand(sid, second.admission_id, ROUTE), None)
    )
    assert retry.user_seqs == ()
    assert retry.attempt == 1 and retry.starts_series is True
    assert retry.header is not None and retry.header.reason.value == "series"
    again: AttemptResult = decode(
        await handlers.reconcile(deps, "t", ReconcileCommand(sid, second.admission_id, ROUTE), None)
    )
    assert again.commits == () and again.header is None and again.context is None

    inspected = await handlers.inspect(deps, "t", sid, WireFormat.NEUTRAL)
    assert [n.text for n in inspected.system_nodes] == ["B"]
    assert inspected.breakdown.system_tokens > 0
    assert inspected.ledger[0].observed == Usage(10, 1, 0, 0)
    assert len(inspected.ledger) == 4
    events = await handlers.list_events(deps, "t", sid, 1000, "")
    log = SessionLog(view.event for view in events.items)
    assert list(inspected.request.messages) == log.derived_messages()
    assert inspected.effective_prompt == log.effective_prompt()
    assert inspected.session.event_count == log.next_seq
    assert len([e for e in log.events if e.kind is EventKind.USER_MESSAGE]) == 2
    trajectory = await handlers.list_trajectory(deps, "t", sid, 10, "")
    assert [entry.request_index for entry in trajectory.items] == [0, 1, 2, 3]


async def test_validate_only_never_commits(deps: Deps, storage: FakeStorage) -> None:
    sid = await create(deps)
    commits = storage.commits
    dry = await admit(deps, sid, "A", users=(user("x"),), validate_only=True)
    assert dry.admission_id == "" and len(dry.request.messages) == 2
    assert storage.commits == commits
    assert (await handlers.get_session(deps, "t", sid)).event_count == 0


@pytest.mark.parametrize("phase", BEFORE_COMMIT)
@pytest.mark.parametrize("cancel", [Cancelling, LosingTheCancellation])
async def test_a_cancelled_call_commits_nothing(
    storage: FakeStorage, phase: Phase, cancel: type[Cancelling | LosingTheCancellation]
) -> None:
    """Cancelled at each phase before the commit; also when the ``CancelledError`` is lost on
    its way (``LosingTheCancellation``: Python 3.11's wait_for in the driver's waits)."""
    sid = await create(make_app(storage))
    before = copy.deepcopy(storage.state)
    cancelling = make_app(storage, hooks=cancel("Admit", phase))
    with pytest.raises(asyncio.CancelledError):  # in a task of its own, as gRPC runs a call
        await asyncio.create_task(admit(cancelling, sid, "A", users=(user("x"),)))
    assert storage.state == before
    # the session is free again: the next writer is not left waiting on the cancelled one
    assert (await admit(make_app(storage), sid, "A", users=(user("x"),))).revision == 1


async def test_a_repeated_request_id_replays_the_first_response(deps: Deps) -> None:
    sid = await create(deps)
    key = Idempotency("r1", b"digest")
    command = AdmitCommand(sid, 1, 1, "A", (), ROUTE, (user("u"),))
    first = await handlers.admit(deps, "t", command, key)
    replayed = await handlers.admit(deps, "t", command, key)
    assert first.encoded is not None and replayed.result is None
    assert replayed.encoded == first.encoded
    assert (await handlers.get_session(deps, "t", sid)).revision == 1
    with pytest.raises(RequestIdReused):
        await handlers.admit(deps, "t", command, Idempotency("r1", b"other"))
    with pytest.raises(RequestIdReused):  # a request id names one call of one method
        await handlers.record(deps, "t", RecordCommand(sid, "x", usage=Usage(1, 1, 0, 0)), key)
    with pytest.raises(RevisionMismatch):
        await admit(deps, sid, "A", expected_revision=0)


async def test_a_replay_rebuilds_a_long_full_response_byte_for_byte(storage: FakeStorage) -> None:
    """The API's encoders store an Admit's head and rebuild its derived request from the stored
    frames (``deps/replay.py``): from the surface's nodes, and once a replace shadowed some of
    them, from the log."""
    deps = make_app(storage, encoders=convert.ENCODERS)
    sid = await create(deps)
    sent: list[tuple[AdmitCommand, Idempotency, bytes]] = []
    for turn in range(1, 5):
        users = tuple(user(f"{turn}.{n} nul\x00 astral \U0001f600") for n in range(64))
        wire = (WireFormat.NEUTRAL, WireFormat.OPENAI_CHAT)[turn % 2]  # a body rendered again
        command = AdmitCommand(sid, turn, 1, "A", (), ROUTE, users, wire_format=wire)
        key = Idempotency(f"r{turn}", b"digest")
        reply = await handlers.admit(deps, "t", command, key)
        assert reply.result is not None and reply.encoded is not None
        assert reply.result.request.view is RequestView.FULL
        sent.append((command, key, reply.encoded))
    assert len(api.AdmitResponse.FromString(sent[-1][2]).request.messages) == 1 + 4 * 64
    for command, key, encoded in sent:
        replayed = await handlers.admit(deps, "t", command, key)
        assert replayed.result is None and replayed.encoded == encoded

    plan = await handlers.plan_compaction(deps, "t", PlanCompactionCommand(sid, retain_tokens=0))
    await handlers.compact(deps, "t", CompactCommand(sid, plan.plan_token, "summary"), None)
    async with storage.unit("t", sid, snapshot=True) as unit:
        assert await unit.store.frames_as_of(0, 0) is None  # nodes were shadowed since
    for command, key, encoded in sent:  # a replace since: the surface is folded from the log
        replayed = await handlers.admit(deps, "t", command, key)
        assert replayed.result is None and replayed.encoded == encoded


async def test_another_tenants_session_and_an_unknown_admission_are_not_found(
    deps: Deps,
) -> None:
    sid = await create(deps)
    with pytest.raises(SessionNotFound):
        await handlers.get_session(deps, "other-tenant", sid)
    with pytest.raises(AdmissionNotFound):
        await handlers.reconcile(deps, "t", ReconcileCommand(sid, "nope", ROUTE), None)


async def test_create_session_takes_the_same_idempotent_path(deps: Deps) -> None:
    key = Idempotency("c1", b"digest")
    derived = await create(deps, "", key)
    assert derived == str(uuid.uuid5(uuid.UUID("6f1d8a52-3c1e-4c55-9a7e-8e0f1f3b7a10"), "t\x00c1"))
    assert await create(deps, "", key) == derived  # replayed, not refused
    with pytest.raises(RequestIdReused):
        await create(deps, derived, Idempotency("c1", b"another request"))
    with pytest.raises(SessionAlreadyExists):
        await create(deps, derived)


async def test_a_deleted_session_is_gone_and_its_delete_replays(deps: Deps) -> None:
    sid = await create(deps)
    key = Idempotency("d1", b"x")
    deleted = await handlers.delete_session(deps, "t", sid, None, key)
    again = await handlers.delete_session(deps, "t", sid, None, key)
    assert deleted.encoded is not None and again.result is None
    assert again.encoded == deleted.encoded
    with pytest.raises(SessionNotFound):
        await handlers.get_session(deps, "t", sid)
    with pytest.raises(SessionNotFound):
        await admit(deps, sid, "A")


async def test_the_sessions_quota(storage: FakeStorage) -> None:
    deps = make_app(storage, quotas=Quotas(sessions=2))
    await create(deps, "a")
    await create(deps, "b")
    with pytest.raises(SessionsQuotaExceeded):
        await create(deps, "c")
    assert [s.session_id for s in (await handlers.list_sessions(deps, "t", 10, "")).items] == [
        "a",
        "b",
    ]


async def test_sessions_page_through(deps: Deps) -> None:
    ids = [await create(deps, f"s{n}") for n in range(5)]
    seen: list[str] = []
    token = ""
    while True:
        page = await handlers.list_sessions(deps, "t", 2, token)
        seen += [s.session_id for s in page.items]
        if not (token := page.next_page_token):
            break
    assert seen == ids


async def test_a_plan_goes_stale_when_the_session_moves(deps: Deps) -> None:
    sid = await create(deps)
    first = await admit(deps, sid, "A", users=(user("one"), user("two")))
    plan = await handlers.plan_compaction(deps, "t", PlanCompactionCommand(sid, retain_tokens=0))
    await admit(deps, sid, "A", users=(user("three"),))
    with pytest.raises(StaleCompactionPlan):
        await handlers.compact(deps, "t", CompactCommand(sid, plan.plan_token, "s"), None)
    assert first.revision == 1


async def test_the_breakdown_is_the_running_price_of_the_surface(deps: Deps) -> None:
    sid = await create(deps)
    await admit(deps, sid, "A", users=(user("hello there"),))
    await admit(deps, sid, "B", users=(user("again"),))  # in history: "A" stays a message
    consolidated = await admit(deps, sid, "", users=(user("four"),))
    assert {c.commit.op.value for c in consolidated.commits} == {"replace"}  # the price shrinks
    inspected = await handlers.inspect(deps, "t", sid, WireFormat.NEUTRAL)
    counter = counter_for(ROUTE.provider)  # the route's tokenizer priced every node
    messages = inspected.request.messages
    priced = [PricedNode(0, message_tokens(m, counter), m.role is Role.SYSTEM) for m in messages]
    assert inspected.breakdown == breakdown(priced, (), counter)


async def test_the_trajectory_pages_through_every_request(deps: Deps) -> None:
    sid = await create(deps)
    for prompt in ("A", "B", "C"):
        await admit(deps, sid, prompt, users=(user(prompt.lower()),))
    seen, token = [], ""
    while True:
        page = await handlers.list_trajectory(deps, "t", sid, 2, token)
        seen += [entry.request_index for entry in page.items]
        if not (token := page.next_page_token):
            break
    assert seen == [0, 1, 2]
