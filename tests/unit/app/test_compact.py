"""PlanCompaction and Compact on the in-memory storage (``use_cases/compact.py``): a plan is a
read bound by its token to the session as planned; a compaction replaces the planned range with
one summary and never loses the prompt in force. The head, and a tool call with its result, are
never cut. Each refusal names its reason (and field) and leaves the session as it was; a
repeated request_id replays the first response's bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
from admission_service.app import handlers
from admission_service.app.commands import (
    CompactCommand,
    PlanCompactionCommand,
    RecordCommand,
    Usage,
)
from admission_service.app.hooks import Phase
from admission_service.app.limits import Limits
from admission_service.domain.errors import (
    InvalidArgument,
    NothingToCompact,
    RequestIdReused,
    ResponseTooLarge,
    RevisionMismatch,
    SessionNotFound,
    StaleCompactionPlan,
    SummaryNotSmaller,
)
from admission_service.domain.messages import Role
from admission_service.domain.session import HeldPrefix, RequestSelection, RequestView
from admission_service.domain.wire import WireFormat

from tests.fakes.storage import FakeStorage
from tests.unit.app.steps import (
    BEFORE_COMMIT,
    REPLACE,
    TENANT,
    App,
    Cancelling,
    assistant,
    key,
    user,
)


@pytest.fixture
def app() -> App:
    return App.build()


def call(app: App, command: CompactCommand, request_id: str | None = None) -> Any:
    return handlers.compact(app.deps, TENANT, command, key(request_id) if request_id else None)


def plan(app: App, command: PlanCompactionCommand) -> Awaitable[object]:
    return handlers.plan_compaction(app.deps, TENANT, command)


async def three_prompts(app: App) -> str:
    """Prompt A in the head, in-history updates B (seq 4) and C (seq 6), a user after each."""
    sid = await app.create()
    for step, prompt in enumerate("ABC", start=1):
        await app.admit(sid, prompt, f"user {step}", step=step)
    return sid


async def surface(app: App, sid: str) -> list[tuple[str, str]]:
    inspected = await handlers.inspect(app.deps, TENANT, sid, WireFormat.NEUTRAL)
    return [(m.role.value, m.text) for m in inspected.request.messages]


# ---- PlanCompaction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (PlanCompactionCommand("s"), "selection"),
        (PlanCompactionCommand("s", 0, (1, 2)), "selection"),
        (PlanCompactionCommand("s", -1), "retain_tokens"),
        (PlanCompactionCommand("s", None, (-1, 2)), "range.start_seq"),
        (PlanCompactionCommand("s", None, (1, -2)), "range.end_seq"),
        (PlanCompactionCommand("s", None, (9, 1)), "range.start_seq"),  # no such node
        (PlanCompactionCommand("s", None, (1, 2)), "range.end_seq"),  # a header: no node
        (PlanCompactionCommand("s", None, (5, 1)), "range"),  # start after end
        (PlanCompactionCommand("s", None, (0, 1)), "range.start_seq"),  # the head is pinned
        (PlanCompactionCommand("", 0), "session_id"),
    ],
    ids=[
        "no selection",
        "both selections",
        "negative retain",
        "negative start",
        "negative end",
        "unknown start",
        "not a node",
        "reversed",
        "head",
        "session_id",
    ],
)
async def test_a_bad_selection_is_refused_by_name(
    app: App, command: PlanCompactionCommand, field: str
) -> None:
    await app.busy()
    error = await app.refused("s", InvalidArgument, plan(app, command))
    assert (error.field, error.reason) == (field, "INVALID_FIELD")


async def test_a_range_never_cuts_a_tool_call_from_its_result(app: App) -> None:
    sid, _ = await app.busy()  # seq 4 calls c1, seq 5 answers it
    for seq_range in ((1, 4), (5, 7)):
        error = await app.refused(
            sid, InvalidArgument, plan(app, PlanCompactionCommand(sid, None, seq_range))
        )
        assert error.field == "range"
    planned = await app.plan(sid, seq_range=(1, 5))
    assert planned.plan.shadowed_seqs == (1, 4, 5)


async def test_retain_tokens_keeps_the_newest_nodes_and_moves_back_past_a_tool_answer(
    app: App,
) -> None:
    sid, _ = await app.busy()
    everything = await app.plan(sid, retain_tokens=0)
    assert everything.plan.start_seq == 1 and everything.plan.shadowed_seqs == (1, 4, 5, 6, 7)
    async with app.storage.unit(TENANT, sid, snapshot=True) as unit:
        prices = {row.seq: row.tokens for row in await unit.store.surface()}
    # Keeping the answer (seq 5) keeps its call (seq 4) too.
    keep = prices[5] + prices[6] + prices[7]
    kept = await app.plan(sid, retain_tokens=keep)
    assert kept.plan.shadowed_seqs == (1,)
    assert kept.plan.shadowed_tokens == prices[1]


@pytest.mark.parametrize("history", ["none", "head only", "everything retained"])
async def test_nothing_to_compact_is_a_failed_precondition(app: App, history: str) -> None:
    sid = await app.create()
    retain = 0
    if history != "none":
        await app.admit(sid, "A")
    if history == "everything retained":
        await app.admit(sid, "A", "u")
        retain = 10**6
    error = await app.refused(sid, NothingToCompact, plan(app, PlanCompactionCommand(sid, retain)))
    assert error.reason == "NOTHING_TO_COMPACT"


async def test_a_plan_is_a_read_naming_what_to_summarise(app: App) -> None:
    sid, _ = await app.busy()
    before = await app.observe(sid)
    planned = await app.plan(sid, seq_range=(1, 5))
    assert await app.observe(sid) == before
    assert planned.revision == 3 and planned.tools == ()
    # The head first, then every shadowed node in surface order.
    assert [m.role for m in planned.summarization_input] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
    ]
    assert planned.summarization_input[1] == user("hello")
    assert planned.plan.shadowed_tokens > 0
    with pytest.raises(SessionNotFound):
        await app.plan("nope")
    with pytest.raises(SessionNotFound):
        await handlers.plan_compaction(app.deps, "u", PlanCompactionCommand(sid, 0))


async def test_a_summarisation_input_over_the_response_bound_asks_for_a_smaller_range() -> None:
    app = App.build(limits=replace(Limits(), max_response_bytes=4096))
    sid = await app.create()
    held = RequestSelection()
    for step in (1, 2, 3):  # each response a DELTA: the session is past the bound for FULL
        request = (await app.admit(sid, "P", str(step) * 1500, step=step, selection=held)).request
        held = RequestSelection(
            RequestView.DELTA, HeldPrefix(request.total_messages, request.digest)
        )
    error = await app.refused(sid, ResponseTooLarge, plan(app, PlanCompactionCommand(sid, 0)))
    assert "smaller" in error.message and error.metadata["limit"] == "4096"
    assert (await app.plan(sid, seq_range=(1, 4))).plan.shadowed_seqs == (1, 4)


# ---- Compact -----------------------------------------------------------------------------------


async def test_everything_after_the_head_becomes_one_summary(app: App) -> None:
    sid, _ = await app.busy()
    planned = await app.plan(sid)
    compacted = await app.compact(sid, planned.plan_token, "summary")
    assert compacted.revision == 4 and compacted.summary_seq == 8
    assert compacted.shadowed_seqs == planned.plan.shadowed_seqs
    # The prompt in force (B, in history) was in the range: it is consolidated into the head.
    assert [(c.commit.op.value, c.commit.text) for c in compacted.commits] == [("replace", "B")]
    assert (compacted.effective_prompt.text, compacted.effective_prompt.location) == ("B", "head")
    assert await surface(app, sid) == [("system", "B"), ("user", "summary")]
    assert (await app.info(sid)).replace_generation == 2  # the summary, the head's rewrite
    after = await app.admit(sid, "B", "next", step=3)
    assert after.commits == () and after.starts_series
    assert after.forecast.divergence_reason.value == "series_start"
    assert after.forecast.reused_messages == 0  # the head itself was rewritten


@pytest.mark.parametrize(
    ("seq_range", "commits", "location", "generation", "messages"),
    [
        # B shadowed, C (in force, in history) survives: nothing to move.
        ((4, 5), [], "in_history", 1, ["A", "user 1", "s", "C", "user 3"]),
        # C shadowed: B is emptied and C rewritten into the head, one commit.
        ((5, 6), [("replace", ""), ("replace", "C")], "head", 3, ["C", "user 1", "s", "user 3"]),
        # The users alone: the prompts stay where they are.
        ((1, 1), [], "in_history", 1, ["A", "s", "B", "user 2", "C", "user 3"]),
    ],
    ids=["an earlier update", "the update in force", "no prompt"],
)
async def test_the_prompt_in_force_survives_any_range(
    app: App,
    seq_range: tuple[int, int],
    commits: list[tuple[str, str]],
    location: str,
    generation: int,
    messages: list[str],
) -> None:
    sid = await three_prompts(app)
    compacted = await app.compact(sid, (await app.plan(sid, seq_range=seq_range)).plan_token)
    assert [(c.commit.op.value, c.commit.text) for c in compacted.commits] == commits
    assert (compacted.effective_prompt.text, compacted.effective_prompt.location) == (
        "C",
        location,
    )
    assert [text for _, text in await surface(app, sid)] == messages
    assert (await app.info(sid)).replace_generation == generation
    inspected = await handlers.inspect(app.deps, TENANT, sid, WireFormat.NEUTRAL)
    assert inspected.effective_prompt == compacted.effective_prompt


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (CompactCommand("s", "", "s"), "plan_token"),
        (CompactCommand("s", "TOKEN", ""), "summary"),
        (CompactCommand("s", "TOKEN", "x" * (1 << 20) + "x"), "summary"),
        (CompactCommand("s", "TOKEN", "s", expected_revision=-1), "expected_revision"),
        (CompactCommand("a b", "TOKEN", "s"), "session_id"),
        (CompactCommand("s", "forged", "s"), "plan_token"),
    ],
    ids=["no token", "no summary", "summary size", "negative revision", "session", "forged"],
)
async def test_bad_input_is_refused_by_name_and_touches_nothing(
    app: App, command: CompactCommand, field: str
) -> None:
    sid, _ = await app.busy()
    token = (await app.plan(sid)).plan_token
    if command.plan_token == "TOKEN":
        command = replace(command, plan_token=token)
    error = await app.refused(sid, InvalidArgument, call(app, command))
    assert (error.field, error.reason) == (field, "INVALID_FIELD")


async def test_a_plan_token_holds_only_for_the_session_and_tenant_it_was_planned_on(
    app: App,
) -> None:
    sid, _ = await app.busy()
    await app.busy("other")
    token = (await app.plan(sid)).plan_token
    error = await app.refused(
        "other", InvalidArgument, call(app, CompactCommand("other", token, "s"))
    )
    assert error.field == "plan_token"
    await handlers.create_session(app.deps, "u", sid, None)
    with pytest.raises(InvalidArgument):
        await handlers.compact(app.deps, "u", CompactCommand(sid, token, "s"), None)


Move = Callable[[App, str, str], Awaitable[object]]

MOVES: list[tuple[str, Move]] = [
    ("an admit", lambda app, sid, aid: app.admit(sid, "B", "more", step=3)),
    ("a record", lambda app, sid, aid: app.record(sid, aid, assistant("reply"))),
    ("a compaction", lambda app, sid, aid: app.compact_all(sid)),
    ("a changed retry", lambda app, sid, aid: app.reconcile(sid, aid, REPLACE)),
]


@pytest.mark.parametrize("move", [pytest.param(m, id=name) for name, m in MOVES])
async def test_a_plan_goes_stale_when_the_session_moves(app: App, move: Move) -> None:
    sid, admission_id = await app.busy()
    token = (await app.plan(sid)).plan_token
    await move(app, sid, admission_id)
    error = await app.refused(sid, StaleCompactionPlan, call(app, CompactCommand(sid, token, "s")))
    assert error.reason == "STALE_COMPACTION_PLAN"


async def test_a_retry_or_a_usage_that_logs_nothing_leaves_the_plan_valid(app: App) -> None:
    sid, admission_id = await app.busy()
    token = (await app.plan(sid)).plan_token
    await app.reconcile(sid, admission_id)  # unchanged: nothing logged
    await app.record(sid, admission_id, usage=Usage(1, 1, 0, 0))
    assert (await app.compact(sid, token)).revision == 4


async def test_a_summary_not_smaller_than_its_range_is_refused(app: App) -> None:
    sid = await app.create()
    await app.admit(sid, "P", "what will the weather be like tomorrow?")
    token = (await app.plan(sid)).plan_token
    summary = "a summary longer than the question it replaces"
    error = await app.refused(
        sid, SummaryNotSmaller, call(app, CompactCommand(sid, token, summary))
    )
    assert error.reason == "SUMMARY_NOT_SMALLER" and error.field == "summary"
    assert int(error.metadata["summary_tokens"]) >= int(error.metadata["shadowed_tokens"])
    assert (await app.compact(sid, token, "s")).revision == 2


async def test_a_stale_expected_revision_or_an_unknown_session_is_refused(app: App) -> None:
    sid, _ = await app.busy()
    token = (await app.plan(sid)).plan_token
    command = CompactCommand(sid, token, "s", expected_revision=2)
    error = await app.refused(sid, RevisionMismatch, call(app, command))
    assert error.metadata == {"expected_revision": "2", "actual_revision": "3"}
    assert (await call(app, replace(command, expected_revision=3))).result.revision == 4
    token = (await app.plan(sid)).plan_token
    await handlers.delete_session(app.deps, TENANT, sid, None, None)
    await app.refused(sid, SessionNotFound, call(app, CompactCommand(sid, token, "s")))


async def test_a_retried_compaction_replays_its_bytes_and_a_reused_id_is_refused(
    app: App,
) -> None:
    sid, admission_id = await app.busy()
    command = CompactCommand(sid, (await app.plan(sid)).plan_token, "s")
    first = await call(app, command, "r1")
    assert first.result is not None and first.encoded is not None
    before = await app.observe(sid)
    again = await call(app, command, "r1")  # its plan is stale now: replayed, not refused
    assert again.result is None and again.encoded == first.encoded
    assert await app.observe(sid) == before
    reused = handlers.compact(app.deps, TENANT, command, key("r1", b"another body"))
    await app.refused(sid, RequestIdReused, reused)
    record = handlers.record(
        app.deps, TENANT, RecordCommand(sid, admission_id, assistant("x")), key("r1")
    )
    await app.refused(sid, RequestIdReused, record)


@pytest.mark.parametrize("phase", BEFORE_COMMIT)
async def test_a_compaction_cancelled_at_any_phase_commits_nothing(phase: Phase) -> None:
    storage = FakeStorage()
    app = App.build(storage)
    sid, _ = await app.busy()
    command = CompactCommand(sid, (await app.plan(sid)).plan_token, "s")
    cancelling = App.build(storage, hooks=Cancelling("Compact", phase))
    await app.refused(sid, asyncio.CancelledError, call(cancelling, command))
    assert (await call(app, command)).result.revision == 4
    assert await surface(app, sid) == [("system", "B"), ("user", "s")]


@pytest.mark.parametrize(
    "cursor",
    [
        {"start": 1, "end": 7, "generation": 0},
        {"start": "1", "end": 7, "generation": 0, "next_seq": 8},
    ],
    ids=["a field missing", "a string for a number"],
)
async def test_a_signed_plan_token_of_another_shape_is_refused(
    app: App, cursor: dict[str, object]
) -> None:
    """Minted with the service's own key for the right scope, but not a plan's cursor (an
    older version's token): INVALID_ARGUMENT naming it, never a KeyError."""
    sid, _ = await app.busy()
    await app.deps.page_tokens.ready()
    token = app.deps.page_tokens.encode(f"compaction/{TENANT}/{sid}", cursor)  # type: ignore[arg-type]
    error = await app.refused(sid, InvalidArgument, call(app, CompactCommand(sid, token, "s")))
    assert error.field == "plan_token"
