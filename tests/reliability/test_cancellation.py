"""Scenario 3, cancellation storm: thousands of mutations cancelled by the client or past
their deadline at random points (the server pauses a random moment at every phase, so the
cancellations land in every phase, including after the commit).

Every call whose outcome the caller did not learn committed all of its step or none of it,
and exactly when its idempotency record exists (the response is stored in the same
transaction); no connection, row lock or gate entry is left behind; every session still
takes writes at once.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from admission_service.domain.events import EventKind
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from tests.api.support import IN_HISTORY_ROUTE, REPLACE_ROUTE, start_client, user

from .checks import (
    audit_book,
    check_unknown_against_keys,
    committed_request_ids,
    eventually,
)
from .harness import PROMPTS, Book, Effect, SessionBook, assistant, commit_claims
from .hooks import JitterHooks
from .profile import Profile
from .stats import Figures

pytestmark = pytest.mark.slow
SESSIONS = 100
CONCURRENCY = 32
MIN_COMPACTED_TOKENS = 40


def build(
    rng: random.Random, book: Book, s: SessionBook, admissions: dict[str, list[str]]
) -> tuple[str, Any, Effect]:
    """A random mutation of session ``s``: (method, request, its effect)."""
    method = rng.choice(["Admit", "Admit", "Record", "Reconcile", "Compact"])
    request_id = str(uuid.uuid4())
    if method == "Record":
        text = book.unique("assistant")
        request: Any = api.RecordRequest(
            session_id=s.session_id,
            request_id=request_id,
            admission_id=rng.choice(admissions[s.session_id]),
            assistant=assistant(text, None),
        )
        return method, request, s.expect(method, request_id, (text,))
    if method == "Reconcile":
        request = api.ReconcileRequest(
            session_id=s.session_id,
            request_id=request_id,
            admission_id=rng.choice(admissions[s.session_id]),
            route=rng.choice([IN_HISTORY_ROUTE, REPLACE_ROUTE]),
        )
        return method, request, s.expect(method, request_id)
    if method == "Compact":
        summary = book.unique("summary")
        request = api.CompactRequest(
            session_id=s.session_id, request_id=request_id, summary=summary
        )
        return method, request, s.expect(method, request_id, (summary,))
    texts = tuple(book.unique("user") for _ in range(rng.randint(1, 3)))
    request = api.AdmitRequest(
        session_id=s.session_id,
        request_id=request_id,
        turn=rng.randrange(100),
        rendered_prompt=rng.choice(PROMPTS),
        route=rng.choice([IN_HISTORY_ROUTE, REPLACE_ROUTE]),
        starts_request_series=rng.random() < 0.1,
        users=[user(t) for t in texts],
    )
    return "Admit", request, s.expect("Admit", request_id, texts)


def acknowledge(method: str, response: Any, effect: Effect) -> None:
    claims = commit_claims(getattr(response, "commits", ()))
    if method == "Admit":
        for seq, text in zip(response.user_seqs, effect.texts, strict=True):
            claims[seq] = (EventKind.USER_MESSAGE, text)
    elif method == "Record":
        claims[response.assistant_seq] = (EventKind.ASSISTANT_MESSAGE, effect.texts[0])
    elif method == "Compact":
        claims[response.summary_seq] = (EventKind.COMPACTION_SUMMARY, effect.texts[0])
    effect.ack(response.revision, claims)


async def test_cancellation_storm(
    fresh_database: str, profile: Profile, figures: Callable[[str], Figures], seed: int
) -> None:
    report = figures("3. cancellation storm")
    rng = random.Random(seed)
    hooks = JitterHooks(rng, max_delay=0.004, committed_delay=0.004)
    client = await start_client(fresh_database, hooks=hooks, db_pool_size=8, db_max_overflow=4)
    stub: api_grpc.AdmissionServiceAsyncStub = client.stub
    book = Book("cancel")
    admissions: dict[str, list[str]] = {}
    outcomes: Counter[str] = Counter()
    how: Counter[str] = Counter()
    unexpected: list[str] = []
    try:
        for _ in range(SESSIONS):
            sid = book.new_session_id()
            await stub.CreateSession(api.CreateSessionRequest(session_id=sid))
            s = book.add(sid)
            first = await stub.Admit(
                api.AdmitRequest(session_id=sid, rendered_prompt=PROMPTS[0], route=IN_HISTORY_ROUTE)
            )
            s.expect("Admit", "setup").ack(first.revision, commit_claims(first.commits))
            admissions[sid] = [first.admission_id]
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one() -> None:
            s = rng.choice(list(book.sessions.values()))
            method, request, effect = build(rng, book, s, admissions)
            rpc = getattr(stub, method)
            async with limit:
                if method == "Compact":
                    try:
                        plan = await stub.PlanCompaction(
                            api.PlanCompactionRequest(session_id=s.session_id, retain_tokens=0)
                        )
                    except grpc.aio.AioRpcError as error:
                        unexpected.append(error.code().name)  # NOTHING_TO_COMPACT is fine
                        if error.code() is grpc.StatusCode.FAILED_PRECONDITION:
                            unexpected.pop()
                        s.effects.remove(effect)
                        return
                    if (
                        plan.shadowed_tokens < MIN_COMPACTED_TOKENS
                    ):  # the summary would not be smaller
                        s.effects.remove(effect)
                        return
                    request.plan_token = plan.plan_token
                # Log-uniform 1 ms .. 1 s: before sending, in every phase, after the commit.
                delay = math.exp(rng.uniform(math.log(0.001), math.log(1.0)))
                try:
                    if rng.random() < 0.5:
                        how["deadline"] += 1
                        response = await rpc(request, timeout=delay)
                    else:
                        how["cancel"] += 1
                        call = rpc(request)
                        done, _ = await asyncio.wait([asyncio.ensure_future(call)], timeout=delay)
                        if not done:
                            call.cancel()
                        response = await call
                except asyncio.CancelledError:
                    outcomes["CANCELLED"] += 1
                    return
                except grpc.aio.AioRpcError as error:
                    outcomes[error.code().name] += 1
                    if error.code() not in (
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.CANCELLED,
                    ):
                        # Only a plan gone stale under a concurrent write may fail otherwise.
                        if error.code() is not grpc.StatusCode.ABORTED:
                            unexpected.append(f"{error.code().name}: {error.details()}")
                        s.effects.remove(effect)  # a definite failure commits nothing
                    return
            outcomes["OK"] += 1
            acknowledge(method, response, effect)
            if method == "Admit":
                admissions[s.session_id].append(response.admission_id)

        started = time.monotonic()
        await asyncio.wait_for(
            asyncio.gather(*(one() for _ in range(profile.cancel_calls))), timeout=600
        )
        elapsed = time.monotonic() - started
        assert not unexpected, unexpected
        # Nothing left behind once the cancelled handlers unwind: no checked-out connection, no
        # gate entry.
        pool = client.server.engine.pool
        await eventually(lambda: pool.checkedout() == 0, "connections returned")  # type: ignore[attr-defined]
        await asyncio.wait_for(client.server.deps.gate.until_idle(), 30)
        assert len(client.server.deps.gate) == 0
        unknown = [e for e in book.effects() if not e.acked and e.texts]
        committed = await committed_request_ids(fresh_database, [e.request_id for e in unknown])
        audited = await audit_book(stub, fresh_database, book)
        check_unknown_against_keys(book, committed)
        # Not wedged: every session takes a write at once.
        for sid in book.sessions:
            await stub.Admit(
                api.AdmitRequest(session_id=sid, rendered_prompt="after", route=IN_HISTORY_ROUTE),
                timeout=5,
            )
    finally:
        await client.close()

    report.set(
        seed=seed,
        sessions=SESSIONS,
        calls=profile.cancel_calls,
        cancelled_by=dict(how),
        outcomes_by_code=dict(sorted(outcomes.items())),
        server_handlers_reached_phase=dict(hooks.arrivals),
        server_handlers_cancelled_at_phase=dict(hooks.cancelled_at),
        lost_after_commit=len(committed),
        storm_seconds=round(elapsed, 1),
        audit=audited.as_dict(),
    )
    report.finish()
    assert outcomes["OK"] < profile.cancel_calls, "nothing was cancelled"
