"""A worker's copies of the large frames it read or wrote, so a FULL read need not fetch them
again.

A session that reaches a million tokens holds most of its bytes in a few large nodes (tool
outputs of ~1 MB), or, once it is long, in the sealed chunks of its frames
(``frame_chunks.py``). Its FULL request is those bytes again on every step, and fetching 4.6 MB
from PostgreSQL is most of what a streamed FULL Admit costs beyond its transport (S7).

The copies are *parts* of the FULL read, by key (``frame_chunks.FULL_FRAMES``): a node's frame
by its seq, a chunk's frames by its first position (as ``-1 - first_position``). A node's frame
never changes once committed: its row is written once (a repricing rewrites only its price),
and a replacement or a compaction shadows nodes and writes new ones under new seqs (a
replacement reuses *positions*, never seqs). A chunk can be dropped and sealed again with other
frames, but never within one version of the session row (``frame_chunks.py``).

What keeps the copies honest is that version (migration 0008), the same check the session cache
rests on (``session_cache.py``): the copies are left by a commit and named by the version that
commit left, and a FULL read returns no bytes for a held key only when the row is at that
version *as the read itself sees it*. Any other state — another worker wrote the session, it
was deleted and created again (each lifetime starts its versions at random), a rollback gave a
seq to another node — and the read returns every byte. Only a commit leaves copies (never a
rolled-back read, whose own uncommitted nodes' seqs a later transaction may reuse): of what its
FULL read found and of the nodes it wrote, and only of parts of at least ``HELD_FRAME_MIN``
bytes, so the keys a read sends stay few.

The copies are bounded in bytes: past the bound, the least recently used session lets go of its
largest parts first (and goes once it has none); a session larger than the bound keeps its
smallest parts up to it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from admission_service.storage.session_cache import SessionKey

# The smallest part worth holding: sending its key with the read costs little against its
# bytes. A session's small nodes are held once sealed, a chunk of 256 of them at a time.
HELD_FRAME_MIN = 16 * 1024


@dataclass(frozen=True, slots=True)
class HeldSession:
    """A session's held parts by key, true while its row is at ``row_version``."""

    row_version: int
    parts: Mapping[int, bytes]
    size: int


NOT_HELD = HeldSession(-1, {}, 0)


class HeldFrames:
    """A worker's ``HeldSession`` per session, bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._sessions: OrderedDict[SessionKey, HeldSession] = OrderedDict()
        self.bytes = 0
        self.used = 0  # parts FULL reads took from here instead of fetching them

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, key: SessionKey) -> HeldSession:
        """``key``'s held parts (``NOT_HELD``: none), now the most recently used."""
        found = self._sessions.get(key)
        if found is None:
            return NOT_HELD
        self._sessions.move_to_end(key)
        return found

    def committed(
        self,
        key: SessionKey,
        read_version: int,
        found: Mapping[int, bytes] | None,
        written: Mapping[int, bytes],
    ) -> None:
        """A commit moved ``key``'s row from ``read_version`` one on: hold the large parts its
        FULL read ``found`` and the large nodes it ``written`` (by seq); with no FULL read, what
        was held at ``read_version`` still holds, now at the commit's version (the commit
        dropped chunks only if it replaced or repriced, and sealed none without a read)."""
        if found is None:
            held = self._sessions.get(key)
            found = held.parts if held is not None and held.row_version == read_version else {}
        self.put(key, read_version + 1, {**found, **written} if written else found)

    def put(self, key: SessionKey, row_version: int, parts: Mapping[int, bytes]) -> None:
        """Hold ``parts`` for ``key`` at ``row_version`` (what a commit left), instead of what
        was held for it; past the bound, the largest are not held."""
        self.evict(key)
        kept = _smallest_within(row_version, parts, self.max_bytes)
        if not kept.parts:
            return
        self._sessions[key] = kept
        self.bytes += kept.size
        while self.bytes > self.max_bytes:
            # The least recently used session lets go of its largest parts first, and stays the
            # oldest: what it keeps still holds at its version (a read fetches whatever a worker
            # does not hold), so a long session a few smaller ones pushed past the bound keeps
            # most of its parts.
            oldest, held = next(iter(self._sessions.items()))
            others = self.bytes - held.size
            kept = _smallest_within(held.row_version, held.parts, self.max_bytes - others)
            self.bytes = others + kept.size
            if kept.parts:
                self._sessions[oldest] = kept
            else:
                del self._sessions[oldest]

    def evict(self, key: SessionKey) -> None:
        self.bytes -= self._sessions.pop(key, NOT_HELD).size


def _smallest_within(row_version: int, parts: Mapping[int, bytes], budget: int) -> HeldSession:
    """The smallest of ``parts`` that fit in ``budget`` bytes together, at ``row_version``."""
    kept: dict[int, bytes] = {}
    size = 0
    for part, frames in sorted(parts.items(), key=lambda item: len(item[1])):
        if size + len(frames) > budget:
            break
        kept[part] = frames
        size += len(frames)
    return HeldSession(row_version, kept, size)
