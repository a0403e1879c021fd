"""A worker's recently written sessions, so a step on one of them costs one round trip.

A step needs more than the session row: the surviving system nodes, the open tool calls, the
admission its previous output answers, the frames appended since the previous request. Read
from PostgreSQL, that is a round trip before the transition can run; kept here from the step
before, it is none, and the step's writes and ``COMMIT`` travel alone (``transactions.py``).

Nothing here is trusted: an entry carries the session row's ``row_version`` (migration 0008),
and the step's ``UPDATE`` of the row fails unless the row is at that version, in the same
statement as the step's other writes, so a step on a stale entry fails whole and runs again on
a fresh read (``failures.SessionMoved``). An entry is taken out for the step that uses it and
put back only by a commit (what the commit left) or a rollback that checked it
(``validate_only``): a failed or cancelled step leaves none, and the next one reads afresh.

``KnownSession`` is one transaction's view: started from an entry or a fresh read, moved by
every write the transaction makes, and turned into the next entry when it commits. A write it
cannot follow in memory (a replacement, a repricing) makes it ``lost``: the transaction reads
the database as before and its commit leaves no entry.

The cache is bounded in entries and in bytes (least recently used first out); affinity at
the balancer (docs/SCALING.md) makes its hits likely, never its correctness.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from admission_service.domain.events import Append, Event
from admission_service.domain.projection import SystemNode
from admission_service.domain.session import NO_FRAMES, Frames, Session, Written
from admission_service.domain.stored import AdmissionRecord, Growth
from admission_service.domain.surface import fold_system_nodes

SessionKey = tuple[str, str]  # (tenant, session_id)

# What an entry costs beyond the bytes it holds (the objects themselves), for the bound.
_ENTRY_OVERHEAD = 2048


@dataclass(frozen=True, slots=True)
class CachedSession:
    """A session as its last commit in this worker left it (see the module docstring).

    ``pending``: the frames of the message nodes at ``pending_from`` and after (appended since
    the previous request; ``pending_from`` is where it ended), None when not known."""

    session: Session
    row_version: int
    system_nodes: tuple[SystemNode, ...]
    open_calls: tuple[str, ...]
    pending_from: int
    pending: Frames | None
    admission: AdmissionRecord | None

    def size(self) -> int:
        """Roughly the bytes the entry holds (its large values; the bound's unit)."""
        held = sum(len(node.text) for node in self.system_nodes)
        held += sum(len(call_id) for call_id in self.open_calls)
        if self.pending is not None:
            held += len(self.pending.frames)
        if self.admission is not None:
            held += len(self.admission.rendered_prompt) + sys.getsizeof(self.admission.tools)
        return held + _ENTRY_OVERHEAD


class SessionCache:
    """A worker's ``CachedSession`` entries, least recently used first out, bounded in count
    and in bytes; an entry larger than an eighth of the byte bound is not kept."""

    def __init__(self, max_bytes: int, max_entries: int = 100_000) -> None:
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self._entries: OrderedDict[SessionKey, tuple[CachedSession, int]] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, key: SessionKey) -> CachedSession | None:
        """The entry for ``key``, removed: a step holds it until its end (``put``)."""
        found = self._entries.pop(key, None)
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        self.bytes -= found[1]
        return found[0]

    def put(self, key: SessionKey, entry: CachedSession) -> None:
        self.evict(key)
        size = entry.size()
        if size > self.max_bytes // 8:
            return
        self._entries[key] = (entry, size)
        self.bytes += size
        while self.bytes > self.max_bytes or len(self._entries) > self.max_entries:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.bytes -= dropped

    def evict(self, key: SessionKey) -> None:
        found = self._entries.pop(key, None)
        if found is not None:
            self.bytes -= found[1]


