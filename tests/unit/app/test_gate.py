"""The per-session writer gate (``app/gate.py``) on its own: no entry kept after release or
cancellation; ``until_idle`` waits for the last writer. Under a real server:
``tests/api/test_session_gate.py``."""

from __future__ import annotations

import asyncio

import pytest
from admission_service.app.gate import SessionGate


async def test_the_gate_keeps_no_entry_once_released_or_cancelled() -> None:
    gate = SessionGate()
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with gate.hold("t", "s"):
            holding.set()
            await release.wait()

    holder = asyncio.ensure_future(hold())
    await holding.wait()
    waiter = asyncio.ensure_future(hold())
    await gate.until_writers("t", "s", 2)
    assert len(gate) == 1
    waiter.cancel()  # cancelled while queued
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release.set()
    await holder
    assert len(gate) == 0


async def test_until_idle_returns_when_the_last_writer_leaves() -> None:
    gate = SessionGate()
    await asyncio.wait_for(gate.until_idle(), 1)  # idle from the start
    release = asyncio.Event()

    async def hold(session_id: str) -> None:
        async with gate.hold("t", session_id):
            await release.wait()

    writers = [asyncio.ensure_future(hold(s)) for s in ("a", "b", "b")]
    await gate.until_writers("t", "b", 2)
    await gate.until_writers("t", "a", 1)
    idle = asyncio.ensure_future(gate.until_idle())
    # Showing that something does not happen takes a bound: it has 50 ms to return wrongly.
    done, _ = await asyncio.wait({idle}, timeout=0.05)
    assert not done
    release.set()
    await asyncio.wait_for(idle, 5)
    assert len(gate) == 0
    await asyncio.gather(*writers)
