"""ListTrajectory's use case: the ledger's requests joined with the prompt each saw.

Each ledger row keeps the session's event count when its request was derived (``log_seq``,
stored beside the forecast); the domain's trajectory fold (``domain/trajectory.py``) replays
the events that can change the prompt, header or context up to each position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from admission_service.app.commands import LedgerEntry
from admission_service.domain import codec
from admission_service.domain.events import Event
from admission_service.domain.trajectory import TrajectoryPoint, trajectory


@dataclass(frozen=True, slots=True)
class TrajectoryEntry:
    ledger: LedgerEntry
    log_seq: int
    point: TrajectoryPoint

    @property
    def request_index(self) -> int:
        return self.ledger.request_index


def request_log_seq(stored_forecast: bytes) -> int | None:
    """The log position stored with a ledger row; None for rows written before it was kept."""
    value = codec.loads(stored_forecast).get("log_seq")
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
