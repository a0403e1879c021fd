"""The reads of one session on the in-memory storage (``use_cases/inspect.py``): Inspect (what
the model sees and why: the derived request FULL or DELTA, the prompt in force and its nodes,
the token breakdown and its calibration, the ledger), ListEvents and ListTrajectory paging.
A read commits nothing; a bad page token or page size is refused by name."""

from __future__ import annotations

from dataclasses import replace

import pytest
from admission_service.app import handlers
from admission_service.app.commands import Delivery, RequestContent, RouteRequest, Usage
from admission_service.app.limits import Limits
from admission_service.app.use_cases.inspect import LEDGER_ROWS, SINCE_LAST_REQUEST
from admission_service.domain.errors import InvalidArgument, ResponseTooLarge, SessionNotFound
from admission_service.domain.messages import Tool
from admission_service.domain.session import HeldPrefix, RequestSelection, RequestView
from admission_service.domain.wire import WireFormat

from tests.unit.app.steps import TENANT, App, assistant

NEUTRAL = WireFormat.NEUTRAL
READ = Tool("read", "Read a file", '{"type":"object"}')


@pytest.fixture
def app() -> App:
    return App.build()


async def test_inspect_shows_the_request_the_prompt_its_nodes_and_the_breakdown(
    app: App,
) -> None:
    sid = await app.create()
    first = await app.admit(sid, "A", "one", tools=(READ,))
    second = await app.admit(sid, "B", "two", turn=2, tools=(READ,))
    before = await app.observe(sid)
    inspected = await handlers.inspect(app.deps, TENANT, sid, NEUTRAL)
    assert await app.observe(sid) == before  # a read
    assert inspected.session == before.info
    assert list(inspected.request.messages) == list(second.request.messages)
    assert inspected.request.digest == second.request.digest
    assert [(n.text, n.update, n.turn, n.seq) for n in inspected.system_nodes] == [
        ("A", False, 1, 0),
        ("B", True, 2, second.commits[0].seq),
    ]
    assert inspected.effective_prompt == second.effective_prompt
    assert inspected.series.last_header is not None
    assert inspected.series.last_header.header.tools == (READ,)
    breakdown = inspected.breakdown
    assert breakdown.tools_tokens > 0 and breakdown.system_tokens > 0
    assert breakdown.total_tokens == second.forecast.total_tokens
    assert [(e.admission_id, e.attempt) for e in inspected.ledger] == [
        (first.admission_id, 0),
        (second.admission_id, 0),
    ]


async def test_an_empty_session_is_inspected_too(app: App) -> None:
    sid = await app.create()
    inspected = await handlers.inspect(app.deps, TENANT, sid, WireFormat.OPENAI_CHAT)
    assert inspected.request.total_messages == 0 and inspected.ledger == ()
    assert (inspected.effective_prompt.text, inspected.effective_prompt.location) == ("", "none")
    assert inspected.breakdown.total_tokens == 0


async def test_inspect_finds_only_the_tenants_own_session(app: App) -> None:
    sid = await app.create()
    with pytest.raises(SessionNotFound):
        await handlers.inspect(app.deps, "u", sid, NEUTRAL)
    with pytest.raises(InvalidArgument) as bad:
        await handlers.inspect(app.deps, TENANT, "a b", NEUTRAL)
    assert bad.value.field == "session_id"


async def test_inspect_answers_a_delta_against_a_held_prefix_or_its_own_last_request(
    app: App,
) -> None:
    sid = await app.create()
    assert (
        await handlers.inspect(app.deps, TENANT, sid, NEUTRAL, SINCE_LAST_REQUEST)
    ).request.view is RequestView.FULL  # no request yet
    first = (await app.admit(sid, "A", "one")).request
    await app.record(sid, (await app.admit(sid, "A", "two")).admission_id, assistant("reply"))
    held = RequestSelection(RequestView.DELTA, HeldPrefix(first.total_messages, first.digest))
    inspected = await handlers.inspect(app.deps, TENANT, sid, NEUTRAL, held)
    # The caller's prefix is no longer the previous request: it gets the whole request.
    assert inspected.request.view is RequestView.FULL and inspected.request.total_messages == 4
    since = await handlers.inspect(app.deps, TENANT, sid, NEUTRAL, SINCE_LAST_REQUEST)
    assert since.request.view is RequestView.DELTA
    assert since.request.first_message_index == 3
    assert list(since.request.messages) == [assistant("reply")]
    assert since.request.digest == inspected.request.digest


