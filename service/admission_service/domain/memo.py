"""Values computed from what a harness sends every step, remembered within a byte budget.

A harness sends the same tool set (often tens of kilobytes of schemas) with every Admit, and
parsing, pricing and hashing it again each step would cost a large share of the step. What is
derived from it is remembered here, keyed by the input itself — but an input comes from a
caller, so the memory is bounded by the bytes of the inputs kept, not by their count: a
caller sending a new 30 MB tool set every call must not pin gigabytes (an entry-counted
``functools.lru_cache`` would). Least recently used first out. An input larger than an eighth
of the budget is not kept among them: only the last such input is, aside, and found by
equality (a memory compare of the strings it holds), not by hashing megabytes. A harness
sends the same large tool set every step, and computing what is derived from a 12 MiB set
(its JSON and digest, its schemas parsed) held the event loop ~100 ms a step; a caller
sending a new one every call pins one input.

Thread-safe: a large body is rendered in a thread while the event loop renders others.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    """``memo.get(key, size, compute)``: ``compute()`` remembered for ``key`` (an input of
    ``size`` bytes), within ``max_bytes`` of inputs."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = self.misses = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._oversized: tuple[K, V] | None = None  # the last input over an eighth, its value
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K, size: int, compute: Callable[[], V]) -> V:
        if not self.keeps(size):
            return self._oversized_get(key, compute)
        found = self._find(key)
        if found is not None:
            return found[0]  # which may be None: a check that passed
        value = compute()  # outside the lock: two threads may compute one value, both right
        self.remember(key, size, value)
        return value

    def lookup(self, key: K) -> V | None:
        """The value remembered for ``key``, or None (for values computed elsewhere, e.g. in a
        thread, then ``remember``-ed)."""
        found = self._find(key)
        return None if found is None else found[0]

    def holds(self, key: K, size: int) -> bool:
        """Whether ``get(key, size, ...)`` would find a value (hits and misses uncounted)."""
        if not self.keeps(size):
            last = self._oversized
            return last is not None and last[0] == key
        with self._lock:
            return key in self._entries

    def _find(self, key: K) -> tuple[V, int] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found

    def _oversized_get(self, key: K, compute: Callable[[], V]) -> V:
        last = self._oversized
        if last is not None and last[0] == key:  # compared, never hashed
            self.hits += 1
            return last[1]
        self.misses += 1
        value = compute()
        self._oversized = (key, value)
        return value

    def keeps(self, size: int) -> bool:
        """Whether an input of ``size`` bytes is remembered among the others (not over an eighth
        of the budget; a larger one only as the last of its kind, by ``get``)."""
        return size <= self.max_bytes // 8

    def remember(self, key: K, size: int, value: V) -> None:
        if not self.keeps(size):
            return
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (value, size)
                self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self.bytes -= evicted
