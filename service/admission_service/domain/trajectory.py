"""The trajectory: how the prompt in force evolved, request by request (design note,
"Presentation and accounting").

The log records a prompt in two ways. A ``request/header`` is a *real* header fact: it owns the
route, configuration and tools. An in-history prompt update is a system node appended after the
cached history with no header of its own, so the trajectory folds it into a *synthetic* header
fact (change kind ``system``, the previous header's route, configuration and tools with the new
prompt); later requests then show the effective prompt without a real header change. The state
a fact is compared with is the newer (by seq) of the preceding real and synthetic header: for
an A → B → C sequence of updates, C's previous prompt is B, not A. A real header that follows an
update reports no system change of its own (``inspect_request_prompt``), and one with no change
of its own inherits the update's change.

``trajectory`` folds the log once and reports, at each request's log position (the events that
request saw), the header fact in force, the facts introduced since the previous request, the
effective prompt and whether the request started a series.

``prompt_version`` and ``tool_set_version`` name a system prompt and a tool set by their
content (a hash), so a reader can carry each distinct one once and refer to it from every
request that saw it (ListTrajectory by reference).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from admission_service.domain.events import Append, Event, EventKind
from admission_service.domain.messages import Tool
from admission_service.domain.prompt_fold import (
    ChangeKind,
    PromptChange,
    PromptFoldState,
    PromptNode,
    PromptSnapshot,
    inspect_request_prompt,
    inspect_system_prompt,
)
from admission_service.domain.series import HeaderReason, RequestContext

# A version id is this many hex digits of a SHA-256: 128 bits, so two different contents of
# one session never share an id.
VERSION_HEX_DIGITS = 32
_LENGTH = struct.Struct(">Q")


def _version(kind: bytes, parts: Iterable[str]) -> str:
    digest = hashlib.sha256(kind)
    for part in parts:
        # Length-prefixed: ("ab", "c") and ("a", "bc") hash differently.
        data = part.encode("utf-8", "surrogatepass")
        digest.update(_LENGTH.pack(len(data)))
        digest.update(data)
    return digest.hexdigest()[:VERSION_HEX_DIGITS]


def prompt_version(text: str) -> str:
    """The version id of a system prompt's text; '' for no prompt (the empty text)."""
    return _version(b"prompt\x00", (text,)) if text else ""


def tool_set_version(tools: Sequence[Tool]) -> str:
    """The version id of a tool set (its tools in order, compared byte for byte); '' for
    none."""
    if not tools:
        return ""
    fields = (field for t in tools for field in (t.name, t.description, t.parameters_json))
    return _version(b"tools\x00" + _LENGTH.pack(len(tools)), fields)


@dataclass(frozen=True, slots=True)
class HeaderFact:
    """A real (``reason`` set) or synthetic (``reason`` None) request header fact."""

    seq: int
    time: datetime | None
    prompt: PromptSnapshot
    change: PromptChange | None
    reason: HeaderReason | None = None
    starts_series: bool = False

    @property
    def synthetic(self) -> bool:
        return self.reason is None


@dataclass(frozen=True, slots=True)
class TrajectoryState:
    """The fold's state after a prefix of the log."""

    fold: PromptFoldState | None = None
    real: HeaderFact | None = None
    synthetic: HeaderFact | None = None
    context: RequestContext | None = None

    @property
    def header(self) -> HeaderFact | None:
        """The header fact in force: the newer of the real and the synthetic one."""
        if self.synthetic is not None and (self.real is None or self.synthetic.seq > self.real.seq):
            return self.synthetic
        return self.real


def _synthetic_after(
    prior: TrajectoryState, fold: PromptFoldState, event: Event, time: datetime | None
) -> HeaderFact | None:
    """The synthetic header after a system message or replacement folded into ``fold``."""
    node = fold.effective
    if fold.uncertain:
        # The prompt is unknown: keep the real header's route and tools, with no prompt text.
        if prior.real is None:
            return None
        return HeaderFact(event.seq, time, replace(prior.real.prompt, system=""), None)
    before = prior.fold.effective if prior.fold is not None else None
    unchanged = node is None or (before is not None and node.text == before.text)
    introduced = fold.introduced
    # A head rewrite or reservation is followed by a real header in the same attempt, so it
    # needs no synthetic fact. One deliberate extension of the reference: a non-empty prompt
    # appended after an empty head on a continuing series is not an "update" (nothing was in
    # force) and no header follows it, so it too becomes a synthetic fact; otherwise later
    # requests would show no prompt in force.
    appended_first = introduced is not None and isinstance(event.op, Append) and node is introduced
    if unchanged or (introduced is not None and not introduced.update and not appended_first):
        return prior.synthetic
    assert node is not None
    previous = prior.header
    if previous is None:
        return None
    change = PromptChange(node.seq, node.time, ChangeKind.SYSTEM, previous.prompt)
    return HeaderFact(node.seq, node.time, replace(previous.prompt, system=node.text), change)


