"""A transaction's deferred writes never hold the store they belong to.

A deferred write is a builder kept in the store's batch until the commit takes it. If the builder
held the store, the store, its batch and the builder would form a cycle, which only a full
collection frees. When the batch is never taken (a ``validate_only`` call, a refusal), that
cycle kept the call's state alive, and with it the aggregate the call saved and the frames of
its new messages. A worker admitting 15 MiB steps grew to 1.1 GiB in 60 calls
(docs/BENCHMARKS.md, tenth round). These tests leave writes deferred, never taken, with the
collector off, and check that the store is freed by reference counting alone.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import pytest
from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.projection import SystemNode
from admission_service.storage.repository import SessionStore

from tests.unit.domain.test_session import session


async def _save(store: SessionStore) -> None:
    await store.save(SessionAggregate.read(session(), (SystemNode(0, "be brief"),), (), None))


async def _count_attempt(store: SessionStore) -> None:
    await store.count_attempt("a1")


async def _observe_usage(store: SessionStore) -> None:
    await store.observe_usage("a1", {"input_tokens": 10})


async def _close_calls(store: SessionStore) -> None:
    await store.close_calls([("call-1", 7)])


@pytest.mark.parametrize("defer", [_save, _count_attempt, _observe_usage, _close_calls])
def test_a_store_with_writes_never_taken_is_freed_at_once(collector_off: None, defer: Any) -> None:
    store = SessionStore(object(), "tenant", "s")  # type: ignore[arg-type]
    store.read_version = 3
    asyncio.run(defer(store))
    assert store.checks_row or store.batch._writes, "nothing was deferred"
    freed = weakref.ref(store)
    del store
    assert freed() is None, "a deferred write holds its store"
