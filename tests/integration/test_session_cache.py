"""Two workers on one session, each with its own session cache (storage/session_cache.py), on
real PostgreSQL: whatever one writes, the other's next step on its stale cache is detected by
the row's version, nothing it did on the stale state commits, and it runs again on a fresh
read — no lost update, no answer made on a state that was not the stored one."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import pytest
from admission_service.app import handlers
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    CompactCommand,
    Idempotency,
    PlanCompactionCommand,
    ReconcileCommand,
    RecordCommand,
)
from admission_service.app.deps import Deps
from admission_service.app.hooks import Phase
from admission_service.app.unit_of_work import Reply
from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.errors import InvalidArgument, SessionNotFound, SummaryNotSmaller
from admission_service.domain.messages import Message, Role, Text, ToolCall, ToolResult
from admission_service.domain.session import Frames
from admission_service.storage.transactions import PostgresStorage
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.app_support import ROUTE, user
from tests.integration.workers import TENANT, cache_of, new_session, worker


async def step(
    deps: Deps,
    session_id: str,
    text: str,
    previous: AttemptResult | None = None,
    assistant: Message | None = None,
    results: tuple[ToolResult, ...] = (),
    request_id: str | None = None,
    prompt: str = "be brief",
    **kwargs: Any,
) -> Reply[AttemptResult]:
    """One one-call step: the previous admission's output (an assistant reply by default),
    then a user message."""
    output = None
    if previous is not None:
        reply = assistant or Message(Role.ASSISTANT, (Text(f"re: {text}"),))
        output = RecordCommand(session_id, previous.admission_id, reply, results)
    command = AdmitCommand(
        session_id,
        1,
        1,
        prompt,
        (),
        ROUTE,
        users=(user(text),),
        previous_output=output,
        **kwargs,
    )
    key = Idempotency(request_id, b"digest") if request_id is not None else None
    return await handlers.admit(deps, TENANT, command, key)


async def admitted(deps: Deps, session_id: str, text: str, **kwargs: Any) -> AttemptResult:
    reply = await step(deps, session_id, text, **kwargs)
    assert reply.result is not None
    return reply.result


async def users_on_surface(deps: Deps, session_id: str) -> list[str]:
    async with deps.storage.unit(TENANT, session_id, snapshot=True) as unit:
        nodes = await unit.store.surface(with_empty=False)
    texts: list[str] = []
    for node in nodes:
        message = node.decoded()
        if message is not None and message.role is Role.USER:
            texts.extend(block.text for block in message.content if isinstance(block, Text))
    return texts


async def test_a_stale_cache_is_detected_and_the_step_runs_again_losing_nothing(
    engine: AsyncEngine,
) -> None:
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    first = await admitted(a, sid, "one")  # a caches the session
    second = await admitted(b, sid, "two", previous=first)  # b reads it fresh and moves it
    hits = cache_of(a).hits
    third = await admitted(a, sid, "three", previous=second)  # a's cache is stale
    assert cache_of(a).hits == hits + 1  # it was used, found stale, and the step ran again
    assert third.revision == second.revision + 2  # its previous output, then its admission
    assert third.user_seqs[0] > second.user_seqs[0]
    assert await users_on_surface(a, sid) == ["one", "two", "three"]
    # a's cache now holds what it committed: its next step is warm and right.
    fourth = await admitted(a, sid, "four", previous=third)
    assert cache_of(a).hits == hits + 2
    assert fourth.revision == third.revision + 2
    assert await users_on_surface(b, sid) == ["one", "two", "three", "four"]


async def test_interleaved_workers_keep_every_step(engine: AsyncEngine) -> None:
    """Two workers stepping the same session concurrently, each on its own cache: every step
    lands once, in some order, with consecutive revisions."""
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    await admitted(a, sid, "start")

    async def steps(deps: Deps, name: str) -> list[int]:
        revisions = []
        for number in range(8):
            result = await admitted(deps, sid, f"{name}{number}")
            revisions.append(result.revision)
        return revisions

    ran_a, ran_b = await asyncio.gather(steps(a, "a"), steps(b, "b"))
    assert sorted(ran_a + ran_b) == list(range(2, 18))
    surface = await users_on_surface(a, sid)
    assert sorted(surface) == sorted(
        ["start", *(f"a{n}" for n in range(8)), *(f"b{n}" for n in range(8))]
    )
    assert [t for t in surface if t.startswith("a")] == [f"a{n}" for n in range(8)]


async def test_a_refusal_is_never_made_on_a_stale_cache(engine: AsyncEngine) -> None:
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    first = await admitted(a, sid, "one")
    second = await admitted(b, sid, "two", previous=first)
    # a's cache says the revision is first's: the caller's expected revision is the stored one.
    third = await admitted(a, sid, "three", previous=second, expected_revision=second.revision)
    assert third.revision == second.revision + 2


async def test_validate_only_answers_for_the_stored_session(engine: AsyncEngine) -> None:
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    first = await admitted(a, sid, "one")
    second = await admitted(b, sid, "two", previous=first)
    checked = await admitted(a, sid, "three", previous=second, validate_only=True)
    assert checked.revision == second.revision + 1  # its previous output on second's state
    assert await users_on_surface(a, sid) == ["one", "two"]


async def test_a_session_deleted_by_another_worker_is_not_found(engine: AsyncEngine) -> None:
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    first = await admitted(a, sid, "one")
    await handlers.delete_session(b, TENANT, sid, None, None)
    with pytest.raises(SessionNotFound):
        await step(a, sid, "two", previous=first)


async def test_a_session_deleted_and_created_again_elsewhere_is_not_taken_for_the_cached_one(
    engine: AsyncEngine,
) -> None:
    """A new lifetime of a session id, created and stepped by another worker until its row is
    at the version a cached copy of the old lifetime holds: the cached copy must not pass the
    commit's check (its seqs, positions and open calls are another session's)."""
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    first = await admitted(a, sid, "one")  # a caches the first lifetime, one version on
    await handlers.delete_session(b, TENANT, sid, None, None)
    await handlers.create_session(b, TENANT, sid, None)
    # The new lifetime, as many writes on, under another prompt (so more events).
    again = await admitted(b, sid, "new one", prompt="be thorough")
    hits = cache_of(a).hits
    reply = await step(a, sid, "two")  # no previous output: nothing to look up but the row
    assert cache_of(a).hits == hits + 1  # the stale copy was taken, and found stale
    assert reply.result is not None
    # The stored prompt ("be thorough", seq 0) replaced by a new node; the stale copy knew
    # "be brief" at seq 0 and would have changed nothing.
    assert reply.result.effective_prompt.text == "be brief"
    assert (reply.result.effective_prompt.seq or 0) > 0
    assert reply.result.user_seqs[0] > again.user_seqs[-1]
    assert await users_on_surface(b, sid) == ["new one", "two"]
    fresh = await admitted(worker(engine), sid, "three")
    assert fresh.revision == reply.result.revision + 1
    assert first.admission_id != again.admission_id


async def test_a_tool_call_id_reused_after_its_answer_is_refused_on_a_warm_cache(
    engine: AsyncEngine,
) -> None:
    """The cache knows the open calls, not every call ever made: the reused id fails the commit
    on its key, and the step runs again on a fresh read, which refuses it."""
    a = worker(engine)
    sid = await new_session(a)
    first = await admitted(a, sid, "one")
    call = Message(Role.ASSISTANT, (ToolCall("c1", "read", "{}"),))
    answered = (ToolResult("c1", (Text("body"),)),)
    second = await admitted(a, sid, "two", previous=first, assistant=call, results=answered)
    hits = cache_of(a).hits
    with pytest.raises(InvalidArgument) as refused:
        await step(a, sid, "three", previous=second, assistant=call)
    assert "taken" in str(refused.value)
    assert cache_of(a).hits == hits + 1  # refused after a warm attempt, not before
    # Nothing of the refused step stayed; the next step is right.
    third = await admitted(a, sid, "three", previous=second)
    assert third.revision == second.revision + 2


async def test_a_repeated_request_id_replays_on_a_warm_cache(engine: AsyncEngine) -> None:
    a = worker(engine)
    sid = await new_session(a)
    first = await admitted(a, sid, "one")
    reply = await step(a, sid, "two", previous=first, request_id="r-2")
    assert reply.result is not None and reply.encoded is not None
    again = await step(a, sid, "two", previous=first, request_id="r-2")
    assert again.result is None  # replayed, not run again
    assert again.encoded == reply.encoded
    assert await users_on_surface(a, sid) == ["one", "two"]


class CancelAt:
    """Phase hooks that cancel the first Admit reaching ``phase``."""

    def __init__(self, phase: Phase) -> None:
        self.phase, self.armed = phase, False

    async def reached(self, method: str, phase: Phase) -> None:
        if self.armed and method == "Admit" and phase is self.phase:
            self.armed = False
            raise asyncio.CancelledError


@pytest.mark.parametrize(
    "phase", [Phase.LOAD, Phase.VALIDATE, Phase.PROJECT, Phase.DERIVE, Phase.COMMIT]
)
async def test_a_step_on_a_warm_cache_cancelled_at_any_phase_commits_nothing(
    engine: AsyncEngine, phase: Phase
) -> None:
    hooks = CancelAt(phase)
    a = worker(engine, hooks=hooks)
    sid = await new_session(a)
    first = await admitted(a, sid, "one")
    hits = cache_of(a).hits
    hooks.armed = True
    with pytest.raises(asyncio.CancelledError):
        await step(a, sid, "two", previous=first)
    assert cache_of(a).hits == hits + 1  # the cancelled step ran on the cache
    assert await users_on_surface(a, sid) == ["one"]
    second = await admitted(a, sid, "two", previous=first)
    assert second.revision == first.revision + 2
    assert await users_on_surface(a, sid) == ["one", "two"]


def results_for(call_ids: list[str]) -> tuple[ToolResult, ...]:
    return tuple(ToolResult(call, (Text(f"body of {call}"),)) for call in call_ids)


async def fresh_aggregate(
    engine: AsyncEngine, session_id: str, cached: SessionAggregate
) -> tuple[SessionAggregate, Frames]:
    """The aggregate a fresh read under the row's lock finds (no cache), and the stored frames
    from where ``cached`` says the previous request ended; rolled back, nothing written."""
    storage = PostgresStorage(engine, cache_bytes=0)
    admission = cached.admission.admission_id if cached.admission is not None else None
    async with storage.unit(TENANT, session_id) as unit:
        aggregate = await unit.store.lock(admission_id=admission)
        assert aggregate is not None
        return aggregate, await unit.store.frames(cached.pending_from, None)


async def test_the_aggregate_a_commit_leaves_is_the_one_a_fresh_read_finds(
    engine: AsyncEngine,
) -> None:
    """The domain's transitions (domain/aggregate.py) against PostgreSQL: after every step of
    a seeded mix — prompt changes (system nodes), tool calls made and answered across steps,
    Records on their own, Reconciles, compactions — the aggregate the worker keeps is what the
    database holds: row, system nodes, open calls in call order, the frames since the previous
    request, the last admission."""
    rng = random.Random(20261203)
    a = worker(engine)
    sid = await new_session(a)
    last = await admitted(a, sid, "user 0")
    recorded = False  # whether the output of ``last`` was recorded
    open_calls: list[str] = []
    for number in range(1, 48):
        made = [f"call-{number}-{k}" for k in range(rng.choice([0, 0, 1, 2]))]
        assistant = Message(
            Role.ASSISTANT,
            (Text(f"reply {number}"), *(ToolCall(call, "read", "{}") for call in made)),
        )
        roll = rng.random()
        if recorded and open_calls:
            action = "record the rest"
            answered = list(open_calls)
            command = RecordCommand(sid, last.admission_id, None, results_for(answered))
            await handlers.record(a, TENANT, command, None)
            open_calls = []
        elif not recorded and roll < 0.3:
            action = "record"
            open_calls += made
            answered = rng.sample(open_calls, k=rng.randint(0, len(open_calls)))
            command = RecordCommand(sid, last.admission_id, assistant, results_for(answered))
            await handlers.record(a, TENANT, command, None)
            open_calls = [call for call in open_calls if call not in answered]
            recorded = True
        elif recorded and roll < 0.25:
            action = "compact"  # a replacement: the aggregate reads what it left again
            planned = await handlers.plan_compaction(
                a, TENANT, PlanCompactionCommand(sid, retain_tokens=rng.choice([0, 40]))
            )
            summary = CompactCommand(sid, planned.plan_token, "s")
            try:
                await handlers.compact(a, TENANT, summary, None)
            except SummaryNotSmaller:
                action = "compact refused"  # too little to summarise: nothing committed
        elif not recorded and roll < 0.45:
            action = "reconcile"
            retried = ReconcileCommand(sid, last.admission_id, ROUTE)
            assert (await handlers.reconcile(a, TENANT, retried, None)).result is not None
        else:
            action = "step"
            prompt = rng.choice(["be brief", "be brief", "be thorough"])
            if recorded:
                last = await admitted(a, sid, f"user {number}", prompt=prompt)
            else:
                answered = made  # a step answers every call its previous output made
                last = await admitted(
                    a,
                    sid,
                    f"user {number}",
                    previous=last,
                    assistant=assistant,
                    results=results_for(answered),
                    prompt=prompt,
                )
            recorded = False
        cache = cache_of(a)
        entry = cache.take((TENANT, sid))
        assert entry is not None, f"{number} ({action}) left no aggregate"
        cache.put((TENANT, sid), entry)
        kept = entry.aggregate
        fresh, stored_frames = await fresh_aggregate(engine, sid, kept)
        assert kept.session == replace(fresh.session, update_time=kept.session.update_time)
        assert kept.system_nodes == fresh.system_nodes
        assert list(kept.open_calls) == list(fresh.open_calls) == open_calls
        assert kept.pending_from == fresh.pending_from
        assert kept.admission == fresh.admission
        if kept.pending is not None:
            assert kept.pending == stored_frames


async def test_a_retried_call_its_own_commit_would_refuse_is_replayed_on_a_warm_cache(
    engine: AsyncEngine,
) -> None:
    """A Record whose response was lost, retried: on the state it left its tool call is taken,
    a refusal made without looking for the stored response (the warm path assumes none). The
    refusal is not answered: the call runs again on a fresh read, which replays it."""
    a = worker(engine)
    sid = await new_session(a)
    first = await admitted(a, sid, "one")
    output = RecordCommand(
        sid, first.admission_id, Message(Role.ASSISTANT, (ToolCall("c1", "read", "{}"),))
    )
    key = Idempotency("r-record", b"digest")
    recorded = await handlers.record(a, TENANT, output, key)
    assert recorded.encoded is not None
    hits = cache_of(a).hits
    again = await handlers.record(a, TENANT, output, key)
    assert cache_of(a).hits == hits + 1  # the retry ran on the cache first
    assert again.result is None and again.encoded == recorded.encoded  # replayed
