"""The bounds on a worker's streamed responses (api/streaming.py), on their own: the budget of
bytes held while sending, and the stall that ends a stream whose caller stopped reading. Through
the real server and a real gRPC caller: tests/api/test_slow_readers.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from admission_service.api.streaming import (
    CHUNK_BYTES,
    StreamingBudget,
    StreamingBytesExhausted,
    StreamSender,
    StreamStalled,
)


class Caller:
    """A servicer context whose caller reads ``reads`` chunks, then stops reading: gRPC's
    ``write`` then never completes."""

    def __init__(self, reads: int) -> None:
        self.reads = reads
        self.written: list[bytes] = []

    async def write(self, chunk: bytes) -> None:
        if len(self.written) == self.reads:
            await asyncio.Event().wait()
        self.written.append(chunk)


def test_the_budget_holds_what_fits_and_gives_it_back() -> None:
    budget = StreamingBudget(10)
    with budget.holding(6):
        assert budget.held == 6
        with budget.holding(4):
            assert budget.held == 10
        with pytest.raises(RuntimeError), budget.holding(3):
            raise RuntimeError  # a stream that fails gives its bytes back too
    assert (budget.held, budget.exhausted) == (0, 0)


def test_a_response_over_what_is_left_is_refused_with_the_numbers() -> None:
    budget = StreamingBudget(10)
    with budget.holding(7):
        with pytest.raises(StreamingBytesExhausted) as refused, budget.holding(4):
            pass
        assert budget.held == 7
    assert refused.value.metadata == {"limit": "10", "held": "7", "value": "4"}
    assert refused.value.reason == "STREAMING_BYTES_EXHAUSTED"
    assert (budget.held, budget.exhausted) == (0, 1)


async def test_a_caller_that_reads_gets_every_chunk() -> None:
    budget = StreamingBudget(1 << 30)
    caller = Caller(reads=10)
    await StreamSender(budget, 1.0).send(_context(caller), b"x" * (3 * CHUNK_BYTES + 1), False)
    assert len(caller.written) == 4
    assert (budget.held, budget.stalled) == (0, 0)


async def test_a_caller_that_stops_reading_is_let_go() -> None:
    """The stream ends after the stall, with the bytes given back, however long the caller
    would have kept the connection."""
    budget = StreamingBudget(1 << 30)
    caller = Caller(reads=1)
    sender = StreamSender(budget, 0.05)
    with pytest.raises(StreamStalled) as stalled:
        await asyncio.wait_for(sender.send(_context(caller), b"x" * 3 * CHUNK_BYTES, True), 5)
    assert stalled.value.reason == "RESPONSE_STREAM_STALLED"
    assert stalled.value.metadata == {"stall_seconds": "0.05"}
    assert len(caller.written) == 1
    assert (budget.held, budget.stalled) == (0, 1)


def _context(caller: Caller) -> Any:
    return caller
