"""Values computed from what a harness sends every step, remembered within a byte budget.

A harness sends the same tool set (often tens of kilobytes of schemas) with every Admit, and
parsing, pricing and hashing it again each step would cost a large share of the step. What is
derived from it is remembered here, keyed by the input itself — but an input comes from a
caller, so the memory is bounded by the bytes of the inputs kept, not by their count: a
caller sending a new 30 MB tool set every call must not pin gigabytes (an entry-counted
``functools.lru_cache`` would). Least recently used first out; an input larger than an eighth
of the budget is computed every time and never kept.

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
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K, size: int, compute: Callable[[], V]) -> V:
        found = self.lookup(key)
        if found is not None:
            return found
        value = compute()  # outside the lock: two threads may compute one value, both right
        self.remember(key, size, value)
        return value

    def lookup(self, key: K) -> V | None:
        """The value remembered for ``key``, or None (for values computed elsewhere, e.g. in a
        thread, then ``remember``-ed)."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found[0]

    def keeps(self, size: int) -> bool:
        """Whether an input of ``size`` bytes is remembered (not over an eighth of the budget)."""
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
