"""What the inspector's pages show, built from the use cases' results (no I/O here).

* Chat: each surviving surface node at its surface position (what the model sees), the
  request headers where they were logged. A non-empty in-history prompt update is a collapsed
  "System prompt update" card; a header in the same turn and step does not repeat the prompt.
* Trajectory: one row per derived request (ListTrajectory's entries).
* Tokens: the breakdown, and the cache ledger as an inline SVG chart of the forecast reused
  tokens beside the cache reads the provider reported, per request.
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from admission_service.app.commands import EventView, LedgerEntry
from admission_service.app.trajectory_page import TrajectoryEntry
from admission_service.domain.accounting import DivergenceReason
from admission_service.domain.events import Append, Event, EventKind, Replace
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    ReasoningItem,
    RedactedReasoning,
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
        elif isinstance(block, RedactedReasoning):
            parts.append(f"[redacted reasoning {block.provider}]")
        elif isinstance(block, ReasoningItem):
            parts.append(f"[reasoning item {block.item_id}] {' '.join(block.summary)}")
        elif isinstance(block, ToolCall):
            parts.append(f"[tool call {block.name} {block.call_id}] {block.arguments_json}")
        elif isinstance(block, ToolResult):
            # The result's own lines stay lines (a listing, a diff, a stack trace).
            inner = message_text(Message(message.role, block.content))
            parts.append(
                f"[tool result {block.call_id}{' error' if block.is_error else ''}]\n{inner}"
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


@dataclass(frozen=True, slots=True)
class PromptFacts:
    """What the prompt fold says about the log's events: each real header's fact and its own
    change, and which system events are fresh in-history updates (shown as update cards)."""

    facts: Mapping[int, HeaderFact]
    changes: Mapping[int, PromptChange | None]
    updates: frozenset[int]


def prompt_facts(views: Iterable[EventView]) -> PromptFacts:
    """The fold over the log's events in order (all of them, or only those that can change the
    prompt: system messages, replacements, headers and contexts, as ``prompt_events`` reads)."""
    state = TrajectoryState()
    facts: dict[int, HeaderFact] = {}
    changes: dict[int, PromptChange | None] = {}
    updates: set[int] = set()
    for view in views:
        event = view.event
        if event.header is not None:
            previous = state.header
            changes[event.seq] = inspect_request_prompt(
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
        if (
            introduced is not None
            and introduced.seq == event.seq
            and introduced.update
            and introduced.text
        ):
            updates.add(event.seq)
    return PromptFacts(facts, changes, frozenset(updates))


def _node_item(event: Event, updates: frozenset[int], turn_step: tuple[int, int]) -> ChatItem:
    assert event.message is not None
    turn, step = turn_step
    if event.is_system:
        kind = "update" if event.seq in updates else "system"
        return ChatItem(kind, event.seq, turn, step, text=event.message.text)
    role = ROLE_NAMES.get(event.kind, event.kind.value)
    return ChatItem("message", event.seq, turn, step, role=role, text=message_text(event.message))


def chat_items(
    window: Sequence[EventView], positions: Mapping[int, int], facts: PromptFacts
) -> list[ChatItem]:
    """The Chat view of a window of consecutive events: its surviving nodes (``positions``:
    each surviving node's surface position, by seq) in surface order, and its request headers
    at their surface place.

    A header sits just before the first node *appended* after it: a replacement takes the
    position of the first node it shadowed (a head replacement is node 0 again, with a new
    seq), so ordering headers by seq against every node would put the headers of turns 2-3
    above turn 1's messages after one. A header with no node appended after it in the window
    comes at the window's end (the next window starts after it); one logged inside a run that a
    surviving replacement shadowed (a compaction's summarised requests) sits before it."""
    events = [view.event for view in window]
    nodes: list[ChatItem] = []
    anchors: list[int] = []  # the seqs of the window's surviving appended nodes, in order
    spans: list[tuple[int, int, int]] = []  # (first, last shadowed seq, seq) of a replacement
    last_step = (0, 0)
    for event in events:
        surviving = event.seq in positions and event.message is not None
        if event.kind is EventKind.COMPACTION_SUMMARY:
            # Compact takes no turn or step: the summary closes the step before it.
            turn_step = last_step
        else:
            turn_step = last_step = (event.turn, event.step)
        if not surviving or (event.is_system and not event.system_text):
            continue  # shadowed; or an empty node, addressable but showing nothing
        if isinstance(event.op, Append):
            anchors.append(event.seq)
        elif isinstance(event.op, Replace):
            spans.append((event.op.start_seq, event.op.end_seq, event.seq))
        nodes.append(_node_item(event, facts.updates, turn_step))
    nodes.sort(key=lambda item: positions[item.seq])

    cards = {(item.turn, item.step) for item in nodes if item.kind in ("system", "update")}
    before: dict[int, list[ChatItem]] = {}
    trailing: list[ChatItem] = []
    for event in events:
        if event.kind is not EventKind.REQUEST_HEADER or event.seq not in facts.facts:
            continue
        card = _header_item(event, facts.facts[event.seq], facts.changes.get(event.seq), cards)
        # A header logged inside a run a replacement shadowed (the requests a compaction
        # summarised) sits before that replacement, where its requests were.
        inside = [seq for first, last, seq in spans if first < event.seq < last]
        anchor = bisect.bisect_right(anchors, event.seq)
        if inside:
            before.setdefault(inside[0], []).append(card)
        elif anchor < len(anchors):
            before.setdefault(anchors[anchor], []).append(card)
        else:
            trailing.append(card)
    items: list[ChatItem] = []
    for item in nodes:
        items += before.get(item.seq, ())
        items.append(item)
    return items + trailing


def chat_items_of_log(views: Sequence[EventView]) -> list[ChatItem]:
    """The Chat view of a whole event log (folded in memory)."""
    log = SessionLog(view.event for view in views)
    positions = {seq: position for position, seq in enumerate(log.nodes)}
    return chat_items(views, positions, prompt_facts(views))


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
    diff: tuple[DiffLine, ...]  # the prompt against the previous one (empty: no previous)
    # The prompt's text is on the page only where it changed (and on the page's first row):
    # an unchanged prompt repeated on every row made 300 requests of an 8 KB prompt 2.7 MB.
    shows_prompt: bool
    starts_series: bool
    forecast: str
    observed: str
    # The page's text budget was spent before this row: its prompt and diff are left out (the
    # inspector ends the page before it, so that the next page starts with it).
    elided: bool = False

    @property
    def prompt_lines(self) -> int:
        return len(self.prompt.splitlines())


@dataclass(frozen=True, slots=True)
class DiffLine:
    """One line of a prompt diff: ``kind`` is added, removed, same (context) or gap (the
    unchanged lines left out between two changes)."""

    kind: str
    text: str


def prompt_diff(previous: str, current: str, *, context: int = 1) -> tuple[DiffLine, ...]:
    """The lines ``current`` added to and removed from ``previous``, each change with
    ``context`` unchanged lines around it; unchanged runs between changes are one gap line
    (how many lines it stands for). Equal prompts have no diff."""
    before, after = previous.splitlines(), current.splitlines()
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    lines: list[DiffLine] = []
    last_end = 0
    for group in matcher.get_grouped_opcodes(context):
        if (skipped := group[0][1] - last_end) > 0:
            lines.append(_gap(skipped))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += (DiffLine("same", line) for line in before[i1:i2])
                continue
            lines += (DiffLine("removed", line) for line in before[i1:i2])
            lines += (DiffLine("added", line) for line in after[j1:j2])
        last_end = group[-1][2]
    if lines and last_end < len(before):
        lines.append(_gap(len(before) - last_end))
    return tuple(lines)


def _gap(skipped: int) -> DiffLine:
    return DiffLine("gap", f"{skipped} unchanged line{'s' * (skipped != 1)}")


def divergence_label(reason: DivergenceReason) -> str:
    """How a forecast's divergence reads: NONE means the previous request is a kept prefix."""
    return "prefix kept" if reason is DivergenceReason.NONE else reason.value.replace("_", " ")


def _tools(prompt: PromptSnapshot) -> str:
    return ", ".join(tool.name for tool in prompt.tools) or "none"


def _text_bytes(lines: Iterable[str]) -> int:
    return sum(len(line.encode("utf-8", "surrogatepass")) for line in lines)


def trajectory_rows(
    entries: Sequence[TrajectoryEntry], *, text_budget: int | None = None
) -> list[TrajectoryRow]:
    """The rows of a page of the trajectory. ``text_budget`` bounds the prompt text and diff
    lines the page carries (60 changes of a 32 KB prompt on one page would be 2 MB): once it is
    spent, later rows are ``elided`` (no prompt, no diff). The first row always shows its
    prompt."""
    rows: list[TrajectoryRow] = []
    spent = 0
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
        current = point.effective.text if point.effective is not None else ""
        diff = prompt_diff(previous.system, current) if previous is not None else ()
        shows_prompt = not rows or (change is not None and (previous is None or bool(diff)))
        cost = _text_bytes(line.text for line in diff) + (
            _text_bytes((current,)) if shows_prompt else 0
        )
        elided = bool(rows) and text_budget is not None and spent + cost > text_budget
        if not elided:
            spent += cost
        rows.append(
            TrajectoryRow(
                index=ledger.request_index,
                admission=ledger.admission_id[:12],
                attempt=ledger.attempt,
                header=header_view(point.header) if point.header is not None else None,
                prompt=current,
                prompt_seq=point.effective.seq if point.effective is not None else None,
                update=point.effective.update if point.effective is not None else False,
                change=change.kind.value.replace("_", " ") if change is not None else "",
                previous_prompt=previous.system if previous is not None else None,
                previous_tools=_tools(previous) if previous is not None else None,
                diff=() if elided else diff,
                shows_prompt=shows_prompt and not elided,
                starts_series=point.starts_series,
                forecast=(
                    f"{forecast.reused_tokens}/{forecast.total_tokens} tokens "
                    f"({divergence_label(forecast.divergence_reason)})"
                ),
                observed=observed,
                elided=elided,
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class Link:
    label: str
    href: str
    kind: str  # what the link leads to: older, newer, first, latest


@dataclass(frozen=True, slots=True)
class Pager:
    """The links between the pages of one view, and what this page shows."""

    shown: str
    links: tuple[Link, ...] = ()


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


def ledger_chart(entries: Sequence[LedgerEntry], *, height: int = 220) -> LedgerChart:
    """The chart of a window of the ledger (its width grows with the window, not the session:
    the inspector pages the ledger, ``Reads.ledger_window``)."""
    top, bottom, left = 16, 28, 48
    plot_height = height - top - bottom
    slot = 34
    width = left + max(1, len(entries)) * slot + 16
    values = [e.forecast.reused_tokens for e in entries] + [
        e.observed.cache_read_tokens for e in entries if e.observed is not None
    ]
    maximum = max([1, *values])
    chart = LedgerChart(width, height, top, plot_height, maximum)
    for index, entry in enumerate(entries):
        x = left + index * slot + 4
        pairs: list[tuple[str, int | None]] = [
            ("forecast", entry.forecast.reused_tokens),
            ("observed", entry.observed.cache_read_tokens if entry.observed is not None else None),
        ]
        for offset, (kind, value) in enumerate(pairs):
            if value is None:
                continue
            bar_height = plot_height * value / maximum
            chart.bars.append(
                Bar(x + offset * 13, top + plot_height - bar_height, 12, bar_height, value, kind)
            )
        chart.labels.append((x + 12, str(entry.request_index)))
    return chart
