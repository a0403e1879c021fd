"""The use cases against real PostgreSQL (no gRPC), where they depend on the order in which
the statements reach it. The service layer's cases, a whole session included, run on the fake
storage (``tests/unit/deps``). The contract suite (``tests/contract``) holds both adapters to the
same answers, and ``tests/api`` runs whole sessions on PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

import pytest
from admission_service.app import handlers
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    RecordCommand,
    RecordResult,
    RouteRequest,
    SessionInfo,
)
from admission_service.app.deps import Deps
from admission_service.app.unit_of_work import Reply
from admission_service.domain.errors import UnknownToolCall
from admission_service.domain.messages import Message, Role, Text, ToolCall, ToolResult

from tests.app_support import ROUTE, user

R = TypeVar("R")


def fresh(reply: Reply[R]) -> R:
    """The result of a call that ran (not replayed)."""
    assert reply.result is not None
    return reply.result


async def new_session(deps: Deps) -> str:
    session_id = f"s-{uuid.uuid4().hex}"
    info: SessionInfo = fresh(await handlers.create_session(deps, "t", session_id, None))
    assert info.revision == 0
    return session_id


async def admit(
    deps: Deps, session_id: str, prompt: str, route: RouteRequest = ROUTE, **kwargs: Any
) -> AttemptResult:
    command = AdmitCommand(session_id, 1, 1, prompt, (), route, **kwargs)
    result: AttemptResult = fresh(await handlers.admit(deps, "t", command, None))
    return result


async def test_a_result_answers_a_call_of_the_same_record(deps: Deps) -> None:
    """The call's row is a deferred write of the same transaction: ``mark_answered`` flushes it
    before its statement runs (the contract suite answers calls committed before)."""
    sid = await new_session(deps)
    first = await admit(deps, sid, "A", users=(user("hi"),))
    call = Message(Role.ASSISTANT, (ToolCall("c1", "read", "{}"),))
    result = ToolResult("c1", (Text("body"),))
    stray = ToolResult("c9", (Text("body"),))
    with pytest.raises(UnknownToolCall) as raised:
        await handlers.record(
            deps, "t", RecordCommand(sid, first.admission_id, call, (result, stray)), None
        )
    assert raised.value.metadata["field"] == "tool_results[1].call_id"
    once = RecordCommand(sid, first.admission_id, call, (result,))
    recorded: RecordResult = fresh(await handlers.record(deps, "t", once, None))
    assert (recorded.assistant_seq, recorded.tool_result_seqs) == (4, (5,))
