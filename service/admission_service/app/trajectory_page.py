"""ListTrajectory's use case: the ledger's requests joined with the prompt each saw.

Each ledger row keeps the session's event count when its request was derived (``log_seq``,
stored beside the forecast); the domain's trajectory fold (``domain/trajectory.py``) replays
the events that can change the prompt, header or context up to each position.

A page is *by reference*: an entry names the prompts and tool sets it saw by version
(``Versions``), and the page carries each distinct one once (``TrajectoryPage``). Every request
of a session with a 1 MiB tool set used to repeat it; now a page holds it once. A page is also
bounded in bytes (``bounded``, like ListEvents): its entries and the contents they bring, each
counted once, stay within the budget, except that the first entry always comes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from admission_service.app.commands import LedgerEntry, Page
from admission_service.domain.events import Event
from admission_service.domain.messages import Tool
from admission_service.domain.prompt_fold import PromptSnapshot
from admission_service.domain.trajectory import (
    TrajectoryPoint,
    prompt_version,
    tool_set_version,
    trajectory,
)

_Content = TypeVar("_Content", str, tuple[Tool, ...])
# Prompt texts and tool sets by version id.
_Contents = tuple[dict[str, str], dict[str, tuple[Tool, ...]]]

# Upper bounds of the encoded bytes of an entry besides its strings and the contents it names
# (numbers, times, flags, tags and length prefixes, version ids), so a page's estimate is never
# below what goes on the wire (tests/unit/app/test_trajectory_page.py checks it).
_ENTRY_BYTES = 384
_FACT_BYTES = 96
_SNAPSHOT_BYTES = 112
_CONFIG_PAIR_BYTES = 12
_CONTENT_BYTES = 64
_TOOL_BYTES = 24


@dataclass(frozen=True, slots=True)
class TrajectoryEntry:
    ledger: LedgerEntry
    log_seq: int
    point: TrajectoryPoint

    @property
    def request_index(self) -> int:
        return self.ledger.request_index


def request_log_seq(stored_forecast: Mapping[str, Any]) -> int | None:
    """The log position stored with a ledger row; None for rows written before it was kept."""
    value = stored_forecast.get("log_seq")
    return int(value) if value is not None else None


def _positions(
    requests: Sequence[tuple[LedgerEntry, int | None]], events: Sequence[tuple[Event, datetime]]
) -> list[int]:
    """Each request's log position. A row without one is placed after the last event its
    admission logged among ``events`` (never before the previous request)."""
    positions: list[int] = []
    for entry, log_seq in requests:
        floor = positions[-1] if positions else 0
        if log_seq is None:
            own = [event.seq + 1 for event, _ in events if event.admission_id == entry.admission_id]
            log_seq = max([floor, *own])
        positions.append(max(floor, log_seq))
    return positions


def trajectory_entries(
    requests: Sequence[tuple[LedgerEntry, int | None]],
    events: Sequence[tuple[Event, datetime]],
    *,
    since: int,
) -> tuple[TrajectoryEntry, ...]:
    """The entries of ``requests`` (consecutive, in order; ``since`` is the log position of
    the request before the first, 0 for none), folded over ``events``: every event that can
    change the prompt, header or context, in seq order, from the start of the log."""
    positions = _positions(requests, events)
    points = trajectory(events, positions, since=since)
    return tuple(
        TrajectoryEntry(entry, position, point)
        for (entry, _), position, point in zip(requests, positions, points, strict=True)
    )


def _snapshots(point: TrajectoryPoint) -> Iterator[PromptSnapshot]:
    """Every prompt state an entry carries: each fact's, each change's previous one."""
    facts = (point.header, *point.headers) if point.header is not None else point.headers
    changes = [fact.change for fact in facts]
    for fact in facts:
        yield fact.prompt
    for change in (*changes, point.change):
        if change is not None and change.previous is not None:
            yield change.previous


def _text_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _tools_bytes(tools: tuple[Tool, ...]) -> int:
    fields = (
        _text_bytes(t.name) + _text_bytes(t.description) + _text_bytes(t.parameters_json)
        for t in tools
    )
    return len(tools) * _TOOL_BYTES + sum(fields)


class Versions:
    """The version ids of the prompts and tool sets the entries of one page refer to, and the
    contents the page holds. The fold shares one text or tool tuple among every request that
    saw it, so each is hashed once, by identity (the memo keeps the object, so its id stays
    its own)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[object, str, int]] = {}
        self.prompts: dict[str, str] = {}
        self.tool_sets: dict[str, tuple[Tool, ...]] = {}

    def _known(
        self, value: _Content, version: Callable[[_Content], str], size: Callable[[_Content], int]
    ) -> tuple[str, int]:
        """``value``'s version id and encoded bytes."""
        hit = self._seen.get(id(value))
        if hit is None or hit[0] is not value:
            hit = (value, version(value), _CONTENT_BYTES + size(value))
            self._seen[id(value)] = hit
        return hit[1], hit[2]

    def prompt(self, text: str) -> str:
        """The version id of ``text`` ('' for no prompt)."""
        return self._known(text, prompt_version, _text_bytes)[0]

    def tool_set(self, tools: tuple[Tool, ...]) -> str:
        """The version id of ``tools`` ('' for none)."""
        return self._known(tools, tool_set_version, _tools_bytes)[0]

    def missing(self, point: TrajectoryPoint) -> tuple[_Contents, int]:
        """The prompts and tool sets ``point`` refers to that the page does not hold yet, and
        their bytes."""
        prompts: dict[str, str] = {}
        tool_sets: dict[str, tuple[Tool, ...]] = {}
        size = 0
        snapshots = list(_snapshots(point))
        texts = [snapshot.system for snapshot in snapshots]
        if point.effective is not None:
            texts.append(point.effective.text)
        for text in texts:
            version, bytes_ = self._known(text, prompt_version, _text_bytes)
            if version and version not in self.prompts and version not in prompts:
                prompts[version] = text
                size += bytes_
        for snapshot in snapshots:
            version, bytes_ = self._known(snapshot.tools, tool_set_version, _tools_bytes)
            if version and version not in self.tool_sets and version not in tool_sets:
                tool_sets[version] = snapshot.tools
                size += bytes_
        return (prompts, tool_sets), size

    def hold(self, contents: _Contents) -> None:
        prompts, tool_sets = contents
        self.prompts.update(prompts)
        self.tool_sets.update(tool_sets)


