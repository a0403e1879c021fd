"""The reads the inspector pages with, on the in-memory storage: the ledger newest first and
the chat's window of events from the newest backwards."""

from __future__ import annotations

import pytest
from admission_service.app import handlers
from admission_service.app.commands import EventView
from admission_service.app.deps import Deps
from admission_service.app.use_cases.inspect import SINCE_LAST_REQUEST, ChatWindow
from admission_service.domain.errors import InvalidArgument
from admission_service.domain.session import RequestView
from admission_service.domain.wire import WireFormat
from admission_service.inspector.views import chat_items, chat_items_of_log, prompt_facts

from tests.app_support import user
from tests.fakes.storage import FakeStorage
from tests.unit.app.test_use_cases import admit, create, make_app


@pytest.fixture
def deps() -> Deps:
    return make_app(FakeStorage())


async def test_the_ledger_window_starts_at_the_latest_request_and_pages_backwards(
    deps: Deps,
) -> None:
    sid = await create(deps)
    for step in range(7):
        await admit(deps, sid, f"P{step % 2}", users=(user(f"u{step}"),))
    windows, token = [], ""
    while True:
        page = await handlers.ledger_window(deps, "t", sid, 3, token)
        windows.append([entry.request_index for entry in page.items])
        if not (token := page.next_page_token):
            break
    assert windows == [[4, 5, 6], [1, 2, 3], [0]]
    with pytest.raises(InvalidArgument, match="page_token"):
        await handlers.ledger_window(deps, "t", sid, 3, "forged")
    empty = await create(deps, "empty")
    assert (await handlers.ledger_window(deps, "t", empty, 3, "")).items == ()


async def all_events(deps: Deps, sid: str) -> list[EventView]:
    events: list[EventView] = []
    token = ""
    while True:
        page = await handlers.list_events(deps, "t", sid, 1000, token)
        events += page.items
        if not (token := page.next_page_token):
            return events


async def test_the_chat_window_opens_at_the_newest_events_and_pages_backwards(
    deps: Deps,
) -> None:
    sid = await create(deps)
    for step in range(12):
        await admit(deps, sid, f"P{step // 3}", users=(user(f"question {step}"),))
    logged = await all_events(deps, sid)
    windows: list[ChatWindow] = []
    token = ""
    while True:
        window = await handlers.chat_window(deps, "t", sid, 5, token, 1 << 20)
        windows.append(window)
        if not (token := window.next_page_token):
            break
    assert windows[0].events[-1].event.seq == logged[-1].event.seq  # the newest first
    assert all(len(window.events) <= 5 for window in windows)
    seen = [view.event.seq for window in reversed(windows) for view in window.events]
    assert seen == [view.event.seq for view in logged]  # every event once, none skipped
    # Shown window by window (oldest first), Chat is the whole log's Chat.
    paged = [
        (item.kind, item.seq)
        for window in reversed(windows)
        for item in chat_items(window.events, window.positions, prompt_facts(window.prompt_events))
    ]
    assert paged == [(item.kind, item.seq) for item in chat_items_of_log(logged)]
    assert any(kind == "update" for kind, _ in paged) and any(k == "header" for k, _ in paged)


async def test_a_chat_window_is_bounded_in_bytes_but_holds_at_least_the_newest_event(
    deps: Deps,
) -> None:
    sid = await create(deps)
    for step in range(4):
        await admit(deps, sid, "P", users=(user(f"{step} " + "x" * 2000),))
    window = await handlers.chat_window(deps, "t", sid, 100, "", 5000)
    sizes = [len(view.event.message.text) for view in window.events if view.event.message]
    assert 1 <= len(window.events) < 12 and sum(sizes) <= 5000 and window.next_page_token
    tiny = await handlers.chat_window(deps, "t", sid, 100, "", 1)
    assert len(tiny.events) == 1
    with pytest.raises(InvalidArgument, match="page_token"):
        await handlers.chat_window(deps, "t", sid, 5, "forged", 1 << 20)


async def test_sessions_newest_first_and_by_id_prefix_page_with_their_own_tokens(
    deps: Deps,
) -> None:
    for session_id in ("run-1", "run-2", "job-1", "run-3"):
        await create(deps, session_id)
    newest = await handlers.list_sessions(deps, "t", 2, "", newest_first=True)
    assert [s.session_id for s in newest.items] == ["run-3", "job-1"]
    older = await handlers.list_sessions(deps, "t", 2, newest.next_page_token, newest_first=True)
    assert [s.session_id for s in older.items] == ["run-2", "run-1"]
    runs = await handlers.list_sessions(deps, "t", 2, "", newest_first=True, id_prefix="run-")
    assert [s.session_id for s in runs.items] == ["run-3", "run-2"]
    more = await handlers.list_sessions(
        deps, "t", 2, runs.next_page_token, newest_first=True, id_prefix="run-"
    )
    assert [s.session_id for s in more.items] == ["run-1"]
    # A token is bound to its order and prefix: another listing refuses it.
    with pytest.raises(InvalidArgument, match="page_token"):
        await handlers.list_sessions(deps, "t", 2, runs.next_page_token, newest_first=True)
    with pytest.raises(InvalidArgument, match="page_token"):
        await handlers.list_sessions(deps, "t", 2, newest.next_page_token)
    with pytest.raises(InvalidArgument, match="id_prefix"):
        await handlers.list_sessions(deps, "t", 2, "", id_prefix="bad prefix%")


async def test_inspect_since_the_last_request_reads_no_surface_but_the_same_breakdown(
    deps: Deps,
) -> None:
    sid = await create(deps)
    for step in range(3):
        await admit(deps, sid, f"P{step}", users=(user("x" * 500),))
    full = await handlers.inspect(deps, "t", sid, WireFormat.NEUTRAL)
    since = await handlers.inspect(deps, "t", sid, WireFormat.NEUTRAL, SINCE_LAST_REQUEST)
    assert full.request.view is RequestView.FULL and len(full.request.messages) > 3
    assert since.request.view is RequestView.DELTA and len(since.request.messages) == 0
    assert (since.breakdown, since.effective_prompt) == (full.breakdown, full.effective_prompt)
