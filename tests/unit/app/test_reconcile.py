"""Reconcile's handler on the in-memory storage (``use_cases/admit.py`` ``reconcile``): a
retried attempt of an admitted step, on the session as it is now — the step's prompt and tools
as admitted, never its users again, the configuration in force. Each refusal names its reason
and leaves the session as it was; a repeated request_id replays the first response's bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from admission_service.app import handlers
from admission_service.app.commands import ReconcileCommand, RouteRequest
from admission_service.app.hooks import Phase
from admission_service.domain.errors import (
    AdmissionNotFound,
    InvalidArgument,
    RequestIdReused,
    RevisionMismatch,
    SessionNotFound,
    UnansweredToolCall,
)
from admission_service.domain.events import EventKind
from admission_service.domain.session import HeldPrefix, RequestSelection, RequestView
from admission_service.domain.wire import WireFormat

from tests.fakes.storage import FakeStorage
from tests.unit.app.steps import (
    BEFORE_COMMIT,
    IN_HISTORY,
    REPLACE,
    TENANT,
    App,
    Cancelling,
    assistant,
    key,
)


@pytest.fixture
def app() -> App:
    return App.build()


def call(app: App, command: ReconcileCommand, request_id: str | None = None) -> Any:
    return handlers.reconcile(app.deps, TENANT, command, key(request_id) if request_id else None)


async def ledger(app: App, sid: str) -> list[tuple[str, int]]:
    inspected = await handlers.inspect(app.deps, TENANT, sid, WireFormat.NEUTRAL)
    return [(entry.admission_id, entry.attempt) for entry in inspected.ledger]


Change = Callable[[ReconcileCommand], ReconcileCommand]

BAD_INPUT: list[tuple[str, Change, str]] = [
    ("session_id", lambda c: replace(c, session_id=""), "session_id"),
    ("expected_revision", lambda c: replace(c, expected_revision=-1), "expected_revision"),
    ("admission_id", lambda c: replace(c, admission_id=""), "admission_id"),
    ("admission_id length", lambda c: replace(c, admission_id="a" * 129), "admission_id"),
    ("admission_id nul", lambda c: replace(c, admission_id="a\x00"), "admission_id"),
    ("provider", lambda c: replace(c, route=RouteRequest("", "m", 0)), "route.provider"),
    ("model", lambda c: replace(c, route=RouteRequest("p", "", 0)), "route.model"),
    ("window", lambda c: replace(c, route=RouteRequest("p", "m", -1)), "route.context_window"),
]


@pytest.mark.parametrize(
    ("change", "field"), [pytest.param(c, f, id=name) for name, c, f in BAD_INPUT]
)
async def test_bad_input_is_refused_by_name_and_touches_nothing(
    app: App, change: Change, field: str
) -> None:
    sid, admission_id = await app.busy()
    command = change(ReconcileCommand(sid, admission_id, IN_HISTORY))
    error = await app.refused(sid, InvalidArgument, call(app, command))
    assert (error.field, error.reason) == (field, "INVALID_FIELD")


async def test_an_unknown_admission_is_not_found_and_touches_nothing(app: App) -> None:
    sid, _ = await app.busy()
    _, elsewhere = await app.busy("other")
    error = await app.refused(
        sid, AdmissionNotFound, call(app, ReconcileCommand(sid, "nope", IN_HISTORY))
    )
    assert error.metadata == {"admission_id": "nope"}
    # An admission names a step of its own session only.
    await app.refused(
        sid, AdmissionNotFound, call(app, ReconcileCommand(sid, elsewhere, IN_HISTORY))
    )


async def test_an_unknown_session_is_not_found(app: App) -> None:
    await app.refused("nope", SessionNotFound, call(app, ReconcileCommand("nope", "a", IN_HISTORY)))


async def test_a_stale_expected_revision_is_aborted(app: App) -> None:
    sid, admission_id = await app.busy()
    command = ReconcileCommand(sid, admission_id, REPLACE, expected_revision=2)
    error = await app.refused(sid, RevisionMismatch, call(app, command))
    assert error.metadata == {"expected_revision": "2", "actual_revision": "3"}
    assert (await call(app, replace(command, expected_revision=3))).result.revision == 4


async def test_a_retry_on_an_unchanged_session_logs_nothing_but_its_ledger_row(app: App) -> None:
    sid, admission_id = await app.busy()
    admitted_events = await app.events(sid)
    for number in (1, 2):
        retry = await app.reconcile(sid, admission_id)
        assert (retry.admission_id, retry.attempt) == (admission_id, number)
        assert retry.commits == () and retry.user_seqs == ()
        assert retry.header is None and retry.context is None and not retry.starts_series
        assert retry.revision == 3 and retry.log_seq == len(admitted_events)
        assert retry.effective_prompt.text == "B"
        assert retry.forecast.divergence_reason.value == "none"
    assert await app.events(sid) == admitted_events  # a retry is no change of the history
    assert (await ledger(app, sid))[-3:] == [
        (admission_id, 0),
        (admission_id, 1),
        (admission_id, 2),
    ]


async def test_a_retry_admits_no_user_again_and_rebaselines_after_a_compaction(app: App) -> None:
    sid, admission_id = await app.busy()
    await app.compact_all(sid)
    retry = await app.reconcile(sid, admission_id)
    assert retry.user_seqs == () and retry.starts_series
    assert retry.header is not None and retry.header.reason.value == "series"
    assert retry.effective_prompt.text == "B" and retry.effective_prompt.location == "head"
    assert retry.forecast.divergence_reason.value == "series_start"
    users = [e for e in await app.events(sid) if e.kind is EventKind.USER_MESSAGE]
    assert [e.message.text for e in users if e.message] == ["hello", "again"]
    again = await app.reconcile(sid, admission_id)
    assert again.commits == () and again.header is None and again.revision == retry.revision


async def test_a_retry_brings_back_the_prompt_its_step_was_admitted_with(app: App) -> None:
    sid = await app.create()
    first = await app.admit(sid, "A", "one", route=REPLACE)
    await app.admit(sid, "B", "two", route=REPLACE)
    retry = await app.reconcile(sid, first.admission_id, REPLACE)
    assert [(c.commit.op.value, c.commit.text) for c in retry.commits] == [("replace", "A")]
    assert retry.effective_prompt.text == "A"
    assert (await app.info(sid)).replace_generation == 2


async def test_a_retry_keeps_the_configuration_in_force_and_logs_a_changed_route(
    app: App,
) -> None:
    sid = await app.create()
    first = await app.admit(sid, "A", "one", config=(("temperature", "0.2"),))
    same = await app.reconcile(sid, first.admission_id)
    assert same.header is None  # the configuration in force is kept: no change
    moved = await app.reconcile(sid, first.admission_id, RouteRequest("deepseek", "other", 64_000))
    assert moved.header is not None and moved.header.reason.value == "change"
    assert moved.header.header.config == (("temperature", "0.2"),)
    assert moved.context is not None and moved.context.context.model == "other"
    assert moved.forecast.divergence_reason.value == "model_changed"


async def test_no_retry_while_a_tool_call_is_unanswered(app: App) -> None:
    sid = await app.create()
    admission_id = (await app.admit(sid, "A", "one")).admission_id
    await app.record(sid, admission_id, assistant("calling", "c1"))
    error = await app.refused(
        sid, UnansweredToolCall, call(app, ReconcileCommand(sid, admission_id, IN_HISTORY))
    )
    assert error.metadata["call_id"] == "c1"


async def test_a_retried_reconcile_replays_its_bytes_and_a_reused_id_is_refused(
    app: App,
) -> None:
    sid, admission_id = await app.busy()
    command = ReconcileCommand(sid, admission_id, REPLACE, wire_format=WireFormat.OPENAI_CHAT)
    first = await call(app, command, "r1")
    assert first.result is not None and first.encoded is not None
    await app.admit(sid, "C", "later", step=3)  # the session moved on since
    before = await app.observe(sid)
    again = await call(app, command, "r1")
    assert again.result is None and again.encoded == first.encoded
    assert await app.observe(sid) == before
    reused = handlers.reconcile(app.deps, TENANT, command, key("r1", b"another body"))
    await app.refused(sid, RequestIdReused, reused)
    admit = handlers.admit(app.deps, TENANT, app.admit_command(sid, "C", "u"), key("r1"))
    await app.refused(sid, RequestIdReused, admit)


async def test_validate_only_answers_the_retry_and_counts_no_attempt(app: App) -> None:
    sid, admission_id = await app.busy()
    command = ReconcileCommand(sid, admission_id, REPLACE, validate_only=True)
    before = await app.observe(sid)
    dry = (await call(app, command)).result
    assert await app.observe(sid) == before
    assert dry.attempt == 1 and dry.revision == 3 and dry.commits != ()
    real = (await call(app, replace(command, validate_only=False))).result
    assert real.attempt == 1 and real.revision == 4
    assert (dry.commits, dry.header, dry.context) == (real.commits, real.header, real.context)
    assert dry.request.digest == real.request.digest


async def test_a_retry_answers_a_delta_against_the_prefix_its_caller_holds(app: App) -> None:
    sid, admission_id = await app.busy()
    held = (await app.reconcile(sid, admission_id)).request
    selection = RequestSelection(RequestView.DELTA, HeldPrefix(held.total_messages, held.digest))
    retry = await app.reconcile(sid, admission_id, selection=selection)
    assert retry.request.view is RequestView.DELTA
    assert retry.request.first_message_index == held.total_messages
    assert list(retry.request.messages) == [] and retry.request.digest == held.digest


@pytest.mark.parametrize("phase", BEFORE_COMMIT)
async def test_a_retry_cancelled_at_any_phase_commits_nothing_and_counts_no_attempt(
    phase: Phase,
) -> None:
    storage = FakeStorage()
    app = App.build(storage)
    sid, admission_id = await app.busy()
    cancelling = App.build(storage, hooks=Cancelling("Reconcile", phase))
    command = ReconcileCommand(sid, admission_id, REPLACE)
    await app.refused(sid, asyncio.CancelledError, call(cancelling, command))
    retry = (await call(app, command)).result
    assert (retry.attempt, retry.revision) == (1, 4)
