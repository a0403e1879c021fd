"""What the inspector's pages show, built from the use cases' results (no I/O here).

* Chat: each surviving surface node at its surface position (what the model sees), the
  request headers where they were logged. A non-empty in-history prompt update is a collapsed
  "System prompt update" card; a header in the same turn and step does not repeat the prompt.
* Trajectory: one row per derived request (ListTrajectory's entries).
* Tokens: the breakdown, and the cache ledger as an inline SVG chart of the forecast reused
  tokens beside the cache reads the provider reported, per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from admission_service.app.commands import EventView
from admission_service.app.trajectory import TrajectoryEntry
from admission_service.domain.accounting import DivergenceReason
from admission_service.domain.events import Event, EventKind
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
)
from admission_service.domain.prompt_fold import (
    ChangeKind,
    PromptChange,
    PromptSnapshot,
    inspect_request_prompt,
)
from admission_service.domain.surface import SessionLog
from admission_service.domain.trajectory import HeaderFact, TrajectoryState, advance

ROLE_NAMES = {
    EventKind.USER_MESSAGE: "user",
    EventKind.ASSISTANT_MESSAGE: "assistant",
    EventKind.TOOL_RESULT: "tool",
    EventKind.COMPACTION_SUMMARY: "summary",
}


def message_text(message: Message) -> str:
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, Text):
            parts.append(block.text)
        elif isinstance(block, Reasoning):
            parts.append(f"[reasoning] {block.text}")
        elif isinstance(block, ToolCall):
            parts.append(f"[tool call {block.name} {block.call_id}] {block.arguments_json}")
        elif isinstance(block, ToolResult):
            inner = " ".join(message_text(Message(message.role, block.content)).split("\n"))
            parts.append(
                f"[tool result {block.call_id}{' error' if block.is_error else ''}] {inner}"
            )
        elif isinstance(block, Image):
            parts.append(f"[image {block.uri}]")
    return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class HeaderView:
    seq: int
    label: str  # the header reason, or "synthetic"
    route: str
    tools: str
    config: str
    starts_series: bool


def header_view(fact: HeaderFact) -> HeaderView:
    prompt = fact.prompt
    return HeaderView(
        fact.seq,
        "synthetic" if fact.reason is None else fact.reason.value,
        f"{prompt.provider}/{prompt.model}",
        ", ".join(tool.name for tool in prompt.tools) or "none",
        ", ".join(f"{key}={value}" for key, value in prompt.config) or "none",
        fact.starts_series,
    )


@dataclass(frozen=True, slots=True)
class ChatItem:
    """One card of the Chat view. ``kind``: system, update, message or header."""

    kind: str
    seq: int
    turn: int
    step: int
    role: str = ""
    text: str = ""
    header: HeaderView | None = None
    change: str = ""
    prompt: str | None = None  # a header's prompt card, when it changed the system prompt


def _header_item(
    event: Event, fact: HeaderFact, change: PromptChange | None, cards: set[tuple[int, int]]
) -> ChatItem:
    """A header card with its own change (Chat shows no change a header inherited from an
    update: the update's card already showed it)."""
    changed_system = change is not None and change.kind in (
        ChangeKind.INITIAL,
        ChangeKind.SYSTEM,
        ChangeKind.SYSTEM_AND_TOOLS,
    )
    # A prompt card (an update, or the head) in the same turn and step already shows it.
    show_prompt = changed_system and (event.turn, event.step) not in cards
    return ChatItem(
        "header",
        event.seq,
        event.turn,
        event.step,
        header=header_view(fact),
        change=change.kind.value.replace("_", " ") if change is not None else "",
        prompt=fact.prompt.system if show_prompt else None,
    )


def chat_items(views: Sequence[EventView]) -> list[ChatItem]:
    """The Chat view of a whole event log."""
    events = [view.event for view in views]
    log = SessionLog(events)
    state = TrajectoryState()
    facts: dict[int, HeaderFact] = {}
    own_changes: dict[int, PromptChange | None] = {}
    updates: set[tuple[int, int]] = set()  # the turns and steps that show an update card
    update_seqs: set[int] = set()
    for view in views:
        event = view.event
        if event.header is not None:
            previous = state.header
            own_changes[event.seq] = inspect_request_prompt(
                previous.prompt if previous is not None else None,
                event.header.header,
                event.header.reason,
                (event.seq, view.commit_time),
                state.fold.effective if state.fold is not None else None,
            ).change
        state = advance(state, event, view.commit_time)
        if event.kind is EventKind.REQUEST_HEADER and state.real is not None:
            facts[event.seq] = state.real
        introduced = state.fold.introduced if state.fold is not None else None
        fresh = introduced is not None and introduced.seq == event.seq
        if fresh and introduced is not None and introduced.update and introduced.text:
            updates.add((event.turn, event.step))
            update_seqs.add(event.seq)

    nodes: list[ChatItem] = []
    for seq in log.nodes:
        event = log.events[seq]
        if event.message is None:
            continue
        if event.is_system:
            if not event.message.text:
                continue  # an empty node is addressable but shows nothing
            kind = "update" if seq in update_seqs else "system"
            nodes.append(ChatItem(kind, seq, event.turn, event.step, text=event.message.text))
        else:
            role = ROLE_NAMES.get(event.kind, event.kind.value)
            text = message_text(event.message)
            nodes.append(ChatItem("message", seq, event.turn, event.step, role=role, text=text))

    cards = {(item.turn, item.step) for item in nodes if item.kind in ("system", "update")}
    headers = [
        _header_item(event, facts[event.seq], own_changes[event.seq], cards)
        for event in events
        if event.kind is EventKind.REQUEST_HEADER and event.seq in facts
    ]
    # Each header where it was logged: before the first surviving node committed after it.
    items: list[ChatItem] = []
    pending = iter(headers)
    upcoming = next(pending, None)
    for item in nodes:
        while upcoming is not None and upcoming.seq < item.seq:
            items.append(upcoming)
            upcoming = next(pending, None)
        items.append(item)
    while upcoming is not None:
        items.append(upcoming)
        upcoming = next(pending, None)
    return items


@dataclass(frozen=True, slots=True)
class TrajectoryRow:
    index: int
    admission: str
    attempt: int
    header: HeaderView | None
    prompt: str
    prompt_seq: int | None
    update: bool
    change: str
    previous_prompt: str | None
    previous_tools: str | None
    starts_series: bool
    forecast: str
    observed: str


def divergence_label(reason: DivergenceReason) -> str:
    """How a forecast's divergence reads: NONE means the previous request is a kept prefix."""
    return "prefix kept" if reason is DivergenceReason.NONE else reason.value.replace("_", " ")


def _tools(prompt: PromptSnapshot) -> str:
    return ", ".join(tool.name for tool in prompt.tools) or "none"


def trajectory_rows(entries: Sequence[TrajectoryEntry]) -> list[TrajectoryRow]:
    rows = []
    for entry in entries:
        point, ledger = entry.point, entry.ledger
        change = point.change
        previous = change.previous if change is not None else None
        forecast = ledger.forecast
        observed = (
            f"{ledger.observed.cache_read_tokens} cached / {ledger.observed.input_tokens} input"
            if ledger.observed is not None
            else "not recorded"
        )
        rows.append(
            TrajectoryRow(
                index=ledger.request_index,
                admission=ledger.admission_id[:12],
                attempt=ledger.attempt,
                header=header_view(point.header) if point.header is not None else None,
                prompt=point.effective.text if point.effective is not None else "",
                prompt_seq=point.effective.seq if point.effective is not None else None,
                update=point.effective.update if point.effective is not None else False,
                change=change.kind.value.replace("_", " ") if change is not None else "",
                previous_prompt=previous.system if previous is not None else None,
                previous_tools=_tools(previous) if previous is not None else None,
                starts_series=point.starts_series,
                forecast=(
                    f"{forecast.reused_tokens}/{forecast.total_tokens} tokens "
                    f"({divergence_label(forecast.divergence_reason)})"
                ),
                observed=observed,
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    value: int
    kind: str  # "forecast" or "observed"


@dataclass(frozen=True, slots=True)
class LedgerChart:
    """An SVG bar chart: per request, the forecast reused tokens and the observed cache reads."""

    width: int
    height: int
    top: int
    plot_height: int
    maximum: int
    bars: list[Bar] = field(default_factory=list)
    labels: list[tuple[float, str]] = field(default_factory=list)


def ledger_chart(entries: Sequence[TrajectoryEntry], *, height: int = 220) -> LedgerChart:
    top, bottom, left = 16, 28, 48
    plot_height = height - top - bottom
    slot = 34
    width = left + max(1, len(entries)) * slot + 16
    values = [e.ledger.forecast.reused_tokens for e in entries] + [
        e.ledger.observed.cache_read_tokens for e in entries if e.ledger.observed is not None
    ]
    maximum = max([1, *values])
    chart = LedgerChart(width, height, top, plot_height, maximum)
    for index, entry in enumerate(entries):
        x = left + index * slot + 4
        pairs: list[tuple[str, int | None]] = [
            ("forecast", entry.ledger.forecast.reused_tokens),
            (
                "observed",
                entry.ledger.observed.cache_read_tokens
                if entry.ledger.observed is not None
                else None,
            ),
        ]
        for offset, (kind, value) in enumerate(pairs):
            if value is None:
                continue
            bar_height = plot_height * value / maximum
            chart.bars.append(
                Bar(x + offset * 13, top + plot_height - bar_height, 12, bar_height, value, kind)
            )
        chart.labels.append((x + 12, str(entry.ledger.request_index)))
    return chart