async def test_a_body_the_wire_format_cannot_express_is_reported_not_raised(app: App) -> None:
    sid = await app.create()
    admission_id = (await app.admit(sid, "A", "one")).admission_id
    await app.record(sid, admission_id, assistant("done"))
    await app.admit(sid, "B")  # a system update right after an assistant turn
    inspected = await handlers.inspect(app.deps, TENANT, sid, WireFormat.ANTHROPIC_MESSAGES)
    error = inspected.request.render_error
    assert error is not None and error.reason == "UNSUPPORTED_WIRE_CONTENT"
    assert inspected.request.body_json == ""
    assert inspected.request.content is RequestContent.MESSAGES  # shown as its messages
    assert [m.text for m in inspected.request.messages] == ["A", "one", "done", "B"]
    chat = await handlers.inspect(app.deps, TENANT, sid, WireFormat.OPENAI_CHAT)
    assert chat.request.render_error is None and chat.request.body_json


async def test_a_full_inspect_over_the_response_bound_is_refused_and_its_delta_answers() -> None:
    app = App.build(limits=replace(Limits(), max_response_bytes=4096))
    sid = await app.create()
    held = RequestSelection()
    for step in (1, 2, 3):
        request = (await app.admit(sid, "P", str(step) * 1500, step=step, selection=held)).request
        held = RequestSelection(
            RequestView.DELTA, HeldPrefix(request.total_messages, request.digest)
        )
    with pytest.raises(ResponseTooLarge):
        await handlers.inspect(app.deps, TENANT, sid, NEUTRAL)
    inspected = await handlers.inspect(app.deps, TENANT, sid, NEUTRAL, held)
    assert inspected.request.view is RequestView.DELTA and list(inspected.request.messages) == []
    # A streamed read has the streamed bound.
    streamed = await handlers.inspect(
        app.deps, TENANT, sid, NEUTRAL, delivery=Delivery(streamed=True)
    )
    assert streamed.request.view is RequestView.FULL and len(streamed.request.messages) == 4


async def test_the_ledger_keeps_the_latest_requests_with_their_observed_usage(app: App) -> None:
    sid = await app.create()
    admitted = [await app.admit(sid, "A", f"u{n}", step=n) for n in range(LEDGER_ROWS + 2)]
    await app.record(sid, admitted[-1].admission_id, usage=Usage(10, 2, 5, 0))
    ledger = (await handlers.inspect(app.deps, TENANT, sid, NEUTRAL)).ledger
    assert len(ledger) == LEDGER_ROWS
    assert [entry.request_index for entry in ledger] == list(range(2, LEDGER_ROWS + 2))
    assert ledger[-1].observed == Usage(10, 2, 5, 0) and ledger[-1].drift_tokens == 5 - (
        ledger[-1].forecast.reused_tokens
    )
    assert all(entry.observed is None for entry in ledger[:-1])


