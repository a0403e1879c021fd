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
from admission_service.app.hooks import Phase
from admission_service.app.limits import Quotas
from admission_service.app.machinery import Reply
from admission_service.app.page_tokens import PageTokens
from admission_service.app.service import AdmissionApp
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


class Cancelling:
    """Cancels the first call reaching ``(method, phase)``, as a client going away would."""

    def __init__(self, method: str, phase: Phase) -> None:
        self.target = (method, phase)

    async def reached(self, method: str, phase: Phase) -> None:
        if (method, phase) == self.target:
            raise asyncio.CancelledError


def make_app(storage: FakeStorage, **kwargs: Any) -> AdmissionApp:
    kwargs.setdefault("encoders", ENCODERS)
    return AdmissionApp(None, CATALOG, page_tokens=TOKENS, storage=storage, **kwargs)


@pytest.fixture
def storage() -> FakeStorage:
    return FakeStorage()


@pytest.fixture
def app(storage: FakeStorage) -> AdmissionApp:
    return make_app(storage)


async def create(app: AdmissionApp, session_id: str = "s", key: Idempotency | None = None) -> str:
    info: SessionInfo = decode(await app.create_session("t", session_id, key))
    return info.session_id


async def admit(app: AdmissionApp, session_id: str, prompt: str, **kwargs: Any) -> AttemptResult:
    key = kwargs.pop("idempotency", None)
    command = AdmitCommand(session_id, 1, 1, prompt, (), ROUTE, **kwargs)
    result: AttemptResult = decode(await app.admit("t", command, key))
    return result


async def test_a_step_admits_records_compacts_and_reconciles(app: AdmissionApp) -> None:
    sid = await create(app)
    first = await admit(app, sid, "A", users=(user("hi"),))
    assert [c.commit.op.value for c in first.commits] == ["append"]
    assert first.header is not None and first.context is not None
    assert first.route.capability_source.value == "catalog"
    assert [m.role for m in first.request.messages] == [Role.SYSTEM, Role.USER]
    assert first.forecast.divergence_reason.value == "first_request"
    assert first.revision == 1 and first.log_seq == 4
    call = Message(Role.ASSISTANT, (Text("look"), ToolCall("c1", "read", "{}")))
    recorded: RecordResult = decode(
        await app.record("t", RecordCommand(sid, first.admission_id, call), None)
    )
    assert recorded.assistant_seq == 4 and recorded.revision == 2
    answer = ToolResult("c1", (Text("body"),))
    command = RecordCommand(sid, first.admission_id, None, (answer,), Usage(10, 1, 0, 0))
    recorded = decode(await app.record("t", command, None))
    assert recorded.tool_result_seqs == (5,)
    with pytest.raises(UnknownToolCall):
        await app.record("t", command, None)

    second = await admit(app, sid, "B", users=(user("next"),), wire_format=WireFormat.OPENAI_CHAT)
    assert [c.commit.op.value for c in second.commits] == ["append"]
    assert second.header is None
    assert second.forecast.divergence_reason.value == "none"
    assert second.forecast.reused_messages == 2  # the whole previous request
    assert '"role":"system","content":"B"' in second.request.body_json

    plan = await app.plan_compaction("t", PlanCompactionCommand(sid, retain_tokens=0))
    assert plan.plan.start_seq == 1
    assert [m.text for m in plan.summarization_input][:2] == ["A", "hi"]
    compacted: CompactResult = decode(
        await app.compact("t", CompactCommand(sid, plan.plan_token, "sum"), None)
    )
    assert compacted.effective_prompt.text == "B"
    assert compacted.effective_prompt.location == "head"
    with pytest.raises(StaleCompactionPlan):
        await app.compact("t", CompactCommand(sid, plan.plan_token, "sum"), None)

    retry: AttemptResult = decode(
        await app.reconcile("t", ReconcileCommand(sid, second.admission_id, ROUTE), None)
    )
    assert retry.user_seqs == ()
    assert retry.attempt == 1 and retry.starts_series is True
    assert retry.header is not None and retry.header.reason.value == "series"
    again: AttemptResult = decode(
        await app.reconcile("t", ReconcileCommand(sid, second.admission_id, ROUTE), None)
    )
    assert again.commits == () and again.header is None and again.context is None

    inspected = await app.inspect("t", sid, WireFormat.NEUTRAL)
    assert [n.text for n in inspected.system_nodes] == ["B"]
    assert inspected.breakdown.system_tokens > 0
    assert inspected.ledger[0].observed == Usage(10, 1, 0, 0)
    assert len(inspected.ledger) == 4
    events = await app.list_events("t", sid, 1000, "")
    log = SessionLog(view.event for view in events.items)
    assert list(inspected.request.messages) == log.derived_messages()
    assert inspected.effective_prompt == log.effective_prompt()
    assert inspected.session.event_count == log.next_seq
    assert len([e for e in log.events if e.kind is EventKind.USER_MESSAGE]) == 2
    trajectory = await app.list_trajectory("t", sid, 10, "")
    assert [entry.request_index for entry in trajectory.items] == [0, 1, 2, 3]


