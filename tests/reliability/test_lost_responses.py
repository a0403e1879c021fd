"""Scenario 4, lost responses: the client drops its connection right after sending a mutation
(at a random moment: before the server has it, while it runs, or after the commit while the
response is on its way; the server pauses a random moment after the commit to widen that
window). The harness then retries with the same ``request_id`` on a new connection.

The retry returns the committed result when the first attempt had committed (found by its
stored idempotency record before the retry) and commits it once otherwise; a second retry
returns the same bytes; the audit finds every effect exactly once. The other half of the
scenario, the server killed right after a commit, is in ``test_crash.py``.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as api

from tests.api.support import IN_HISTORY_ROUTE, start_client, user

from .checks import audit_book, committed_request_ids
from .harness import PROMPTS, Book, SessionBook, assistant
from .hooks import JitterHooks
from .profile import Profile
from .scenario import stub_of
from .stats import Figures
from .test_cancellation import acknowledge

pytestmark = pytest.mark.slow
SESSIONS = 8


def next_call(rng: random.Random, book: Book, s: SessionBook, admission: str) -> tuple[str, Any]:
    request_id = str(uuid.uuid4())
    if rng.random() < 0.5 or not admission:
        texts = (book.unique("user"),)
        request: Any = api.AdmitRequest(
            session_id=s.session_id,
            request_id=request_id,
            rendered_prompt=rng.choice(PROMPTS),
            route=IN_HISTORY_ROUTE,
            users=[user(t) for t in texts],
        )
        s.expect("Admit", request_id, texts)
        return "Admit", request
    text = book.unique("assistant")
    request = api.RecordRequest(
        session_id=s.session_id,
        request_id=request_id,
        admission_id=admission,
        assistant=assistant(text, None),
    )
    s.expect("Record", request_id, (text,))
    return "Record", request


async def test_lost_responses(
    fresh_database: str, profile: Profile, figures: Callable[[str], Figures], seed: int
) -> None:
    report = figures("4. lost responses")
    rng = random.Random(seed)
    hooks = JitterHooks(rng, max_delay=0.002, committed_delay=0.01)
    client = await start_client(fresh_database, hooks=hooks)
    stub = client.stub
    book = Book("lost")
    counts: Counter[str] = Counter()
    try:
        for _ in range(SESSIONS):
            sid = book.new_session_id()
            await stub.CreateSession(api.CreateSessionRequest(session_id=sid))
            book.add(sid)

        # Drops are spread over 0..1.5x the median time a call takes (alone first, then as
        # measured under this scenario's own concurrency).
        warmup = book.new_session_id()
        await stub.CreateSession(api.CreateSessionRequest(session_id=warmup))
        latencies = []
        for i in range(5):
            started = time.monotonic()
            await stub.Admit(
                api.AdmitRequest(
                    session_id=warmup,
                    rendered_prompt="p",
                    route=IN_HISTORY_ROUTE,
                    users=[user(f"{i}")],
                )
            )
            latencies.append(time.monotonic() - started)
        typical = sorted(latencies)[2]
        recent: deque[float] = deque([typical], maxlen=25)

        async def drive(s: SessionBook, calls: int) -> None:
            admission = ""
            for _ in range(calls):
                method, request = next_call(rng, book, s, admission)
                effect = s.effects[-1]
                # Send on a connection of its own, then drop that connection.
                channel = grpc.aio.insecure_channel(client.server.target)
                await channel.channel_ready()
                call = getattr(stub_of(channel), method)(request)
                await asyncio.sleep(rng.uniform(0, 1.5 * sorted(recent)[len(recent) // 2]))
                await channel.close(None)  # the connection goes away under the call
                try:
                    response = await call
                except (asyncio.CancelledError, grpc.aio.AioRpcError):
                    response = None
                committed = bool(await committed_request_ids(fresh_database, [request.request_id]))
                if response is not None:
                    counts["answered before the drop"] += 1
                elif committed:
                    counts["lost after the commit (the retry replays it)"] += 1
                else:
                    counts["dropped before the commit (the retry commits it)"] += 1
                started = time.monotonic()
                retried = await getattr(stub, method)(request, timeout=10)
                if not committed:  # a call that ran in full: how long calls take right now
                    recent.append(time.monotonic() - started)
                again = await getattr(stub, method)(request, timeout=10)
                assert again.SerializeToString(deterministic=True) == retried.SerializeToString(
                    deterministic=True
                ), "a replay differs from the first retry"
                if response is not None:
                    assert response.SerializeToString() == retried.SerializeToString()
                acknowledge(method, retried, effect)
                if method == "Admit":
                    admission = retried.admission_id

        started = time.monotonic()
        per_session = max(1, profile.lost_calls // SESSIONS)
        await asyncio.wait_for(
            asyncio.gather(*(drive(s, per_session) for s in book.sessions.values())), 600
        )
        elapsed = time.monotonic() - started
        audited = await audit_book(stub, fresh_database, book)
    finally:
        await client.close()

    report.set(
        seed=seed,
        calls_dropped=per_session * SESSIONS,
        call_ms_alone=round(typical * 1000, 1),
        call_ms_under_this_load=round(sorted(recent)[len(recent) // 2] * 1000, 1),
        outcomes=dict(counts),
        retries=2 * per_session * SESSIONS,
        duplicates=0,
        server_handlers_cancelled_at_phase=dict(hooks.cancelled_at),
        scenario_seconds=round(elapsed, 1),
        audit=audited.as_dict(),
    )
    report.finish()
    assert counts["lost after the commit (the retry replays it)"] > 0, "no response was lost"