@pytest.mark.parametrize(
    ("provider", "observed"), [("anthropic", 300 + 100 + 7), ("deepseek", 300)]
)
async def test_the_breakdown_calibrates_the_estimate_by_the_routes_provider(
    app: App, provider: str, observed: int
) -> None:
    """Anthropic reports cached input apart from input_tokens; DeepSeek (like OpenAI)
    includes it. Only the requests on the inspected route's provider count."""
    sid = await app.create()
    route = RouteRequest(provider, f"{provider}-model", 200_000)
    first = await app.admit(sid, "p", "question", route=route)
    await app.record(sid, first.admission_id, assistant("done"), usage=Usage(300, 5, 100, 7))
    other = await app.admit(sid, "p", "more", step=2, route=RouteRequest("mistral", "m", 1000))
    await app.record(sid, other.admission_id, usage=Usage(999, 1, 0, 0))
    await app.admit(sid, "p", "again", step=3, route=route)
    inspected = await handlers.inspect(app.deps, TENANT, sid, NEUTRAL)
    assert inspected.ledger[0].observed_input_ratio == pytest.approx(
        observed / first.forecast.total_tokens
    )
    calibration = inspected.breakdown.calibration
    assert calibration.requests == 1
    assert calibration.ratio == pytest.approx(observed / first.forecast.total_tokens)


# ---- ListEvents --------------------------------------------------------------------------------


async def test_events_page_by_count_and_by_bytes_an_oversized_one_alone() -> None:
    app = App.build(limits=replace(Limits(), max_events_page_bytes=2000))
    sid = await app.create()
    for step, size in enumerate([100, 700, 5000, 100, 900, 900], start=1):
        await app.admit(sid, "P", "u" * size, step=step)
    total = (await app.info(sid)).event_count
    seen, pages, token = [], 0, ""
    while True:
        page = await handlers.list_events(app.deps, TENANT, sid, 1000, token)
        assert page.items, "a page with a next token is never empty"
        texts = [v.event.message.text for v in page.items if v.event.message]
        if any(len(text) == 5000 for text in texts):
            assert len(page.items) == 1, "an event over the budget comes alone"
        seen += [view.event.seq for view in page.items]
        pages += 1
        if not (token := page.next_page_token):
            break
    assert seen == list(range(total)) and pages > 2
    first = await handlers.list_events(app.deps, TENANT, sid, 2, "")
    assert [v.event.seq for v in first.items] == [0, 1] and first.next_page_token


async def test_a_page_token_holds_only_for_the_session_and_the_read_it_was_issued_for(
    app: App,
) -> None:
    for sid in ("s", "other"):
        await app.create(sid)
        for step in (1, 2):
            await app.admit(sid, "P", f"u{step}", step=step)
    events = (await handlers.list_events(app.deps, TENANT, "s", 1, "")).next_page_token
    trajectory = (await handlers.list_trajectory(app.deps, TENANT, "s", 1, "")).next_page_token
    assert events and trajectory
    refusals = [
        handlers.list_events(app.deps, TENANT, "other", 1, events),
        handlers.list_events(app.deps, "u", "s", 1, events),
        handlers.list_events(app.deps, TENANT, "s", 1, trajectory),
        handlers.list_trajectory(app.deps, TENANT, "s", 1, events),
        handlers.list_trajectory(app.deps, TENANT, "other", 1, trajectory),
        handlers.list_events(app.deps, TENANT, "s", 1, "forged"),
        handlers.list_trajectory(app.deps, TENANT, "s", 1, "forged"),
    ]
    for refused in refusals:
        with pytest.raises(InvalidArgument) as raised:
            await refused
        assert raised.value.field == "page_token"
    for negative in (
        handlers.list_events(app.deps, TENANT, "s", -1, ""),
        handlers.list_trajectory(app.deps, TENANT, "s", -1, ""),
    ):
        with pytest.raises(InvalidArgument) as raised:
            await negative
        assert raised.value.field == "page_size"
    with pytest.raises(SessionNotFound):
        await handlers.list_events(app.deps, TENANT, "nope", 10, "")
    assert (await handlers.list_events(app.deps, TENANT, "s", 1, events)).items[0].event.seq == 1


async def test_a_provider_without_a_tokenizer_is_priced_by_the_heuristic(app: App) -> None:
    sid = await app.create()
    admitted = await app.admit(sid, "p" * 40, "u", route=RouteRequest("mistral", "m", 1000))
    breakdown = (await handlers.inspect(app.deps, TENANT, sid, NEUTRAL)).breakdown
    assert breakdown.tokenizer == "heuristic"
    assert breakdown.total_tokens == admitted.forecast.total_tokens