def _real_header(state: TrajectoryState, event: Event, time: datetime | None) -> HeaderFact:
    assert event.header is not None
    log = event.header
    newer = state.header
    system = state.fold.effective if state.fold is not None else None
    inspection = inspect_request_prompt(
        newer.prompt if newer is not None else None,
        log.header,
        log.reason,
        (event.seq, time),
        system,
    )
    change = inspection.change
    if change is None and newer is not None and newer.synthetic:
        change = newer.change
    return HeaderFact(event.seq, time, inspection.prompt, change, log.reason, log.starts_series)


def advance(state: TrajectoryState, event: Event, time: datetime | None) -> TrajectoryState:
    """Fold one event of the log (committed at ``time``)."""
    if event.kind is EventKind.REQUEST_HEADER:
        return replace(state, real=_real_header(state, event, time))
    if event.kind is EventKind.REQUEST_CONTEXT:
        assert event.context is not None
        return replace(state, context=event.context.context)
    fold = inspect_system_prompt(state.fold, event, time)
    if fold is state.fold or fold is None:
        return state
    return replace(state, fold=fold, synthetic=_synthetic_after(state, fold, event, time))


@dataclass(frozen=True, slots=True)
class TrajectoryPoint:
    """What one request saw, and what changed since the previous request."""

    header: HeaderFact | None
    headers: tuple[HeaderFact, ...]
    effective: PromptNode | None
    context: RequestContext | None
    starts_series: bool
    change: PromptChange | None


def request_change(
    before: PromptSnapshot | None, after: HeaderFact | None, facts: Sequence[HeaderFact]
) -> PromptChange | None:
    """A request's change against the previous request's prompt ``before``: what differs
    between the two (a transient state between them, such as a compaction's intermediate
    fallback, is not a change), anchored at the first change among the facts introduced
    since, or at the header in force."""
    if after is None:
        return None
    anchors = [fact.change for fact in facts if fact.change is not None]
    if before is None:
        return next((c for c in anchors if c.kind is ChangeKind.INITIAL), None)
    system = before.system != after.prompt.system
    tools = before.tools != after.prompt.tools
    if not system and not tools:
        return None
    if system and tools:
        kind = ChangeKind.SYSTEM_AND_TOOLS
    else:
        kind = ChangeKind.SYSTEM if system else ChangeKind.TOOLS
    seq, time = (anchors[0].seq, anchors[0].time) if anchors else (after.seq, after.time)
    return PromptChange(seq, time, kind, before)


def trajectory(
    events: Iterable[tuple[Event, datetime | None]],
    positions: Sequence[int],
    *,
    since: int = 0,
) -> tuple[TrajectoryPoint, ...]:
    """One point per request position (non-decreasing): the request saw the events with a seq
    below its position. ``since`` is the position of the request before the first one (0 for
    the session's first request): facts from there on count as introduced by the first.

    ``events`` must be in seq order and hold at least every event a position covers; events
    that cannot change the prompt, the header or the context may be left out.
    """
    state = TrajectoryState()
    points: list[TrajectoryPoint] = []
    pending: list[HeaderFact] = []
    before: PromptSnapshot | None = None
    remaining = iter(events)
    upcoming = next(remaining, None)
    # The first position replays up to ``since`` (the request before the page) only to learn
    # the prompt that request saw.
    for index, position in enumerate([since, *positions]):
        while upcoming is not None and upcoming[0].seq < position:
            event, time = upcoming
            after = advance(state, event, time)
            for fact in (after.real, after.synthetic):
                if fact is None or fact is state.real or fact is state.synthetic:
                    continue
                pending.append(fact)
            state = after
            upcoming = next(remaining, None)
        facts = tuple(sorted(pending, key=lambda fact: fact.seq))
        header = state.header
        if index:
            points.append(
                TrajectoryPoint(
                    header=header,
                    headers=facts,
                    effective=state.fold.effective if state.fold is not None else None,
                    context=state.context,
                    starts_series=any(fact.starts_series for fact in facts if not fact.synthetic),
                    change=request_change(before, header, facts),
                )
            )
        before = header.prompt if header is not None else None
        pending = []
    return tuple(points)
