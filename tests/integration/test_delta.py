"""The DELTA request view and the spliced FULL request (issue 7), against real PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

from admission_service.app import handlers
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    CompactCommand,
    PlanCompactionCommand,
    RecordCommand,
    RouteRequest,
)
from admission_service.app.deps import Deps
from admission_service.domain.catalog import Capability
from admission_service.domain.messages import Message, Role, Text, ToolCall, ToolResult
from admission_service.domain.session import HeldPrefix, RequestSelection, RequestView
from admission_service.domain.wire import WireFormat

from tests.app_support import user

IN_HISTORY = RouteRequest("p", "m", 1000, Capability.IN_HISTORY)
REPLACE = RouteRequest("p", "m", 1000, Capability.REPLACE)


async def new_session(deps: Deps) -> str:
    sid = f"delta-{uuid.uuid4().hex}"
    await handlers.create_session(deps, "t", sid, None)
    return sid


def delta(previous: AttemptResult) -> RequestSelection:
    request = previous.request
    return RequestSelection(RequestView.DELTA, HeldPrefix(request.total_messages, request.digest))


async def admit(deps: Deps, sid: str, prompt: str, *users: str, **kwargs: Any) -> AttemptResult:
    route = kwargs.pop("route", IN_HISTORY)
    command = AdmitCommand(sid, 1, 1, prompt, (), route, tuple(map(user, users)), **kwargs)
    result = (await handlers.admit(deps, "t", command, None)).result
    assert result is not None
    return result


async def test_delta_carries_only_the_tail_and_chains_the_digest(deps: Deps) -> None:
    sid = await new_session(deps)
    first = await admit(deps, sid, "A", "one")
    assert first.request.view is RequestView.FULL
    assert first.request.total_messages == 2
    call = Message(Role.ASSISTANT, (Text("look"), ToolCall("c1", "read", "{}")))
    await handlers.record(deps, "t", RecordCommand(sid, first.admission_id, call), None)
    result = ToolResult("c1", (Text("body"),))
    await handlers.record(deps, "t", RecordCommand(sid, first.admission_id, None, (result,)), None)

    second = await admit(deps, sid, "B", "two", selection=delta(first))
    assert second.request.view is RequestView.DELTA
    assert second.request.first_message_index == 2
    assert [m.role for m in second.request.messages] == [
        Role.ASSISTANT,
        Role.TOOL,
        Role.SYSTEM,
        Role.USER,
    ]
    assert second.request.total_messages == 6
    assert second.forecast.reused_messages == 2

    # FULL of the same state: the held prefix plus the tail, with the same digest.
    full = await admit(deps, sid, "B", selection=RequestSelection())
    assert full.request.view is RequestView.FULL
    assert list(full.request.messages[:6]) == [*first.request.messages, *second.request.messages]
    third = await admit(deps, sid, "B", selection=delta(second))
    assert third.request.total_messages == full.request.total_messages
    assert third.request.digest == full.request.digest
    assert list(third.request.messages) == []

    # An unchanged request keeps the digest; an Inspect DELTA sees the same tail (none).
    inspected = await handlers.inspect(deps, "t", sid, WireFormat.NEUTRAL, delta(third))
    assert inspected.request.view is RequestView.DELTA
    assert inspected.request.digest == third.request.digest


async def test_a_prefix_the_service_cannot_verify_gets_a_full_request(deps: Deps) -> None:
    sid = await new_session(deps)
    first = await admit(deps, sid, "A", "one")
    wrong = RequestSelection(RequestView.DELTA, HeldPrefix(2, b"not the digest"))
    second = await admit(deps, sid, "A", "two", selection=wrong)
    assert second.request.view is RequestView.FULL
    assert len(second.request.messages) == 3
    stale = await admit(deps, sid, "A", "three", selection=delta(first))
    assert stale.request.view is RequestView.FULL

    # Anthropic Messages bodies are always FULL.
    anthropic = await admit(
        deps, sid, "A", "four", selection=delta(stale), wire_format=WireFormat.ANTHROPIC_MESSAGES
    )
    assert anthropic.request.view is RequestView.FULL


async def test_after_a_replacement_the_next_request_is_full(deps: Deps) -> None:
    sid = await new_session(deps)
    first = await admit(deps, sid, "A", "one", route=REPLACE)
    second = await admit(deps, sid, "B", "two", route=REPLACE, selection=delta(first))
    assert second.request.view is RequestView.FULL  # the head was rewritten
    assert [m.text for m in second.request.messages] == ["B", "one", "two"]
    assert second.forecast.reused_messages == 0

    third = await admit(deps, sid, "B", "three", route=REPLACE, selection=delta(second))
    assert third.request.view is RequestView.DELTA
    plan = await handlers.plan_compaction(deps, "t", PlanCompactionCommand(sid, retain_tokens=0))
    await handlers.compact(deps, "t", CompactCommand(sid, plan.plan_token, "s"), None)
    after = await admit(deps, sid, "B", "four", route=REPLACE, selection=delta(third))
    assert after.request.view is RequestView.FULL
    assert after.forecast.divergence_reason.value == "series_start"
    assert after.forecast.reused_messages == 1  # the head
