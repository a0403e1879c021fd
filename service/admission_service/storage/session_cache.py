"""A worker's recently written sessions, so a step on one of them costs one round trip.

A step needs more than the session row: the domain's ``SessionAggregate``
(``domain/aggregate.py``: system nodes, open calls, the frames since the previous request, the
last admission). Read from PostgreSQL, that is a round trip before the transition can run;
kept here from the step before, it is none, and the step's writes and ``COMMIT`` travel alone
(``transactions.py``).

Nothing here is trusted: an entry carries the session row's ``row_version`` (migration 0008),
and the step's ``UPDATE`` of the row fails unless the row is at that version, in the same
statement as the step's other writes, so a step on a stale entry fails whole and runs again on
a fresh read (``failures.SessionMoved``). Each lifetime of a session id starts its versions at
random (``session_rows.first_row_version``), so an entry for a session another replica deleted
never matches the session created under its id after. An entry is taken out for the step
that uses it and put back only by a commit (what the commit left) or a rollback that checked
it (``validate_only``): a failed or cancelled step leaves none, and the next one reads afresh.

The entry a commit leaves is the aggregate the step saved (``SessionRepository.save``): the
use case moved it through the domain's transitions, so storage follows no rule of its own.

The cache is bounded in entries and in bytes (least recently used first out); affinity at
the balancer (docs/SCALING.md) makes its hits likely, never its correctness.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import dataclass

from admission_service.domain.aggregate import SessionAggregate
from admission_service.storage.rows import StoredInputs

SessionKey = tuple[str, str]  # (tenant, session_id)

# What an entry costs beyond the bytes it holds (the objects themselves), for the bound.
_ENTRY_OVERHEAD = 2048


@dataclass(frozen=True, slots=True)
class CachedSession:
    """A session's aggregate as its last commit in this worker left it, and the row version
    that commit left (what the next step's update checks)."""

    aggregate: SessionAggregate
    row_version: int
    # The aggregate's last admission with the digests naming its stored prompt and tools (so
    # the next admission sends neither when both are unchanged); None: not known here.
    inputs: StoredInputs | None = None

    def size(self) -> int:
        """Roughly the bytes the entry holds (its large values; the bound's unit)."""
        aggregate = self.aggregate
        held = sum(len(node.text) for node in aggregate.system_nodes)
        held += sum(len(call_id) for call_id in aggregate.open_calls)
        if aggregate.pending is not None:
            held += aggregate.pending.size
        if (admission := aggregate.admission) is not None:
            held += len(admission.rendered_prompt) + sys.getsizeof(admission.tools)
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