async def test_validate_only_never_commits(app: AdmissionApp, storage: FakeStorage) -> None:
    sid = await create(app)
    commits = storage.commits
    dry = await admit(app, sid, "A", users=(user("x"),), validate_only=True)
    assert dry.admission_id == "" and len(dry.request.messages) == 2
    assert storage.commits == commits
    assert (await app.get_session("t", sid)).event_count == 0


@pytest.mark.parametrize(
    "phase", [Phase.LOAD, Phase.VALIDATE, Phase.PROJECT, Phase.DERIVE, Phase.COMMIT]
)
async def test_a_cancelled_call_commits_nothing(storage: FakeStorage, phase: Phase) -> None:
    sid = await create(make_app(storage))
    before = copy.deepcopy(storage.state)
    cancelling = make_app(storage, hooks=Cancelling("Admit", phase))
    with pytest.raises(asyncio.CancelledError):
        await admit(cancelling, sid, "A", users=(user("x"),))
    assert storage.state == before
    # the session is free again: the next writer is not left waiting on the cancelled one
    assert (await admit(make_app(storage), sid, "A", users=(user("x"),))).revision == 1


async def test_a_repeated_request_id_replays_the_first_response(app: AdmissionApp) -> None:
    sid = await create(app)
    key = Idempotency("r1", b"digest")
    command = AdmitCommand(sid, 1, 1, "A", (), ROUTE, (user("u"),))
    first = await app.admit("t", command, key)
    replayed = await app.admit("t", command, key)
    assert first.encoded is not None and replayed.result is None
    assert replayed.encoded == first.encoded
    assert (await app.get_session("t", sid)).revision == 1
    with pytest.raises(RequestIdReused):
        await app.admit("t", command, Idempotency("r1", b"other"))
    with pytest.raises(RequestIdReused):  # a request id names one call of one method
        await app.record("t", RecordCommand(sid, "x", usage=Usage(1, 1, 0, 0)), key)
    with pytest.raises(RevisionMismatch):
        await admit(app, sid, "A", expected_revision=0)


async def test_a_replay_rebuilds_a_long_full_response_byte_for_byte(storage: FakeStorage) -> None:
    """The API's encoders store an Admit's head and rebuild its derived request from the stored
    frames (``app/replay.py``): from the surface's nodes, and once a replace shadowed some of
    them, from the log."""
    app = make_app(storage, encoders=convert.ENCODERS)
    sid = await create(app)
    sent: list[tuple[AdmitCommand, Idempotency, bytes]] = []
    for turn in range(1, 5):
        users = tuple(user(f"{turn}.{n} nul\x00 astral \U0001f600") for n in range(64))
        wire = (WireFormat.NEUTRAL, WireFormat.OPENAI_CHAT)[turn % 2]  # a body rendered again
        command = AdmitCommand(sid, turn, 1, "A", (), ROUTE, users, wire_format=wire)
        key = Idempotency(f"r{turn}", b"digest")
        reply = await app.admit("t", command, key)
        assert reply.result is not None and reply.encoded is not None
        assert reply.result.request.view is RequestView.FULL
        sent.append((command, key, reply.encoded))
    assert len(api.AdmitResponse.FromString(sent[-1][2]).request.messages) == 1 + 4 * 64
    for command, key, encoded in sent:
        replayed = await app.admit("t", command, key)
        assert replayed.result is None and replayed.encoded == encoded

    plan = await app.plan_compaction("t", PlanCompactionCommand(sid, retain_tokens=0))
    await app.compact("t", CompactCommand(sid, plan.plan_token, "summary"), None)
    async with storage.unit("t", sid, snapshot=True) as unit:
        assert await unit.store.frames_as_of(0, 0) is None  # nodes were shadowed since
    for command, key, encoded in sent:  # a replace since: the surface is folded from the log
        replayed = await app.admit("t", command, key)
        assert replayed.result is None and replayed.encoded == encoded


