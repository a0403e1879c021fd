"""Admit's handler on the in-memory storage (``use_cases/admit.py`` ``admit``): every rule path
of a step's first attempt. Each refusal names its reason (and field) and leaves the session as
it was (``App.refused``: revision, events, every stored row) — bad input loses nothing; a
repeated request_id replays the first response's bytes; ``previous_output`` records the last
step's output in the same transaction, all or nothing."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from admission_service.app import handlers
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    Delivery,
    ReconcileCommand,
    RecordCommand,
    RouteRequest,
    Usage,
)
from admission_service.app.hooks import Phase
from admission_service.app.limits import MIB, Limits, Quotas
from admission_service.app.replay import ReplayMismatch
from admission_service.app.use_cases import admit as admit_module
from admission_service.domain.errors import (
    AdmissionNotFound,
    DomainError,
    InvalidArgument,
    RequestIdReused,
    ResponseTooLarge,
    RevisionMismatch,
    SessionNotFound,
    SessionSurfaceBytesExceeded,
    SessionSurfaceNodesExceeded,
    StoredBytesQuotaExceeded,
    UnansweredToolCall,
    UnknownToolCall,
    WireFormatError,
)
from admission_service.domain.events import Event, EventKind
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    Role,
    Text,
    Tool,
    ToolCall,
    ToolResult,
)
from admission_service.domain.session import HeldPrefix, RequestSelection, RequestView
from admission_service.domain.wire import WireFormat
from admission_service.storage import codec

from tests.unit.app.steps import (
    IN_HISTORY,
    REPLACE,
    TENANT,
    App,
    Cancelling,
    assistant,
    key,
    result,
    user,
)

READ = Tool("read", "Read a file", '{"type":"object"}')


@pytest.fixture
def app() -> App:
    return App.build()


def call(app: App, command: AdmitCommand, request_id: str | None = None) -> Any:
    return handlers.admit(app.deps, TENANT, command, key(request_id) if request_id else None)


def output(sid: str, admission_id: str, call_id: str = "c1", **kwargs: Any) -> RecordCommand:
    """A step's output as the next Admit carries it (under the Admit's session id): a tool
    call, its answer, the usage."""
    kwargs.setdefault("assistant", assistant("reading", call_id))
    kwargs.setdefault("tool_results", (result(call_id),))
    kwargs.setdefault("usage", Usage(1200, 40, 1000, 0))
    return RecordCommand(sid, admission_id, **kwargs)


def delta(previous: AttemptResult) -> RequestSelection:
    request = previous.request
    return RequestSelection(RequestView.DELTA, HeldPrefix(request.total_messages, request.digest))


def message(*blocks: Any, role: Role = Role.USER) -> Message:
    return Message(role, blocks)


# ---- bad input names its field and touches nothing -----------------------------------------

Change = Callable[[AdmitCommand], AdmitCommand]
DEEP_JSON = '{"a":' * 65 + "1" + "}" * 65


def users(*messages: Message) -> Change:
    return lambda c: replace(c, users=messages)


def previous(admission_id: str = "ADMISSION", **kwargs: Any) -> Change:
    """An output (of the busy session's second step unless ``admission_id`` says otherwise)."""
    return lambda c: replace(c, previous_output=RecordCommand(c.session_id, admission_id, **kwargs))


BAD_INPUT: list[tuple[str, Change, str]] = [
    ("session_id", lambda c: replace(c, session_id="a b"), "session_id"),
    ("expected_revision", lambda c: replace(c, expected_revision=-1), "expected_revision"),
    ("turn", lambda c: replace(c, turn=-1), "turn"),
    ("step", lambda c: replace(c, step=-1), "step"),
    # bytes, not characters
    ("prompt", lambda c: replace(c, rendered_prompt="\u00e9" * (MIB // 2 + 1)), "rendered_prompt"),
    (
        "tools",
        lambda c: replace(c, tools=tuple(Tool(f"t{n}", "", "") for n in range(129))),
        "tools",
    ),
    ("tool name", lambda c: replace(c, tools=(Tool("", "", ""),)), "tools[0].name"),
    ("tool name length", lambda c: replace(c, tools=(Tool("t" * 129, "", ""),)), "tools[0].name"),
    ("tool twice", lambda c: replace(c, tools=(READ, READ)), "tools[1].name"),
    ("tool size", lambda c: replace(c, tools=(Tool("t", "d" * 256 * 1024, "{}"),)), "tools[0]"),
    (
        "tool schema",
        lambda c: replace(c, tools=(Tool("t", "", "{no"),)),
        "tools[0].parameters_json",
    ),
    ("tool array", lambda c: replace(c, tools=(Tool("t", "", "[]"),)), "tools[0].parameters_json"),
    (
        "tool deep",
        lambda c: replace(c, tools=(Tool("t", "", DEEP_JSON),)),
        "tools[0].parameters_json",
    ),
    ("config size", lambda c: replace(c, config=tuple((f"k{n}", "") for n in range(65))), "config"),
    ("config key", lambda c: replace(c, config=(("", "v"),)), "config"),
    ("config key length", lambda c: replace(c, config=(("k" * 129, "v"),)), "config"),
    ("config key nul", lambda c: replace(c, config=(("k\x00", "v"),)), "config"),
    ("config value", lambda c: replace(c, config=(("big", "v" * 4097),)), "config[big]"),
    ("provider", lambda c: replace(c, route=RouteRequest("", "m", 0)), "route.provider"),
    ("model", lambda c: replace(c, route=RouteRequest("p", "", 0)), "route.model"),
    ("model length", lambda c: replace(c, route=RouteRequest("p", "m" * 129, 0)), "route.model"),
    ("window", lambda c: replace(c, route=RouteRequest("p", "m", -1)), "route.context_window"),
    ("users", users(*[user("u")] * 65), "users"),
    ("user role", users(message(Text("u"), role=Role.ASSISTANT)), "users[0].role"),
    ("user empty", users(user("u"), message()), "users[1].content"),
    ("user blocks", users(message(*[Text("u")] * 257)), "users[0].content"),
    ("user size", users(message(Text("u" * MIB), Text("u"))), "users[0]"),
    ("user reasoning", users(message(Reasoning("r"))), "users[0].content[0]"),
    ("user tool call", users(message(ToolCall("c", "n", "{}"))), "users[0].content[0]"),
    ("user phase", users(message(Text("u", "final_answer"))), "users[0].content[0].text.phase"),
    ("image uri", users(message(Image("", ""))), "users[0].content[0].image.uri"),
    ("image data", users(message(Image("data:nope", ""))), "users[0].content[0].image.uri"),
    (
        "image type",
        users(message(Image("data:image/png;base64,AAAA", "image/gif"))),
        "users[0].content[0].image.media_type",
    ),
    ("output admission", previous("", assistant=assistant()), "previous_output.admission_id"),
    ("output empty", previous(), "previous_output.assistant"),
    (
        "output role",
        previous(assistant=user("x")),
        "previous_output.assistant.role",
    ),
    (
        "output call twice",
        previous(assistant=assistant("x", "c1", "c1")),
        "previous_output.assistant.content",
    ),
    (
        "output answer twice",
        previous(tool_results=(result("c1"), result("c1"))),
        "previous_output.tool_results[1].call_id",
    ),
    (
        "output error result",
        previous(tool_results=(ToolResult("c1", (), is_error=True),)),
        "previous_output.tool_results[0].content",
    ),
    ("output usage", previous(usage=Usage(-1, 0, 0, 0)), "previous_output.usage.input_tokens"),
]


@pytest.mark.parametrize(
    ("change", "field"), [pytest.param(c, f, id=name) for name, c, f in BAD_INPUT]
)
async def test_bad_input_is_refused_by_name_and_touches_nothing(
    app: App, change: Change, field: str
) -> None:
    sid, admission_id = await app.busy()
    command = change(app.admit_command(sid, "C", "new user", step=3))
    if command.previous_output is not None and command.previous_output.admission_id:
        command = replace(
            command, previous_output=replace(command.previous_output, admission_id=admission_id)
        )
    error = await app.refused(sid, InvalidArgument, call(app, command))
    assert (error.field, error.reason) == (field, "INVALID_FIELD")
    assert error.metadata["field"] == field
    # Still serving the session: the call without the mistake goes through.
    assert (await app.admit(sid, "C", "new user", step=3)).revision == 4


@pytest.mark.parametrize(
    ("request_id", "field"), [("r" * 129, "request_id"), ("r\x00", "request_id")]
)
async def test_a_bad_request_id_is_refused_by_name(app: App, request_id: str, field: str) -> None:
    sid, _ = await app.busy()
    error = await app.refused(
        sid, InvalidArgument, call(app, app.admit_command(sid, "C", "u"), request_id)
    )
    assert error.field == field


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("validate_only", [False, True])
async def test_new_content_over_the_response_bound_is_refused_before_it_is_counted(
    monkeypatch: pytest.MonkeyPatch, streamed: bool, validate_only: bool
) -> None:
    async def counted(*args: Any) -> Any:
        raise AssertionError("counted")

    limits = replace(Limits(), max_response_bytes=1000, max_streamed_response_bytes=2000)
    app = App.build(limits=limits)
    sid = await app.create()
    monkeypatch.setattr(admit_module, "counted_ahead", counted)
    command = app.admit_command(
        sid,
        "P",
        "x" * 1500,
        "y" * 1000,
        validate_only=validate_only,
        delivery=Delivery(streamed=streamed),
    )
    error = await app.refused(sid, ResponseTooLarge, call(app, command))
    bound = "max_streamed_response_bytes" if streamed else "max_response_bytes"
    assert error.metadata == {"bound": bound, "limit": str(getattr(limits, bound)), "value": "2500"}
    assert ("StreamAdmit" in error.message) is not streamed  # the way out of the unary bound


# ---- the session and its revision ------------------------------------------------------------


async def test_an_unknown_session_is_not_found_and_nothing_is_created(app: App) -> None:
    error = await app.refused(
        "nope", SessionNotFound, call(app, app.admit_command("nope", "P", "u"))
    )
    assert error.metadata == {"session_id": "nope"}
    await app.create("other")
    with pytest.raises(SessionNotFound):  # another tenant's session is not found either
        await handlers.admit(app.deps, "u", app.admit_command("other", "P", "u"), None)


async def test_a_stale_expected_revision_is_aborted_and_the_current_one_passes(app: App) -> None:
    sid, _ = await app.busy()
    command = app.admit_command(sid, "C", "u", expected_revision=2)
    error = await app.refused(sid, RevisionMismatch, call(app, command))
    assert error.metadata == {"expected_revision": "2", "actual_revision": "3"}
    assert (await app.admit(sid, "C", "u", expected_revision=3)).revision == 4


# ---- idempotent retries --------------------------------------------------------------------


async def test_a_retry_replays_the_first_bytes_and_commits_nothing(app: App) -> None:
    sid, _ = await app.busy()
    command = app.admit_command(sid, "C", "u", wire_format=WireFormat.OPENAI_CHAT)
    first = await call(app, command, "r1")
    assert first.result is not None and first.encoded is not None
    before = await app.observe(sid)
    again = await call(app, command, "r1")
    assert again.result is None and again.encoded == first.encoded
    assert await app.observe(sid) == before


async def test_a_streamed_response_is_hashed_from_its_encoding_on() -> None:
    """A streamed call's SHA-256 (a chunk carries it) is begun once the response is encoded,
    so it runs while the commit's round trip does; a unary call's is never taken, a replay's
    is left to the edge, and a call cancelled at its commit leaves no task behind (its hash,
    small here, is done by then)."""
    hooks = Cancelling("", Phase.COMMIT)
    app = App.build(hooks=hooks)
    sid, _ = await app.busy()
    command = app.admit_command(sid, "C", "u", delivery=Delivery(streamed=True))
    streamed = await call(app, command, "r1")
    assert streamed.sha256 is not None and streamed.encoded is not None
    assert await streamed.sha256 == hashlib.sha256(streamed.encoded).digest()
    assert (await call(app, command, "r1")).sha256 is None  # replayed
    unary = await call(app, replace(command, delivery=Delivery(), step=2), "r2")
    assert unary.encoded is not None and unary.sha256 is None
    hooks.target = ("Admit", Phase.COMMIT)
    before = await app.observe(sid)
    await app.refused(sid, asyncio.CancelledError, call(app, replace(command, step=3), "r3"))
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert await app.observe(sid) == before


async def test_a_rebuilt_response_that_differs_from_the_first_is_never_sent(app: App) -> None:
    """The replay checks the rebuilt bytes against the digest its recipe keeps (XXH3 now,
    SHA-256 in recipes stored before): a stored head changed under it is refused (INTERNAL),
    whichever digest the recipe holds."""
    sid, _ = await app.busy()
    command = app.admit_command(sid, "C", "u", wire_format=WireFormat.OPENAI_CHAT)
    first = await call(app, command, "r1")
    responses = app.storage.state.responses[("t", sid)]
    record = responses["r1"]
    assert record.derived_request is not None
    recipe = codec.loads(record.derived_request)
    sha256_recipe = {k: v for k, v in recipe.items() if k != "response_xxh3_128"}
    sha256_recipe["response_sha256"] = hashlib.sha256(first.encoded).hexdigest()
    for stored in (recipe, sha256_recipe):
        responses["r1"] = replace(record, derived_request=codec.dumps(stored))
        assert (await call(app, command, "r1")).encoded == first.encoded
        responses["r1"] = replace(
            record, response=record.response + b"\x08\x01", derived_request=codec.dumps(stored)
        )
        with pytest.raises(ReplayMismatch):
            await call(app, command, "r1")


async def test_a_retry_replays_each_view_and_format_after_later_steps_and_a_compaction(
    app: App,
) -> None:
    """The stored recipe rebuilds a FULL or a DELTA response in any wire format byte for byte,
    from the surface's nodes and, once a compaction shadowed them, from the log; a Reconcile's
    too."""
    sid = await app.create()
    await app.admit(sid, "A", "one")
    sent: list[tuple[AdmitCommand, str, bytes]] = []
    selection = RequestSelection()
    formats = (WireFormat.NEUTRAL, WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES)
    for turn, wire in enumerate(formats, start=2):
        command = app.admit_command(
            sid, "B" * turn, f"step {turn}", turn=turn, wire_format=wire, selection=selection
        )
        reply = await call(app, command, f"r{turn}")
        assert reply.result.request.view is (RequestView.FULL if turn == 2 else RequestView.DELTA)
        sent.append((command, f"r{turn}", reply.encoded))
        selection = delta(reply.result)
    retry = ReconcileCommand(sid, reply.result.admission_id, REPLACE)
    reconciled = await handlers.reconcile(app.deps, TENANT, retry, key("rc"))
    await app.admit(sid, "D", "later", turn=5)
    await app.compact_all(sid)
    before = await app.observe(sid)
    for command, request_id, encoded in sent:
        again = await call(app, command, request_id)
        assert again.result is None and again.encoded == encoded
    again = await handlers.reconcile(app.deps, TENANT, retry, key("rc"))
    assert again.result is None and again.encoded == reconciled.encoded
    assert await app.observe(sid) == before


async def test_a_request_id_reused_for_another_body_or_method_is_refused(app: App) -> None:
    sid, admission_id = await app.busy()
    await call(app, app.admit_command(sid, "C", "u"), "r1")
    other_body = handlers.admit(app.deps, TENANT, app.admit_command(sid, "C", "u"), key("r1", b"x"))
    error = await app.refused(sid, RequestIdReused, other_body)
    assert error.metadata == {"request_id": "r1"}
    record = RecordCommand(sid, admission_id, usage=Usage(1, 1, 0, 0))
    await app.refused(sid, RequestIdReused, handlers.record(app.deps, TENANT, record, key("r1")))


async def test_a_request_id_past_its_retention_runs_again() -> None:
    app = App.build(idempotency_retention_seconds=0.0)
    sid = await app.create()
    command = app.admit_command(sid, "P", "u")
    first = await call(app, command, "r1")
    again = await call(app, command, "r1")  # expired when read: executed anew, stored anew
    assert again.result is not None
    assert again.result.admission_id != first.result.admission_id
    assert (await app.info(sid)).revision == 2
    assert list(app.storage.state.responses[("t", sid)]) == ["r1"]


async def test_a_refused_call_leaves_its_request_id_free(app: App) -> None:
    sid = await app.create()
    admission_id = (await app.admit(sid, "A", "hello")).admission_id
    await app.record(sid, admission_id, assistant("calling", "c1"))
    command = app.admit_command(sid, "A", "next")
    await app.refused(sid, UnansweredToolCall, call(app, command, "r1"))
    answered = RecordCommand(sid, admission_id, tool_results=(result("c1"),))
    corrected = replace(command, previous_output=answered)
    ran = await handlers.admit(app.deps, TENANT, corrected, key("r1", b"the corrected body"))
    assert ran.result is not None and ran.result.revision == 4


async def test_validate_only_neither_replays_nor_stores_a_request_id(app: App) -> None:
    sid = await app.create()
    command = app.admit_command(sid, "P", "u")
    dry = await call(app, replace(command, validate_only=True), "r1")
    assert dry.result is not None and dry.encoded is None
    real = await call(app, command, "r1")  # the key was not taken by the dry run
    assert real.result is not None and real.result.revision == 1
    dry_again = await call(app, replace(command, validate_only=True), "r1")
    assert dry_again.result is not None  # answered anew, on the session as it is now
    assert dry_again.result.revision == 1 and dry_again.result.commits == ()


# ---- validate_only ---------------------------------------------------------------------------


async def test_validate_only_answers_what_the_call_would_and_commits_nothing(app: App) -> None:
    sid, _ = await app.busy()
    command = app.admit_command(sid, "C", "u", step=3, route=REPLACE)
    before = await app.observe(sid)
    dry = (await call(app, replace(command, validate_only=True))).result
    assert await app.observe(sid) == before
    assert dry.admission_id == "" and dry.revision == 3
    real = (await call(app, command)).result
    assert real.revision == 4
    assert (dry.commits, dry.user_seqs, dry.header, dry.context) == (
        real.commits,
        real.user_seqs,
        real.header,
        real.context,
    )
    assert list(dry.request.messages) == list(real.request.messages)
    assert dry.request.digest == real.request.digest and dry.forecast == real.forecast


async def test_validate_only_refuses_what_the_call_would(app: App) -> None:
    sid, _ = await app.busy()
    await app.record(
        sid, (await app.admit(sid, "B", "x", step=3)).admission_id, assistant("a", "c2")
    )
    command = app.admit_command(sid, "B", "u", validate_only=True)
    await app.refused(sid, UnansweredToolCall, call(app, command))


# ---- previous_output: Record and Admit in one transaction -------------------------------------


def comparable(events: tuple[Event, ...]) -> list[Event]:
    return [replace(event, admission_id="") for event in events]


async def test_one_call_leaves_what_record_then_admit_leaves(app: App) -> None:
    first_a = (await app.admit(await app.create("two"), "A", "hello")).admission_id
    first_b = (await app.admit(await app.create("one"), "A", "hello")).admission_id
    recorded = await app.record("two", first_a, **_fields(output("two", first_a)))
    separate = await app.admit("two", "A", "and now?")
    combined = await app.admit("one", "A", "and now?", previous_output=output("one", first_b))

    assert separate.recorded is None and combined.recorded == recorded
    assert combined.revision == separate.revision == 3
    assert combined.user_seqs == separate.user_seqs and combined.log_seq == separate.log_seq
    assert list(combined.request.messages) == list(separate.request.messages)
    assert combined.request.digest == separate.request.digest
    assert combined.forecast == separate.forecast
    assert comparable(await app.events("one")) == comparable(await app.events("two"))
    ledgers = [
        (await handlers.inspect(app.deps, TENANT, sid, WireFormat.NEUTRAL)).ledger
        for sid in ("two", "one")
    ]
    assert [(e.attempt, e.forecast, e.observed) for e in ledgers[0]] == [
        (e.attempt, e.forecast, e.observed) for e in ledgers[1]
    ]
    # The usage landed on the admission it answers.
    assert ledgers[1][0].admission_id == first_b
    assert ledgers[1][0].observed == Usage(1200, 40, 1000, 0)
    assert ledgers[1][1].observed is None


def _fields(command: RecordCommand) -> dict[str, Any]:
    return {
        "reply": command.assistant,
        "results": command.tool_results,
        "usage": command.usage,
    }


async def test_the_loop_goes_on_one_call_per_step(app: App) -> None:
    sid = await app.create()
    admission_id = (await app.admit(sid, "A", "hello")).admission_id
    for step in range(1, 4):
        step_output = output(sid, admission_id, f"c{step}")
        admitted = await app.admit(sid, "A", f"step {step}", step=step, previous_output=step_output)
        assert admitted.recorded is not None
        assert admitted.recorded.assistant_seq is not None
        assert admitted.recorded.assistant_seq < admitted.user_seqs[0]
        admission_id = admitted.admission_id
    assert (await app.info(sid)).revision == 1 + 3 * 2


@pytest.mark.parametrize(
    ("bad", "error", "field"),
    [
        (lambda aid: output("s", "no-such-admission"), AdmissionNotFound, None),
        (
            lambda aid: output("s", aid, "c9", tool_results=(result("nobody-asked"),)),
            UnknownToolCall,
            "previous_output.tool_results[0].call_id",
        ),
        (
            lambda aid: output("s", aid, "c1"),  # c1 was made and answered in the first step
            InvalidArgument,
            "previous_output.assistant.content",
        ),
    ],
    ids=["unknown admission", "unknown tool call", "taken tool call id"],
)
async def test_an_output_refused_against_the_session_commits_nothing(
    app: App, bad: Callable[[str], RecordCommand], error: type[DomainError], field: str | None
) -> None:
    sid, admission_id = await app.busy()
    command = app.admit_command(sid, "B", "u", step=3, previous_output=bad(admission_id))
    refused = await app.refused(sid, error, call(app, command))
    if field is not None:
        assert refused.metadata["field"] == field
    else:
        assert refused.metadata == {"admission_id": "no-such-admission"}


async def test_an_admission_refused_after_its_output_records_no_output(app: App) -> None:
    """The output is valid and written inside the transaction; the admission after it fails
    (an Anthropic Messages body cannot carry a system update right after an assistant turn):
    the output is not committed either."""
    sid = await app.create()
    admission_id = (await app.admit(sid, "A", "hello")).admission_id
    command = app.admit_command(
        sid,
        "A changed prompt",
        wire_format=WireFormat.ANTHROPIC_MESSAGES,
        previous_output=RecordCommand(sid, admission_id, assistant("done")),
    )
    error = await app.refused(sid, WireFormatError, call(app, command))
    assert error.reason == "UNSUPPORTED_WIRE_CONTENT"
    assert error.metadata["wire_format"] == "WIRE_FORMAT_ANTHROPIC_MESSAGES"
    # The same step with a user after the update can be expressed.
    admitted = await app.admit(
        sid,
        "A changed prompt",
        "next",
        wire_format=WireFormat.ANTHROPIC_MESSAGES,
        previous_output=RecordCommand(sid, admission_id, assistant("done")),
    )
    assert admitted.revision == 3


async def test_expected_revision_and_the_request_id_hold_for_the_whole_call(app: App) -> None:
    sid = await app.create()
    admission_id = (await app.admit(sid, "A", "hello")).admission_id
    command = app.admit_command(
        sid, "A", "next", previous_output=output(sid, admission_id), expected_revision=0
    )
    await app.refused(sid, RevisionMismatch, call(app, command))
    command = replace(command, expected_revision=1)
    first = await call(app, command, "r1")
    assert first.result.recorded.revision == 2 and first.result.revision == 3
    before = await app.observe(sid)
    again = await call(app, command, "r1")
    assert again.encoded == first.encoded and await app.observe(sid) == before
    assert command.previous_output is not None
    changed = replace(
        command, previous_output=replace(command.previous_output, usage=Usage(1200, 41, 1000, 0))
    )
    changed_key = handlers.admit(app.deps, TENANT, changed, key("r1", b"another digest"))
    await app.refused(sid, RequestIdReused, changed_key)


async def test_validate_only_with_an_output_answers_both_and_commits_nothing(app: App) -> None:
    sid = await app.create()
    admission_id = (await app.admit(sid, "A", "hello")).admission_id
    command = app.admit_command(sid, "A", "next", previous_output=output(sid, admission_id))
    before = await app.observe(sid)
    dry = (await call(app, replace(command, validate_only=True))).result
    assert await app.observe(sid) == before
    assert dry.admission_id == "" and dry.recorded is not None
    real = (await call(app, command)).result
    assert dry.recorded == real.recorded
    assert list(dry.request.messages) == list(real.request.messages)


# ---- tool calls ------------------------------------------------------------------------------


async def test_no_step_is_admitted_while_a_tool_call_is_unanswered(app: App) -> None:
    sid = await app.create()
    admission_id = (await app.admit(sid, "A", "hello")).admission_id
    await app.record(sid, admission_id, assistant("calling", "c1", "c2"))
    error = await app.refused(sid, UnansweredToolCall, call(app, app.admit_command(sid, "A", "u")))
    assert error.reason == "UNANSWERED_TOOL_CALL"
    assert error.metadata == {"call_id": "c1", "unanswered": "2"}
    answers = RecordCommand(sid, admission_id, tool_results=(result("c1"),))
    still_open = app.admit_command(sid, "A", "u", previous_output=answers)
    await app.refused(sid, UnansweredToolCall, call(app, still_open))
    both = RecordCommand(sid, admission_id, tool_results=(result("c2"), result("c1")))
    admitted = await app.admit(sid, "A", "u", previous_output=both)
    assert admitted.recorded is not None and admitted.recorded.tool_result_seqs == (5, 6)


# ---- the projection: how the prompt enters the surface -------------------------------------

# Each: a second step after a first on prompt "A" (route as named): the commits it makes,
# its header (reason, series start), whether it logs a context, the cache forecast's reason,
# the replace generation after it, and where the prompt in force is.
PROJECTIONS = [
    ("same prompt", IN_HISTORY, {}, [], None, False, "none", 0, "head"),
    ("in history", IN_HISTORY, {"prompt": "B"}, ["append"], None, False, "none", 0, "in_history"),
    (
        "replaced",
        REPLACE,
        {"prompt": "B"},
        ["replace"],
        ("series", True),
        False,
        "series_start",
        1,
        "head",
    ),
    (
        "declared series",
        IN_HISTORY,
        {"prompt": "B", "starts_request_series": True},
        ["replace"],
        ("series", True),
        False,
        "series_start",
        1,
        "head",
    ),
    (
        "cleared",
        IN_HISTORY,
        {"prompt": ""},
        ["replace"],
        ("series", True),
        False,
        "series_start",
        1,
        "none",
    ),
    ("resume", IN_HISTORY, {"resume": True}, [], ("resume", False), False, "none", 0, "head"),
    (
        "config",
        IN_HISTORY,
        {"config": (("t", "1"),)},
        [],
        ("change", False),
        False,
        "none",
        0,
        "head",
    ),
    (
        "tools",
        IN_HISTORY,
        {"tools": (READ,)},
        [],
        ("change", True),
        False,
        "tools_changed",
        0,
        "head",
    ),
    (
        "model",
        IN_HISTORY,
        {"route": RouteRequest("deepseek", "other", 128_000)},
        [],
        ("change", False),
        True,
        "model_changed",
        0,
        "head",
    ),
    (
        "window",
        IN_HISTORY,
        {"route": RouteRequest("deepseek", "deepseek-flash", 64_000)},
        [],
        None,
        True,
        "none",
        0,
        "head",
    ),
]


@pytest.mark.parametrize(
    ("route", "second", "ops", "header", "context", "reason", "generation", "location"),
    [pytest.param(*case[1:], id=case[0]) for case in PROJECTIONS],
)
async def test_each_step_logs_what_the_rule_decided(
    app: App,
    route: RouteRequest,
    second: dict[str, Any],
    ops: list[str],
    header: tuple[str, bool] | None,
    context: bool,
    reason: str,
    generation: int,
    location: str,
) -> None:
    sid = await app.create()
    first = await app.admit(sid, "A", "hello", route=route)
    assert [(c.seq, c.commit.op.value) for c in first.commits] == [(0, "append")]
    assert first.header is not None and first.header.reason.value == "initial"
    assert first.context is not None and first.forecast.divergence_reason.value == "first_request"
    kwargs = {"route": route, **second}
    prompt = kwargs.pop("prompt", "A")
    admitted = await app.admit(sid, prompt, "again", step=2, **kwargs)

    assert [c.commit.op.value for c in admitted.commits] == ops
    got = (admitted.header.reason.value, admitted.header.starts_series) if admitted.header else None
    assert got == header
    assert admitted.starts_series is (header is not None and header[1])
    assert (admitted.context is not None) is context
    assert admitted.forecast.divergence_reason.value == reason
    assert admitted.effective_prompt.text == prompt
    assert admitted.effective_prompt.location == location
    # What it logged: the commits, the user, the header and the context, in that order.
    logged = (await app.events(sid))[first.log_seq :]
    kinds = [event.kind for event in logged]
    assert kinds == [
        *[EventKind.SYSTEM_MESSAGE] * len(ops),
        EventKind.USER_MESSAGE,
        *[EventKind.REQUEST_HEADER] * (header is not None),
        *[EventKind.REQUEST_CONTEXT] * context,
    ]
    assert admitted.user_seqs == (logged[len(ops)].seq,)
    assert {event.admission_id for event in logged} == {admitted.admission_id}
    info = await app.info(sid)
    assert (info.revision, info.event_count, info.replace_generation) == (
        2,
        admitted.log_seq,
        generation,
    )
    assert admitted.request.messages[-1] == user("again")


async def test_each_replacement_moves_the_replace_generation(app: App) -> None:
    sid = await app.create()
    generations = []
    for step, prompt in enumerate(["A", "B", "B", "C", ""], start=1):
        await app.admit(sid, prompt, f"u{step}", step=step, route=REPLACE)
        generations.append((await app.info(sid)).replace_generation)
    assert generations == [0, 1, 1, 2, 3]


# ---- the derived request: DELTA against a held prefix ---------------------------------------


async def test_a_delta_carries_only_what_follows_the_held_prefix_and_chains_its_digest(
    app: App,
) -> None:
    sid = await app.create()
    first = await app.admit(sid, "A", "one")
    assert first.request.view is RequestView.FULL and first.request.total_messages == 2
    await app.record(sid, first.admission_id, assistant("look", "c1"), (result("c1"),))
    second = await app.admit(sid, "B", "two", selection=delta(first))
    assert second.request.view is RequestView.DELTA
    assert second.request.first_message_index == 2 and second.request.total_messages == 6
    assert [m.role for m in second.request.messages] == [
        Role.ASSISTANT,
        Role.TOOL,
        Role.SYSTEM,
        Role.USER,
    ]
    assert second.forecast.reused_messages == 2

    full = await app.admit(sid, "B")  # FULL of the same state: the prefix, then the tail
    assert full.request.view is RequestView.FULL
    assert list(full.request.messages) == [*first.request.messages, *second.request.messages]
    nothing_new = await app.admit(sid, "B", selection=delta(full))
    assert nothing_new.request.view is RequestView.DELTA
    assert list(nothing_new.request.messages) == []
    assert nothing_new.request.digest == full.request.digest


@pytest.mark.parametrize("how", ["wrong digest", "wrong count", "stale prefix", "anthropic"])
async def test_a_prefix_the_service_cannot_verify_gets_a_full_request(app: App, how: str) -> None:
    sid = await app.create()
    first = await app.admit(sid, "A", "one")
    second = await app.admit(sid, "A", "two")
    held = delta(second)
    count, digest = second.request.total_messages, second.request.digest
    wire = WireFormat.NEUTRAL
    if how == "wrong digest":
        held = RequestSelection(RequestView.DELTA, HeldPrefix(count, b"x" * 32))
    elif how == "wrong count":
        held = RequestSelection(RequestView.DELTA, HeldPrefix(count - 1, digest))
    elif how == "stale prefix":
        held = delta(first)
    else:
        # The prefix held is of a NEUTRAL response: nothing says an Anthropic body continues it.
        wire = WireFormat.ANTHROPIC_MESSAGES
    third = await app.admit(sid, "A", "three", selection=held, wire_format=wire)
    assert third.request.view is RequestView.FULL
    assert third.request.first_message_index == 0 and third.request.total_messages == 4


async def test_after_a_replacement_the_next_request_is_full(app: App) -> None:
    sid = await app.create()
    first = await app.admit(sid, "A", "one", route=REPLACE)
    second = await app.admit(sid, "B", "two", route=REPLACE, selection=delta(first))
    assert second.request.view is RequestView.FULL  # the head was rewritten
    assert [m.text for m in second.request.messages] == ["B", "one", "two"]
    assert second.forecast.reused_messages == 0
    third = await app.admit(sid, "B", "three", route=REPLACE, selection=delta(second))
    assert third.request.view is RequestView.DELTA
    await app.compact_all(sid)
    after = await app.admit(sid, "B", "four", route=REPLACE, selection=delta(third))
    assert after.request.view is RequestView.FULL
    assert after.forecast.divergence_reason.value == "series_start"
    assert after.forecast.reused_messages == 1  # the head


async def test_a_full_request_over_the_bound_is_refused_and_its_delta_answers() -> None:
    app = App.build(limits=replace(Limits(), max_response_bytes=4096))
    sid = await app.create()
    first = await app.admit(sid, "P", "a" * 1500)
    second = await app.admit(sid, "P", "b" * 1500, selection=delta(first))
    error = await app.refused(
        sid, ResponseTooLarge, call(app, app.admit_command(sid, "P", "c" * 1500))
    )
    assert "REQUEST_VIEW_DELTA" in error.message
    assert error.metadata["bound"] == "max_response_bytes"
    third = await app.admit(sid, "P", "c" * 1500, selection=delta(second))
    assert third.request.view is RequestView.DELTA
    assert list(third.request.messages) == [user("c" * 1500)]


# ---- what a session and a tenant may hold ----------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "error", "bound"),
    [
        ({"max_session_surface_bytes": 2000}, SessionSurfaceBytesExceeded, "bytes"),
        ({"max_session_surface_nodes": 6}, SessionSurfaceNodesExceeded, "nodes"),
    ],
)
async def test_a_session_stops_growing_at_its_bound_and_compaction_frees_room(
    limit: dict[str, int], error: type[DomainError], bound: str
) -> None:
    app = App.build(limits=replace(Limits(), **limit))
    sid = await app.create()
    step = 0
    while True:
        step += 1
        command = app.admit_command(sid, "You are terse.", "x" * 300, turn=step)
        try:
            await call(app, command)
        except error:
            break
        assert step < 50, "the bound never applied"
    refused = await app.refused(sid, error, call(app, command))
    assert refused.metadata["bound"] == f"max_session_surface_{bound}"
    assert int(refused.metadata["value"]) > int(refused.metadata["limit"])
    assert "compact" in refused.message
    assert (await app.info(sid)).revision == step - 1
    # A compaction shrinks the surface: always allowed; then the session grows again.
    await app.compact_all(sid)
    assert (await app.admit(sid, "You are terse.", "again", turn=step)).revision == step + 1


async def test_the_stored_bytes_quota_refuses_a_step_that_would_pass_it() -> None:
    app = App.build(quotas=Quotas(stored_bytes=5000, usage_refresh_seconds=0))
    sid = await app.create()
    await app.admit(sid, "P", "x" * 2000)
    error = await app.refused(
        sid, StoredBytesQuotaExceeded, call(app, app.admit_command(sid, "P", "y" * 4000))
    )
    assert error.metadata["quota"] == "stored_bytes" and error.metadata["limit"] == "5000"
    assert (await app.admit(sid, "P", "z" * 100)).revision == 2  # a small one still fits


# ---- wire formats and token prices ---------------------------------------------------------


async def test_content_a_wire_format_cannot_express_is_refused(app: App) -> None:
    sid = await app.create()
    image = message(Image("data:image/bmp;base64,AAAA", ""))
    command = app.admit_command(sid, "P", wire_format=WireFormat.OPENAI_CHAT)
    command = replace(command, users=(image,))
    error = await app.refused(sid, WireFormatError, call(app, command))
    assert error.reason == "UNSUPPORTED_WIRE_CONTENT"
    neutral = await call(app, replace(command, wire_format=WireFormat.NEUTRAL))
    assert neutral.result.request.messages[-1] == image


async def test_a_change_of_route_family_prices_every_node_with_the_new_tokenizer(
    app: App,
) -> None:
    """DeepSeek, then Claude, then DeepSeek again: each time the surviving nodes are priced
    again, and the forecast (which extends the previous request's stored price) agrees with
    Inspect's breakdown."""
    sid = await app.create()
    text = "\u4f60\u597d\uff0c\u4e16\u754c\u3002" * 40
    claude = RouteRequest("anthropic", "claude-test", 200_000)
    seen = []
    for step, route in enumerate((IN_HISTORY, claude, IN_HISTORY), start=1):
        admitted = await app.admit(sid, text, f"step {step}", step=step, route=route)
        breakdown = (await handlers.inspect(app.deps, TENANT, sid, WireFormat.NEUTRAL)).breakdown
        assert admitted.forecast.total_tokens == breakdown.total_tokens
        seen.append((breakdown.tokenizer, breakdown.system_tokens))
    assert [name for name, _ in seen] == ["deepseek-v4", "claude", "deepseek-v4"]
    assert seen[0] == seen[2] and seen[0][1] != seen[1][1]


# A call that commits nothing — a validate_only dry run, a call cancelled at Phase.COMMIT —
# takes nothing of the stored-bytes quota (found writing these tests: the check used to count
# the call's bytes as stored before the commit, until the next refresh of the usage).
async def test_a_dry_run_takes_nothing_of_the_stored_bytes_quota() -> None:
    app = App.build(quotas=Quotas(stored_bytes=5000, usage_refresh_seconds=3600))
    sid = await app.create()
    command = app.admit_command(sid, "P", "x" * 1500)  # about half the quota in the log
    for _ in range(3):  # the second dry run is refused: the first one's bytes "are stored"
        dry = await call(app, replace(command, validate_only=True))
        assert dry.result.revision == 0
    assert (await call(app, command)).result.revision == 1


async def test_a_cancelled_call_takes_nothing_of_the_stored_bytes_quota() -> None:
    hooks = Cancelling("Admit", Phase.COMMIT)
    app = App.build(quotas=Quotas(stored_bytes=5000, usage_refresh_seconds=3600), hooks=hooks)
    sid = await app.create()
    command = app.admit_command(sid, "P", "x" * 1500)
    await app.refused(sid, asyncio.CancelledError, call(app, command))
    hooks.target = ("", Phase.COMMIT)  # no more cancellations
    assert (await call(app, command)).result.revision == 1
    assert (await call(app, app.admit_command(sid, "P", "y"))).result.revision == 2
