"""The use cases against real PostgreSQL (no gRPC): a whole session, end to end."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

import pytest
from admission_service.api import convert
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    CompactCommand,
    CompactResult,
    PlanCompactionCommand,
    ReconcileCommand,
    RecordCommand,
    RecordResult,
    RouteRequest,
    SessionInfo,
    Usage,
)
from admission_service.app.machinery import Reply
from admission_service.app.service import AdmissionApp
from admission_service.domain.errors import (
    StaleCompactionPlan,
    UnknownToolCall,
)
from admission_service.domain.events import EventKind
from admission_service.domain.messages import Message, Role, Text, ToolCall, ToolResult
from admission_service.domain.surface import SessionLog
from admission_service.domain.wire import WireFormat
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.app_support import CATALOG, ROUTE, user

R = TypeVar("R")


def fresh(reply: Reply[R]) -> R:
    """The result of a call that ran (not replayed)."""
    assert reply.result is not None
    return reply.result


@pytest.fixture(scope="module")
def app(engine: AsyncEngine) -> AdmissionApp:
    return AdmissionApp(engine, CATALOG, encoders=convert.ENCODERS)


async def new_session(app: AdmissionApp) -> str:
    session_id = f"s-{uuid.uuid4().hex}"
    info: SessionInfo = fresh(await app.create_session("t", session_id, None))
    assert info.revision == 0
    return session_id


async def admit(
    app: AdmissionApp, session_id: str, prompt: str, route: RouteRequest = ROUTE, **kwargs: Any
) -> AttemptResult:
    command = AdmitCommand(session_id, 1, 1, prompt, (), route, **kwargs)
    result: AttemptResult = fresh(await app.admit("t", command, None))
    return result


async def audit(app: AdmissionApp, session_id: str) -> SessionLog:
    """Re-derive the surface from the log alone and compare with what Inspect serves."""
    page = await app.list_events("t", session_id, 1000, "")
    log = SessionLog(view.event for view in page.items)
    inspected = await app.inspect("t", session_id, WireFormat.NEUTRAL)
    assert list(inspected.request.messages) == log.derived_messages()
    assert inspected.effective_prompt == log.effective_prompt()
    assert inspected.session.event_count == log.next_seq
    return log


async def test_a_whole_session(app: AdmissionApp) -> None:
    sid = await new_session(app)
    first = await admit(app, sid, "A", users=(user("hi"),))
    assert [c.commit.op.value for c in first.commits] == ["append"]
    assert first.header is not None and first.context is not None
    assert first.route.capability_source.value == "catalog"
    assert [m.role for m in first.request.messages] == [Role.SYSTEM, Role.USER]
    assert first.forecast.divergence_reason.value == "first_request"

    call = Message(Role.ASSISTANT, (Text("look"), ToolCall("c1", "read", "{}")))
    recorded: RecordResult = fresh(
        await app.record("t", RecordCommand(sid, first.admission_id, call), None)
    )
    assert recorded.assistant_seq == 4
    result = ToolResult("c1", (Text("body"),))
    recorded = fresh(
        await app.record(
            "t",
            RecordCommand(sid, first.admission_id, None, (result,), Usage(100, 5, 0, 100)),
            None,
        )
    )
    assert recorded.tool_result_seqs == (5,)
    with pytest.raises(UnknownToolCall):
        await app.record("t", RecordCommand(sid, first.admission_id, None, (result,)), None)

    second = await admit(app, sid, "B", users=(user("next"),), wire_format=WireFormat.OPENAI_CHAT)
    assert [c.commit.op.value for c in second.commits] == ["append"]
    assert second.header is None
    assert second.forecast.divergence_reason.value == "none"
    assert second.forecast.reused_messages == 2  # the whole previous request
    assert '"role":"system","content":"B"' in second.request.body_json

    plan = await app.plan_compaction("t", PlanCompactionCommand(sid, retain_tokens=0))
    assert plan.plan.start_seq == 1
    assert [m.text for m in plan.summarization_input][:2] == ["A", "hi"]
    compacted: CompactResult = fresh(
        await app.compact("t", CompactCommand(sid, plan.plan_token, "s"), None)
    )
    assert compacted.effective_prompt.text == "B"
    assert compacted.effective_prompt.location == "head"
    with pytest.raises(StaleCompactionPlan):
        await app.compact("t", CompactCommand(sid, plan.plan_token, "s"), None)

    retry: AttemptResult = fresh(
        await app.reconcile("t", ReconcileCommand(sid, second.admission_id, ROUTE), None)
    )
    assert retry.user_seqs == ()
    assert retry.starts_series is True
    assert retry.attempt == 1
    assert retry.header is not None and retry.header.reason.value == "series"
    again: AttemptResult = fresh(
        await app.reconcile("t", ReconcileCommand(sid, second.admission_id, ROUTE), None)
    )
    assert again.commits == () and again.header is None and again.context is None

    inspected = await app.inspect("t", sid, WireFormat.NEUTRAL)
    assert [n.text for n in inspected.system_nodes] == ["B"]
    assert inspected.breakdown.system_tokens > 0
    assert len(inspected.ledger) == 4
    assert inspected.ledger[0].observed == Usage(100, 5, 0, 100)
    log = await audit(app, sid)
    users = [e for e in log.events if e.kind is EventKind.USER_MESSAGE]
    assert len(users) == 2


async def test_a_result_answers_a_call_of_the_same_record(app: AdmissionApp) -> None:
    sid = await new_session(app)
    first = await admit(app, sid, "A", users=(user("hi"),))
    call = Message(Role.ASSISTANT, (ToolCall("c1", "read", "{}"),))
    result = ToolResult("c1", (Text("body"),))
    stray = ToolResult("c9", (Text("body"),))
    with pytest.raises(UnknownToolCall) as raised:
        await app.record("t", RecordCommand(sid, first.admission_id, call, (result, stray)), None)
    assert raised.value.metadata["field"] == "tool_results[1].call_id"
    once = RecordCommand(sid, first.admission_id, call, (result,))
    recorded: RecordResult = fresh(await app.record("t", once, None))
    assert (recorded.assistant_seq, recorded.tool_result_seqs) == (4, (5,))
