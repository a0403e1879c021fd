"""Record's handler on the in-memory storage (``use_cases/record.py``): the model's reply and the
tools' results appended under their admission, tool calls opened and answered, the usage laid
beside the forecast it answers. Each refusal names its reason (and field) and leaves the session
as it was; a repeated request_id replays the first response's bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from admission_service.app import handlers
from admission_service.app.commands import CompactCommand, RecordCommand, Usage
from admission_service.app.hooks import Phase
from admission_service.app.limits import Limits
from admission_service.domain.errors import (
    AdmissionNotFound,
    InvalidArgument,
    RequestIdReused,
    RevisionMismatch,
    SessionNotFound,
    SessionSurfaceNodesExceeded,
    UnknownToolCall,
)
from admission_service.domain.events import EventKind
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
)
from admission_service.domain.wire import WireFormat

from tests.fakes.storage import FakeStorage
from tests.unit.app.steps import BEFORE_COMMIT, TENANT, App, Cancelling, assistant, key, result


@pytest.fixture
def app() -> App:
    return App.build()


def call(app: App, command: RecordCommand, request_id: str | None = None) -> Any:
    return handlers.record(app.deps, TENANT, command, key(request_id) if request_id else None)


async def admitted(app: App, sid: str = "s") -> str:
    await app.create(sid)
    return (await app.admit(sid, "A", "hello")).admission_id


async def observed(app: App, sid: str) -> list[Usage | None]:
    inspected = await handlers.inspect(app.deps, TENANT, sid, WireFormat.NEUTRAL)
    return [entry.observed for entry in inspected.ledger]


# ---- bad input names its field and touches nothing -----------------------------------------

Change = Callable[[RecordCommand], RecordCommand]


def reply(*blocks: Any, role: Role = Role.ASSISTANT) -> Change:
    return lambda c: replace(c, assistant=Message(role, blocks))


def results(*answers: ToolResult) -> Change:
    return lambda c: replace(c, tool_results=answers)


BAD_INPUT: list[tuple[str, Change, str]] = [
    ("session_id", lambda c: replace(c, session_id="a/b"), "session_id"),
    ("expected_revision", lambda c: replace(c, expected_revision=-1), "expected_revision"),
    ("admission_id", lambda c: replace(c, admission_id=""), "admission_id"),
    ("admission_id length", lambda c: replace(c, admission_id="a" * 129), "admission_id"),
    ("nothing", lambda c: RecordCommand(c.session_id, c.admission_id), "assistant"),
    ("role", reply(Text("x"), role=Role.USER), "assistant.role"),
    ("image", reply(Image("https://example.com/a.png", "")), "assistant.content[0]"),
    ("blocks", reply(*[Text("x")] * 257), "assistant.content"),
    ("size", reply(Text("x" * (1 << 20)), Reasoning("r")), "assistant"),
    ("call twice", lambda c: replace(c, assistant=assistant("x", "c1", "c1")), "assistant.content"),
    (
        "call id",
        lambda c: replace(c, assistant=assistant("x", "")),
        "assistant.content[1].tool_call.call_id",
    ),
    (
        "call id length",
        lambda c: replace(c, assistant=assistant("x", "c" * 257)),
        "assistant.content[1].tool_call.call_id",
    ),
    ("results", results(*[result(f"c{n}") for n in range(129)]), "tool_results"),
    ("result id", results(result("")), "tool_results[0].call_id"),
    ("result id nul", results(result("c\x00")), "tool_results[0].call_id"),
    ("answer twice", results(result("c1"), result("c1")), "tool_results[1].call_id"),
    (
        "error result",
        results(ToolResult("c1", (Text(""),), is_error=True)),
        "tool_results[0].content",
    ),
    (
        "result phase",
        results(ToolResult("c1", (Text("x", "commentary"),))),
        "tool_results[0].content[0].text.phase",
    ),
    ("usage", lambda c: replace(c, usage=Usage(0, -1, 0, 0)), "usage.output_tokens"),
    ("call name", reply(ToolCall("c1", "", "{}")), "assistant.content[0].tool_call.name"),
    (
        "arguments",
        reply(ToolCall("c1", "n", "[1]")),
        "assistant.content[0].tool_call.arguments_json",
    ),
    (
        "arguments json",
        reply(ToolCall("c1", "n", "{")),
        "assistant.content[0].tool_call.arguments_json",
    ),
    (
        "arguments depth",
        reply(ToolCall("c1", "n", '{"a":' * 64 + "[1]" + "}" * 64)),
        "assistant.content[0].tool_call.arguments_json",
    ),
]


@pytest.mark.parametrize(
    ("change", "field"), [pytest.param(c, f, id=name) for name, c, f in BAD_INPUT]
)
async def test_bad_input_is_refused_by_name_and_touches_nothing(
    app: App, change: Change, field: str
) -> None:
    admission_id = await admitted(app)
    command = change(RecordCommand("s", admission_id, assistant("fine"), usage=Usage(1, 1, 0, 0)))
    error = await app.refused("s", InvalidArgument, call(app, command))
    assert (error.field, error.reason) == (field, "INVALID_FIELD")


@pytest.mark.parametrize("request_id", ["r" * 129, "r\x00"])
async def test_a_bad_request_id_is_refused_by_name(app: App, request_id: str) -> None:
    admission_id = await admitted(app)
    command = RecordCommand("s", admission_id, assistant("fine"))
    error = await app.refused("s", InvalidArgument, call(app, command, request_id))
    assert error.field == "request_id"


# ---- the session, its revision and the admission --------------------------------------------


async def test_an_unknown_admission_or_session_is_not_found(app: App) -> None:
    await admitted(app)
    error = await app.refused(
        "s", AdmissionNotFound, call(app, RecordCommand("s", "nope", assistant()))
    )
    assert error.metadata == {"admission_id": "nope"}
    elsewhere = await admitted(app, "other")
    await app.refused("s", AdmissionNotFound, call(app, RecordCommand("s", elsewhere, assistant())))
    await app.refused(
        "nope", SessionNotFound, call(app, RecordCommand("nope", elsewhere, assistant()))
    )


async def test_a_stale_expected_revision_is_aborted(app: App) -> None:
    admission_id = await admitted(app)
    command = RecordCommand("s", admission_id, assistant(), expected_revision=0)
    error = await app.refused("s", RevisionMismatch, call(app, command))
    assert error.metadata == {"expected_revision": "0", "actual_revision": "1"}
    assert (await call(app, replace(command, expected_revision=1))).result.revision == 2


# ---- what a record appends --------------------------------------------------------------------


async def test_the_reply_then_each_result_is_appended_under_its_admission(app: App) -> None:
    admission_id = await admitted(app)
    recorded = await app.record(
        "s", admission_id, assistant("reading", "c1", "c2"), (result("c2"), result("c1"))
    )
    assert (recorded.revision, recorded.assistant_seq, recorded.tool_result_seqs) == (2, 4, (5, 6))
    logged = (await app.events("s"))[4:]
    assert [e.kind for e in logged] == [
        EventKind.ASSISTANT_MESSAGE,
        EventKind.TOOL_RESULT,
        EventKind.TOOL_RESULT,
    ]
    assert {(e.admission_id, e.turn, e.step) for e in logged} == {(admission_id, 1, 1)}
    messages = list(
        (await handlers.inspect(app.deps, TENANT, "s", WireFormat.NEUTRAL)).request.messages
    )
    assert messages[2:] == [
        assistant("reading", "c1", "c2"),
        Message(Role.TOOL, (result("c2"),)),
        Message(Role.TOOL, (result("c1"),)),
    ]
    # Every call is answered: the next step is admitted.
    assert (await app.admit("s", "A", "next")).revision == 3


async def test_usage_alone_logs_nothing_and_lands_on_the_latest_attempt_of_its_admission(
    app: App,
) -> None:
    admission_id = await admitted(app)
    second = (await app.admit("s", "A", "two")).admission_id
    await app.reconcile("s", admission_id)
    events = await app.events("s")
    recorded = await app.record("s", admission_id, usage=Usage(100, 5, 90, 0))
    assert (recorded.revision, recorded.assistant_seq, recorded.tool_result_seqs) == (2, None, ())
    assert await app.events("s") == events  # no change of the history: the revision stays
    assert await observed(app, "s") == [None, None, Usage(100, 5, 90, 0)]
    await app.record("s", second, usage=Usage(7, 1, 0, 0))
    assert await observed(app, "s") == [None, Usage(7, 1, 0, 0), Usage(100, 5, 90, 0)]


async def test_a_reply_may_say_nothing_and_a_result_may_be_empty(app: App) -> None:
    admission_id = await admitted(app)
    recorded = await app.record(
        "s", admission_id, Message(Role.ASSISTANT, (Reasoning("thinking"),)), ()
    )
    assert recorded.assistant_seq == 4
    called = await app.record("s", admission_id, assistant("", "c1"))
    answered = await app.record("s", admission_id, None, (ToolResult("c1", ()),))
    assert (called.assistant_seq, answered.tool_result_seqs) == (5, (6,))


# ---- tool calls: open, answered, unknown, taken ------------------------------------------------


async def test_a_result_answers_a_call_made_earlier_or_in_the_same_record(app: App) -> None:
    admission_id = await admitted(app)
    await app.record("s", admission_id, assistant("first", "c1"))
    both = await app.record(
        "s", admission_id, assistant("second", "c2"), (result("c1"), result("c2"))
    )
    assert both.tool_result_seqs == (6, 7)


@pytest.mark.parametrize(
    ("answers", "field"),
    [
        ((result("c9"),), "tool_results[0].call_id"),  # never made
        ((result("c1"), result("c9")), "tool_results[1].call_id"),  # the second answers none
        ((result("c0"),), "tool_results[0].call_id"),  # answered already
    ],
    ids=["never made", "second stray", "answered already"],
)
async def test_a_result_answering_no_open_call_is_refused_by_index(
    app: App, answers: tuple[ToolResult, ...], field: str
) -> None:
    admission_id = await admitted(app)
    await app.record("s", admission_id, assistant("look", "c0"), (result("c0"),))
    command = RecordCommand("s", admission_id, assistant("again", "c1"), answers)
    error = await app.refused("s", UnknownToolCall, call(app, command))
    assert (error.reason, error.field) == ("UNKNOWN_TOOL_CALL", field)


async def test_a_call_compacted_away_before_its_answer_is_no_longer_open(app: App) -> None:
    admission_id = await admitted(app)
    await app.record("s", admission_id, assistant("calling", "c1"))
    compacted = await app.compact_all("s")
    assert compacted.shadowed_seqs == (1, 4)
    await app.refused(
        "s",
        UnknownToolCall,
        call(app, RecordCommand("s", admission_id, None, (result("c1"),))),
    )
    # Nothing is open on the surface: the next step is admitted.
    assert (await app.admit("s", "A", "next")).starts_series


@pytest.mark.parametrize("answered", [True, False])
async def test_a_tool_call_id_names_one_call_in_a_session(app: App, answered: bool) -> None:
    admission_id = await admitted(app)
    await app.record("s", admission_id, assistant("look", "c1"), (result("c1"),) * answered)
    command = RecordCommand("s", admission_id, assistant("again", "c2", "c1"))
    error = await app.refused("s", InvalidArgument, call(app, command))
    assert error.field == "assistant.content"
    assert error.metadata == {"field": "assistant.content", "call_id": "c1", "index": "1"}


# ---- idempotent retries ----------------------------------------------------------------------


async def test_a_retried_record_replays_its_bytes_and_a_reused_id_is_refused(app: App) -> None:
    admission_id = await admitted(app)
    command = RecordCommand("s", admission_id, assistant("x", "c1"), usage=Usage(3, 1, 0, 0))
    first = await call(app, command, "r1")
    assert first.result is not None and first.encoded is not None
    before = await app.observe("s")
    again = await call(app, command, "r1")  # not refused as a taken call id: replayed
    assert again.result is None and again.encoded == first.encoded
    assert await app.observe("s") == before
    reused = handlers.record(app.deps, TENANT, command, key("r1", b"another body"))
    await app.refused("s", RequestIdReused, reused)
    compact = CompactCommand("s", (await app.plan("s")).plan_token, "summary")
    await app.refused("s", RequestIdReused, handlers.compact(app.deps, TENANT, compact, key("r1")))


# ---- cancellation ----------------------------------------------------------------------------


@pytest.mark.parametrize("phase", BEFORE_COMMIT)
async def test_a_record_cancelled_at_any_phase_commits_nothing(phase: Phase) -> None:
    storage = FakeStorage()
    app = App.build(storage)
    admission_id = await admitted(app)
    cancelling = App.build(storage, hooks=Cancelling("Record", phase))
    command = RecordCommand("s", admission_id, assistant("x", "c1"), (result("c1"),))
    await app.refused("s", asyncio.CancelledError, call(cancelling, command))
    # The session is free again: the next writer is not left waiting on the cancelled one.
    assert (await call(app, command)).result.revision == 2


async def test_the_json_depth_limit_is_the_configured_one() -> None:
    app = App.build(limits=replace(Limits(), max_json_depth=3))
    admission_id = await admitted(app)
    at_limit = RecordCommand(
        "s", admission_id, Message(Role.ASSISTANT, (ToolCall("c1", "n", '{"a":{"b":[1]}}'),))
    )
    assert (await call(app, at_limit)).result.revision == 2
    deeper = RecordCommand(
        "s", admission_id, Message(Role.ASSISTANT, (ToolCall("c2", "n", '{"a":{"b":[[1]]}}'),))
    )
    error = await app.refused("s", InvalidArgument, call(app, deeper))
    assert error.metadata["max_json_depth"] == "3"


async def test_a_record_past_the_sessions_surface_bound_is_refused() -> None:
    app = App.build(limits=replace(Limits(), max_session_surface_nodes=3))
    admission_id = await admitted(app)  # the prompt and the user: two nodes
    await app.record("s", admission_id, assistant("one"))
    error = await app.refused(
        "s", SessionSurfaceNodesExceeded, call(app, RecordCommand("s", admission_id, assistant()))
    )
    assert error.metadata == {"bound": "max_session_surface_nodes", "limit": "3", "value": "4"}
    # Usage alone grows no surface.
    assert (await app.record("s", admission_id, usage=Usage(1, 1, 0, 0))).revision == 2