async def test_another_tenants_session_and_an_unknown_admission_are_not_found(
    app: AdmissionApp,
) -> None:
    sid = await create(app)
    with pytest.raises(SessionNotFound):
        await app.get_session("other-tenant", sid)
    with pytest.raises(AdmissionNotFound):
        await app.reconcile("t", ReconcileCommand(sid, "nope", ROUTE), None)


async def test_create_session_takes_the_same_idempotent_path(app: AdmissionApp) -> None:
    key = Idempotency("c1", b"digest")
    derived = await create(app, "", key)
    assert derived == str(uuid.uuid5(uuid.UUID("6f1d8a52-3c1e-4c55-9a7e-8e0f1f3b7a10"), "t\x00c1"))
    assert await create(app, "", key) == derived  # replayed, not refused
    with pytest.raises(RequestIdReused):
        await create(app, derived, Idempotency("c1", b"another request"))
    with pytest.raises(SessionAlreadyExists):
        await create(app, derived)


async def test_a_deleted_session_is_gone_and_its_delete_replays(app: AdmissionApp) -> None:
    sid = await create(app)
    key = Idempotency("d1", b"x")
    deleted = await app.delete_session("t", sid, None, key)
    again = await app.delete_session("t", sid, None, key)
    assert deleted.encoded is not None and again.result is None
    assert again.encoded == deleted.encoded
    with pytest.raises(SessionNotFound):
        await app.get_session("t", sid)
    with pytest.raises(SessionNotFound):
        await admit(app, sid, "A")


async def test_the_sessions_quota(storage: FakeStorage) -> None:
    app = make_app(storage, quotas=Quotas(sessions=2))
    await create(app, "a")
    await create(app, "b")
    with pytest.raises(SessionsQuotaExceeded):
        await create(app, "c")
    assert [s.session_id for s in (await app.list_sessions("t", 10, "")).items] == ["a", "b"]


async def test_sessions_page_through(app: AdmissionApp) -> None:
    ids = [await create(app, f"s{n}") for n in range(5)]
    seen: list[str] = []
    token = ""
    while True:
        page = await app.list_sessions("t", 2, token)
        seen += [s.session_id for s in page.items]
        if not (token := page.next_page_token):
            break
    assert seen == ids


async def test_a_plan_goes_stale_when_the_session_moves(app: AdmissionApp) -> None:
    sid = await create(app)
    first = await admit(app, sid, "A", users=(user("one"), user("two")))
    plan = await app.plan_compaction("t", PlanCompactionCommand(sid, retain_tokens=0))
    await admit(app, sid, "A", users=(user("three"),))
    with pytest.raises(StaleCompactionPlan):
        await app.compact("t", CompactCommand(sid, plan.plan_token, "s"), None)
    assert first.revision == 1


async def test_the_breakdown_is_the_running_price_of_the_surface(app: AdmissionApp) -> None:
    sid = await create(app)
    await admit(app, sid, "A", users=(user("hello there"),))
    await admit(app, sid, "B", users=(user("again"),))  # in history: "A" stays a message
    consolidated = await admit(app, sid, "", users=(user("four"),))
    assert {c.commit.op.value for c in consolidated.commits} == {"replace"}  # the price shrinks
    inspected = await app.inspect("t", sid, WireFormat.NEUTRAL)
    counter = counter_for(ROUTE.provider)  # the route's tokenizer priced every node
    messages = inspected.request.messages
    priced = [PricedNode(0, message_tokens(m, counter), m.role is Role.SYSTEM) for m in messages]
    assert inspected.breakdown == breakdown(priced, (), counter)


async def test_the_trajectory_pages_through_every_request(app: AdmissionApp) -> None:
    sid = await create(app)
    for prompt in ("A", "B", "C"):
        await admit(app, sid, prompt, users=(user(prompt.lower()),))
    seen, token = [], ""
    while True:
        page = await app.list_trajectory("t", sid, 2, token)
        seen += [entry.request_index for entry in page.items]
        if not (token := page.next_page_token):
            break
    assert seen == [0, 1, 2]