def _own_bytes(entry: TrajectoryEntry) -> int:
    """An entry's bytes without the contents it names."""
    point = entry.point
    facts = len(point.headers) + (point.header is not None)
    strings = sum(
        _SNAPSHOT_BYTES
        + _text_bytes(s.provider)
        + _text_bytes(s.model)
        + sum(_CONFIG_PAIR_BYTES + _text_bytes(k) + _text_bytes(v) for k, v in s.config)
        for s in _snapshots(point)
    )
    context = point.context
    route = _text_bytes(context.provider) + _text_bytes(context.model) if context else 0
    return _ENTRY_BYTES + facts * _FACT_BYTES + strings + route + len(entry.ledger.admission_id)


def bounded(
    entries: Sequence[TrajectoryEntry], versions: Versions, budget: int
) -> tuple[TrajectoryEntry, ...]:
    """The longest prefix of ``entries`` whose bytes, with each distinct content they name
    counted once, fit ``budget``; at least the first entry. ``versions`` collects the contents
    of the entries kept."""
    kept: list[TrajectoryEntry] = []
    used = 0
    for entry in entries:
        contents, size = versions.missing(entry.point)
        size += _own_bytes(entry)
        if kept and used + size > budget:
            break
        kept.append(entry)
        used += size
        versions.hold(contents)
    return tuple(kept)


@dataclass(frozen=True, slots=True)
class TrajectoryPage:
    """One page of a trajectory by reference: its entries (the fold's values, in full in
    memory; on the wire their prompts and tool sets are named by ``prompt_id``/``tool_set_id``),
    each distinct prompt text and tool set they refer to, once, by version id, and the next
    page token (empty on the last page). Its encoded size is within the page budget unless its
    one entry alone exceeds it."""

    items: tuple[TrajectoryEntry, ...]
    next_page_token: str
    prompts: Mapping[str, str]
    tool_sets: Mapping[str, tuple[Tool, ...]]
    versions: Versions

    @classmethod
    def of(cls, page: Page[TrajectoryEntry], versions: Versions) -> TrajectoryPage:
        return cls(page.items, page.next_page_token, versions.prompts, versions.tool_sets, versions)

    def prompt_id(self, text: str) -> str:
        """The version id of a prompt text an entry of the page carries ('' for none)."""
        return self.versions.prompt(text)

    def tool_set_id(self, tools: tuple[Tool, ...]) -> str:
        """The version id of a tool set an entry of the page carries ('' for none)."""
        return self.versions.tool_set(tools)
