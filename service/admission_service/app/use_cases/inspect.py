"""The reads of one session: Inspect (what the model sees and why), its events, its trajectory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from admission_service.app.commands import (
    DEFAULT_DELIVERY,
    Delivery,
    EventView,
    InspectResult,
    LedgerEntry,
    Page,
    SystemNodeView,
    session_info,
)
from admission_service.app.deps import Deps
from admission_service.app.derivation import derive_request
from admission_service.app.ledger import calibration_of, ledger_entry_of
from admission_service.app.pricing import counted_ahead
from admission_service.app.snapshot import PageCursor, snapshot
from admission_service.app.trajectory_page import (
    TrajectoryPage,
    Versions,
    bounded,
    request_log_seq,
    trajectory_entries,
)
from admission_service.domain.accounting import PricedNode, breakdown
from admission_service.domain.projection import SystemNode
from admission_service.domain.series import Route
from admission_service.domain.session import (
    FULL_VIEW,
    HeldPrefix,
    RequestSelection,
    RequestView,
)
from admission_service.domain.surface import effective_prompt
from admission_service.domain.wire import WireFormat

LEDGER_ROWS = 50
# A DELTA after the session's own last derived request: only what was appended since. For a
# reader that shows no request (the inspector's breakdown), so that Inspect reads none of a long
# surface (a 150 MB session's FULL request was refused as too large after reading it all).
SINCE_LAST_REQUEST = RequestSelection(RequestView.DELTA)


@dataclass(frozen=True, slots=True)
class ChatWindow:
    """A window of consecutive events, the newest first (the inspector's Chat), with what it
    takes to show them: the surface position of each of its surviving nodes, and every event
    up to the window's end that can change the prompt (the prompt fold gives its headers' facts
    and which system events are updates). ``next_page_token`` leads to the window before."""

    events: tuple[EventView, ...]
    positions: Mapping[int, int]
    prompt_events: tuple[EventView, ...]
    next_page_token: str


async def inspect(
    deps: Deps,
    tenant: str,
    session_id: str,
    wire: WireFormat,
    selection: RequestSelection = FULL_VIEW,
    delivery: Delivery = DEFAULT_DELIVERY,
) -> InspectResult:
    """What the model sees and why. Reads the session row, the system nodes and the ledger;
    the token breakdown comes from the session's running price, and only the derived request
    reads the surface (just the tail for a DELTA with a current held prefix); ``delivery``:
    which of its forms the result carries."""
    async with snapshot(deps, tenant, session_id) as (sessions, session):
        if selection is SINCE_LAST_REQUEST and session.prefix is not None:
            held = HeldPrefix(session.prefix.messages, session.prefix.digest)
            selection = RequestSelection(RequestView.DELTA, held)
        details = await sessions.system_node_details()
        series = session.series
        header = series.last_header
        tools = header.header.tools if header else ()
        context = series.last_context
        route = Route(
            context.context.provider if context else "",
            context.context.model if context else "",
            context.context.context_window if context else 0,
            in_history=context.context.in_history if context else False,
            tool_update=False,
        )
        derived = await derive_request(
            deps.limits,
            sessions,
            session,
            route,
            tools,
            wire,
            session.shadowed,
            selection,
            end_position=session.next_position,
            degrade=True,
            delivery=delivery,
        )
        ledger = tuple(ledger_entry_of(row) for row in await sessions.ledger(LEDGER_ROWS))
    # The session's tokenizer (``session_counter``), a large tool set counted off the loop.
    counter = await counted_ahead(route.provider, (), tools)
    system_nodes = tuple(
        SystemNodeView(
            row.seq, row.commit_time, row.turn, row.step, row.system_text.decode(), row.update
        )
        for row in details
    )
    return InspectResult(
        session=session_info(session),
        effective_prompt=effective_prompt(tuple(SystemNode(n.seq, n.text) for n in system_nodes)),
        system_nodes=system_nodes,
        request=derived.view,
        breakdown=breakdown(
            [PricedNode(row.seq, row.tokens, True) for row in details],
            tools,
            counter,
            total=session.surface_tokens,
            calibration=calibration_of(ledger, route.provider),
        ),
        series=series,
        ledger=ledger,
    )


async def list_events(
    deps: Deps, tenant: str, session_id: str, page_size: int, page_token: str
) -> Page[EventView]:
    await deps.page_tokens.ready()  # the stored keys, read once
    cursor = PageCursor.of(deps, "events", tenant, session_id, page_size, page_token)
    async with snapshot(deps, tenant, session_id) as (sessions, _):
        budget = deps.limits.max_events_page_bytes
        rows, more = await sessions.events_page(cursor.after, cursor.limit, budget)
    items = tuple(EventView(row.event(), row.commit_time) for row in rows)
    return cursor.page(deps, items, rows[-1].seq if more else None)


async def list_trajectory(
    deps: Deps, tenant: str, session_id: str, page_size: int, page_token: str
) -> TrajectoryPage:
    """One page of the session's derived requests with the prompt each saw (a read), by
    reference: each distinct prompt and tool set once, the page within
    ``max_trajectory_page_bytes``."""
    versions = Versions()
    await deps.page_tokens.ready()  # the stored keys, read once
    cursor = PageCursor.of(deps, "trajectory", tenant, session_id, page_size, page_token)
    after, limit = cursor.after, cursor.limit
    async with snapshot(deps, tenant, session_id) as (sessions, session):
        # The request before the page (if any) bounds what its first entry introduced.
        rows = list(await sessions.requests_from(max(after, 0), limit + 2))
        before = rows.pop(0) if after >= 0 and rows and rows[0].request_index == after else None
        more, rows = len(rows) > limit, rows[:limit]
        if not rows:
            return TrajectoryPage.of(cursor.page(deps, (), None), versions)
        requests = [(ledger_entry_of(row), request_log_seq(row.forecast_json())) for row in rows]
        ends = [seq for _, seq in requests if seq is not None]
        complete = len(ends) == len(requests)
        events = await sessions.prompt_events(max(ends) if complete else session.next_seq)
    since = request_log_seq(before.forecast_json()) if before is not None else 0
    folded = trajectory_entries(
        requests, [(row.event(), row.commit_time) for row in events], since=since or 0
    )
    entries = bounded(folded, versions, deps.limits.max_trajectory_page_bytes)
    more = more or len(entries) < len(folded)
    page = cursor.page(deps, entries, entries[-1].request_index if more else None)
    return TrajectoryPage.of(page, versions)


async def ledger_window(
    deps: Deps, tenant: str, session_id: str, page_size: int, page_token: str
) -> Page[LedgerEntry]:
    """The cache ledger newest first, a window of at most ``page_size`` requests in request
    order: the first page ends at the latest request, and each next page is the window before
    (the inspector's ledger chart; its page token is the window's first index)."""
    await deps.page_tokens.ready()  # the stored keys, read once
    cursor = PageCursor.of(deps, "ledger", tenant, session_id, page_size, page_token)
    before, limit = cursor.after, cursor.limit
    async with snapshot(deps, tenant, session_id) as (sessions, session):
        end = session.request_count if before < 0 else min(before, session.request_count)
        start = max(0, end - limit)
        rows = await sessions.requests_from(start, end - start) if end > start else ()
    entries = tuple(ledger_entry_of(row) for row in rows)
    return cursor.page(deps, entries, start if start > 0 else None)


async def chat_window(
    deps: Deps, tenant: str, session_id: str, page_size: int, page_token: str, budget: int
) -> ChatWindow:
    """At most ``page_size`` events and ``budget`` payload bytes (the newest always comes) just
    before the token's cursor, or the session's newest without one."""
    await deps.page_tokens.ready()  # the stored keys, read once
    cursor = PageCursor.of(deps, "chat", tenant, session_id, page_size, page_token)
    async with snapshot(deps, tenant, session_id) as (sessions, session):
        before = cursor.after
        end = session.next_seq if before < 0 else min(before, session.next_seq)
        rows, more = await sessions.events_before(end, cursor.limit, budget)
        if not rows:
            return ChatWindow((), {}, (), "")
        first = rows[0].seq
        positions = await sessions.surface_positions(first, end)
        prompt_events = tuple(
            EventView(row.event(), row.commit_time) for row in await sessions.prompt_events(end)
        )
    items = tuple(EventView(row.event(), row.commit_time) for row in rows)
    page = cursor.page(deps, items, first if more else None)
    return ChatWindow(page.items, positions, prompt_events, page.next_page_token)
