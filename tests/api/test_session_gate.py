"""Writers queued on one hot session hold no pool connection (SPEC §4: mutations of different
sessions never wait on each other), found by the reliability suite's contention scenario."""

from __future__ import annotations

import asyncio

import pytest
from admission_service.app.gate import SessionGate
from admission_service.app.hooks import Phase

from .guarantees_support import PausingHooks, admit_request, audit
from .support import StartApi, create_session


async def test_a_hot_session_does_not_take_every_connection(start_api: StartApi) -> None:
    hooks = PausingHooks()
    # Two connections: the first writer of `hot` holds one (paused at COMMIT with the row
    # lock); a second writer of `hot` must wait without taking the other one.
    client = await start_api(hooks=hooks, db_pool_size=2, db_max_overflow=0)
    stub = client.stub
    hot, other = await create_session(stub), await create_session(stub)
    hooks.arm("Admit", Phase.COMMIT)
    first = asyncio.ensure_future(stub.Admit(admit_request(hot, "A", "first")))
    await asyncio.wait_for(hooks.reached_phase.wait(), 10)
    second = asyncio.ensure_future(stub.Admit(admit_request(hot, "A", "second", step=1)))
    await asyncio.wait_for(client.server.deps.gate.until_writers("default", hot, 2), 10)
    # Without the gate this waits for a connection until the pool times out (10 s).
    await stub.Admit(admit_request(other, "A", "meanwhile"), timeout=5)
    hooks.release.set()
    assert {(await first).revision, (await second).revision} == {1, 2}
    await audit(stub, hot)


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
