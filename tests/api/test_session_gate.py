"""Writers queued on one hot session hold no pool connection (SPEC §4: mutations of different
sessions never wait on each other), found by the reliability suite's contention scenario."""

from __future__ import annotations

import asyncio

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