class KnownSession:
    """What one transaction knows of its session beyond the row, kept current by its writes
    (see the module docstring). ``lost`` once a write it cannot follow was made."""

    def __init__(self, entry: CachedSession) -> None:
        self.session = entry.session
        self.row_version = entry.row_version
        self.system_nodes = entry.system_nodes
        self.open_calls = list(entry.open_calls)
        self.pending_from = entry.pending_from
        self.pending = entry.pending
        self.admission = entry.admission
        self.lost = False
        self._saved = False
        self.made_calls: set[str] = set()  # the calls this transaction made

    @classmethod
    def read(
        cls,
        session: Session,
        row_version: int,
        system_nodes: tuple[SystemNode, ...],
        open_calls: Sequence[str],
        admission: AdmissionRecord | None,
    ) -> KnownSession:
        """From the session row and its indexed state as a fresh read found them. The frames
        since the previous request are known (none) only when nothing was appended since."""
        end = _request_end(session)
        pending = NO_FRAMES if session.next_position == end else None
        return cls(
            CachedSession(
                session, row_version, system_nodes, tuple(open_calls), end, pending, admission
            )
        )

    def frames_since_request(self, from_position: int, split_position: int | None) -> Frames | None:
        """The frames of a read from ``from_position`` when that is exactly the frames appended
        since the previous request and they are known; None: read them."""
        if self.lost or split_position is not None or from_position != self.pending_from:
            return None
        return self.pending

    def wrote(self, events: Iterable[Event], written: Written, calls: Mapping[str, int]) -> None:
        """After logging ``events`` that appended (``written``: their tail) and made
        ``calls`` (call id: the seq of the node making it)."""
        events = tuple(events)
        if written.shadowed is not None or not all(
            isinstance(event.op, Append) for event in events if event.op is not None
        ):
            self.lost = True
            return
        self.system_nodes = fold_system_nodes(self.system_nodes, events)
        self.open_calls += sorted(calls, key=lambda call_id: (calls[call_id], call_id))
        self.made_calls.update(calls)
        if self.pending is not None:
            tail = written.tail
            self.pending = Frames(
                self.pending.frames + tail.frames,
                self.pending.messages + tail.messages,
                self.pending.tokens + tail.tokens,
                0,
                0,
            )

    def answer(self, call_ids: Iterable[str]) -> bool:
        """Close ``call_ids`` if every one is open (made before this transaction or in it);
        False (nothing changed) otherwise: the database answers then."""
        call_ids = set(call_ids)
        if self.lost or not call_ids <= set(self.open_calls):
            return False
        self.open_calls = [call_id for call_id in self.open_calls if call_id not in call_ids]
        return True

    def admitted(self, admission: AdmissionRecord) -> None:
        self.admission = admission

    def attempted(self, admission_id: str) -> None:
        if self.admission is not None and self.admission.admission_id == admission_id:
            self.admission = replace(self.admission, attempts=self.admission.attempts + 1)

    def saved(self, session: Session) -> None:
        self.session, self._saved = session, True

    def committed(self, growth: Growth) -> CachedSession | None:
        """The entry the transaction leaves once committed (its row one version on if it was
        saved, its running sizes moved by ``growth``, as the row's UPDATE moved them); None
        when it made a write this view could not follow."""
        if self.lost:
            return None
        session = self.session
        if self._saved:
            session = replace(
                session,
                surface_bytes=session.surface_bytes + growth.surface_bytes,
                surface_nodes=session.surface_nodes + growth.surface_nodes,
                log_bytes=session.log_bytes + growth.log_bytes,
            )
        end = _request_end(session)
        pending: Frames | None = NO_FRAMES
        if session.next_position != end:
            # Appended since the previous request (a Record): still known if it was then.
            pending = self.pending if self.pending_from == end else None
        return CachedSession(
            session,
            self.row_version + 1 if self._saved else self.row_version,
            self.system_nodes,
            tuple(self.open_calls),
            end,
            pending,
            self.admission,
        )


def _request_end(session: Session) -> int:
    """Where the previous request ended (0 before the first): the frames appended since start
    there."""
    return session.prefix.end_position if session.prefix is not None else 0
