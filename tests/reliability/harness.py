"""Harness loops, and the book of what every call was expected to commit.

A harness loop drives sessions the way an agent harness does, one step at a time: ``Admit``
(the prompt sometimes changes, the route sometimes is not in-history, sometimes the harness
declares a new series), sometimes a retry through ``Reconcile``, ``Record`` of the assistant
(half the time with a tool call) and of the tool result, and now and then a compaction
(``PlanCompaction`` + ``Compact``). Every mutating call carries a ``request_id`` and every
message it commits carries a text unique in the whole run, so the audit can find each effect.

Loops lease a session for one step (a worker owns a session while it works on it, then hands
it over); the contention scenario drives one session from many callers without leases.

``Book`` remembers, per session, every mutation attempted: acknowledged ones with what their
response claims (seq -> kind and text), and ones whose outcome the caller never learned (the
connection dropped, the deadline passed, the server died), which must have committed all or
nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc
from admission_service.domain.events import EventKind
from promptadmission import AdmissionClient, AdmissionError, RetryPolicy
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import IN_HISTORY_ROUTE, REPLACE_ROUTE, user

PROMPTS = (
    "You are a careful coding agent.",
    "You are a careful coding agent.\n\nPLAN MODE: propose, do not edit.",
    "You are a careful coding agent.\n\nSkill registered: git.",
    "You are a careful coding agent working on {{model}} = deepseek-flash.",
    "",
)
TOOLS = (
    pb.Tool(
        name="read",
        description="Read a file",
        parameters_json='{"type":"object","properties":{"path":{"type":"string"}}}',
    ),
)
# Outcome unknown: the call may or may not have committed; repeat it with the same request_id.
UNKNOWN_OUTCOME = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    }
)


def text_message(role: pb.MessageRole.ValueType, text: str) -> pb.Message:
    return pb.Message(role=role, content=[pb.ContentBlock(text=pb.TextBlock(text=text))])


def assistant(text: str, call_id: str | None) -> pb.Message:
    message = text_message(pb.MESSAGE_ROLE_ASSISTANT, text)
    if call_id is not None:
        call = pb.ToolCallBlock(call_id=call_id, name="read", arguments_json='{"path":"a.py"}')
        message.content.append(pb.ContentBlock(tool_call=call))
    return message


def tool_result(call_id: str, text: str) -> pb.ToolResult:
    return pb.ToolResult(call_id=call_id, content=[pb.ContentBlock(text=pb.TextBlock(text=text))])


Claims = dict[int, tuple[EventKind, str]]


def commit_claims(commits: Iterable[pb.SystemCommit]) -> Claims:
    return {c.seq: (EventKind.SYSTEM_MESSAGE, c.text) for c in commits}


@dataclass
class Effect:
    """One mutation: what it would commit, and (once acknowledged) what its response claims."""

    method: str
    request_id: str
    texts: tuple[str, ...]  # run-unique message texts the call commits, all or none
    acked: bool = False
    revision: int | None = None
    claims: Claims = field(default_factory=dict)
    found: bool | None = None  # unacknowledged: did the audit find its messages committed?

    def ack(self, revision: int, claims: Claims) -> None:
        self.acked = True
        self.revision = revision
        self.claims = claims


@dataclass
class SessionBook:
    session_id: str
    effects: list[Effect] = field(default_factory=list)
    prompt: str = PROMPTS[0]
    turn: int = 0
    since_compaction: int = 0

    def expect(self, method: str, request_id: str, texts: tuple[str, ...] = ()) -> Effect:
        effect = Effect(method, request_id, texts)
        self.effects.append(effect)
        return effect


class Book:
    """Every session a scenario touches, and everything attempted on it."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.sessions: dict[str, SessionBook] = {}
        self._counter = itertools.count()
        self._leased: set[str] = set()
        self._released = asyncio.Condition()

    def unique(self, kind: str) -> str:
        return f"{self.prefix}:{kind}:{next(self._counter)}"

    def add(self, session_id: str) -> SessionBook:
        book = self.sessions[session_id] = SessionBook(session_id)
        return book

    def new_session_id(self) -> str:
        return f"{self.prefix}-{uuid.uuid4().hex[:16]}"

    async def lease(self, rng: random.Random) -> SessionBook:
        """A random session no other loop is working on, the caller's until ``release``
        (waits for one to be released when every session is leased)."""
        async with self._released:
            await self._released.wait_for(lambda: len(self._leased) < len(self.sessions))
            free = [s for s in self.sessions.values() if s.session_id not in self._leased]
            chosen = rng.choice(free)
            self._leased.add(chosen.session_id)
            return chosen

    async def release(self, session: SessionBook) -> None:
        async with self._released:
            self._leased.remove(session.session_id)
            self._released.notify()

    def effects(self) -> list[Effect]:
        return [e for s in self.sessions.values() for e in s.effects]


class Caller:
    """Calls through ``AdmissionClient`` (which retries UNAVAILABLE and lost races itself,
    with the same request_id) and, when the client gives up on an outcome it cannot know,
    repeats the same request until it is acknowledged or ``give_up_after`` passes."""

    def __init__(
        self,
        client: AdmissionClient,
        *,
        timeout: float = 10.0,
        give_up_after: float = 60.0,
        on_unknown: Callable[[str, Any], None] | None = None,
    ) -> None:
        self.client = client
        self.timeout = timeout
        self.give_up_after = give_up_after
        self.on_unknown = on_unknown
        self.unknown_attempts = 0

    async def call(self, method: str, request: Any) -> Any | None:
        """The response, or None if the outcome is still unknown after ``give_up_after``.
        A definite failure raises ``AdmissionError``."""
        rpc = getattr(self.client, method)
        deadline = time.monotonic() + self.give_up_after
        backoff = 0.05
        while True:
            try:
                return await rpc(request, timeout=self.timeout)
            except AdmissionError as error:
                if error.code not in UNKNOWN_OUTCOME and not error.retryable:
                    raise
                self.unknown_attempts += 1
                if self.on_unknown is not None:
                    self.on_unknown(method, request)
                if time.monotonic() + backoff > deadline:
                    return None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)


# Enough for a step through a restart or the end of an outage: the Caller's backoff is 1 s.
PROGRESS_SECONDS = 120.0


async def every_loop_steps(loops: Iterable[HarnessLoop], what: str) -> None:
    """Returns once every loop has finished one more step; fails naming ``what`` if one has
    not within ``PROGRESS_SECONDS``."""
    try:
        async with asyncio.timeout(PROGRESS_SECONDS):
            await asyncio.gather(*(loop.steps_more() for loop in loops))
    except TimeoutError:
        raise AssertionError(f"{what}: a loop made no step in {PROGRESS_SECONDS} s") from None


class Running:
    """``count`` loops stepping on ``book``'s sessions until ``stop`` is set; ``finish()`` sets
    it and waits for each loop to end its step."""

    def __init__(
        self, client: AdmissionClient, book: Book, count: int, seed: int, give_up_after: float
    ) -> None:
        self.stop = asyncio.Event()
        self.loops = [
            HarnessLoop(book, Caller(client, give_up_after=give_up_after), random.Random(seed + i))
            for i in range(count)
        ]
        self._running = asyncio.gather(*(loop.run(stop=self.stop) for loop in self.loops))

    async def every_loop_steps(self, what: str) -> None:
        await every_loop_steps(self.loops, what)

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self._running, timeout=300)

    @property
    def steps(self) -> int:
        return sum(loop.steps_done for loop in self.loops)


def harness_client(channel: grpc.aio.Channel) -> AdmissionClient:
    return AdmissionClient(
        channel=channel,
        timeout=10.0,
        retry=RetryPolicy(max_attempts=4, initial_backoff=0.05, max_backoff=0.5),
    )


@dataclass
class StepMix:
    """How often a step does each optional thing."""

    prompt_change: float = 0.15
    replace_route: float = 0.2
    declared_series: float = 0.05
    reconcile: float = 0.1
    tool_call: float = 0.5
    compaction: float = 0.08


class HarnessLoop:
    def __init__(
        self,
        book: Book,
        caller: Caller,
        rng: random.Random,
        mix: StepMix | None = None,
    ) -> None:
        self.book = book
        self.caller = caller
        self.rng = rng
        self.mix = mix or StepMix()
        self.steps_done = 0
        self._stepped = asyncio.Condition()

    async def run(self, steps: int | None = None, stop: asyncio.Event | None = None) -> None:
        """``steps`` leased steps, or steps until ``stop`` is set."""
        done = 0
        while (steps is None or done < steps) and not (stop is not None and stop.is_set()):
            session = await self.book.lease(self.rng)
            try:
                await self.step(session)
            finally:
                await self.book.release(session)
            done += 1
            async with self._stepped:
                self.steps_done += 1
                self._stepped.notify_all()

    async def steps_more(self, steps: int = 1) -> None:
        """Returns once this loop has finished ``steps`` more steps (from now)."""
        async with self._stepped:
            target = self.steps_done + steps
            await self._stepped.wait_for(lambda: self.steps_done >= target)

    async def create_sessions(self, count: int) -> None:
        for _ in range(count):
            session_id = self.book.new_session_id()
            request = api.CreateSessionRequest(session_id=session_id, request_id=str(uuid.uuid4()))
            response = await self.caller.call("create_session", request)
            assert response is not None, "could not create a session"
            self.book.add(session_id)

    async def step(self, s: SessionBook) -> None:
        rng, mix, book = self.rng, self.mix, self.book
        if rng.random() < mix.prompt_change:
            s.prompt = rng.choice([p for p in PROMPTS if p != s.prompt])
        route = REPLACE_ROUTE if rng.random() < mix.replace_route else IN_HISTORY_ROUTE
        texts = tuple(book.unique("user") for _ in range(rng.randint(1, 2)))
        s.turn += 1
        admit = api.AdmitRequest(
            session_id=s.session_id,
            request_id=str(uuid.uuid4()),
            turn=s.turn,
            step=0,
            rendered_prompt=s.prompt,
            tools=TOOLS,
            route=route,
            starts_request_series=rng.random() < mix.declared_series,
            users=[user(t) for t in texts],
        )
        effect = s.expect("Admit", admit.request_id, texts)
        admitted = await self.caller.call("admit", admit)
        if admitted is None:
            return
        claims = commit_claims(admitted.commits)
        claims.update(
            {
                seq: (EventKind.USER_MESSAGE, t)
                for seq, t in zip(admitted.user_seqs, texts, strict=True)
            }
        )
        effect.ack(admitted.revision, claims)
        s.since_compaction += 1

        if rng.random() < mix.reconcile:
            retry_route = rng.choice([IN_HISTORY_ROUTE, REPLACE_ROUTE])
            reconcile = api.ReconcileRequest(
                session_id=s.session_id,
                request_id=str(uuid.uuid4()),
                admission_id=admitted.admission_id,
                route=retry_route,
            )
            effect = s.expect("Reconcile", reconcile.request_id)
            reconciled = await self.caller.call("reconcile", reconcile)
            if reconciled is None:
                return
            effect.ack(reconciled.revision, commit_claims(reconciled.commits))

        call_id = book.unique("call") if rng.random() < mix.tool_call else None
        reply = book.unique("assistant")
        record = api.RecordRequest(
            session_id=s.session_id,
            request_id=str(uuid.uuid4()),
            admission_id=admitted.admission_id,
            assistant=assistant(reply, call_id),
            usage=pb.Usage(input_tokens=100, output_tokens=20, cache_read_tokens=60),
        )
        effect = s.expect("Record", record.request_id, (reply,))
        recorded = await self.caller.call("record", record)
        if recorded is None:
            return
        effect.ack(
            recorded.revision, {recorded.assistant_seq: (EventKind.ASSISTANT_MESSAGE, reply)}
        )
        if call_id is not None:
            output = book.unique("result")
            record = api.RecordRequest(
                session_id=s.session_id,
                request_id=str(uuid.uuid4()),
                admission_id=admitted.admission_id,
                tool_results=[tool_result(call_id, output)],
            )
            effect = s.expect("Record", record.request_id, (output,))
            recorded = await self.caller.call("record", record)
            if recorded is None:
                return
            (seq,) = recorded.tool_result_seqs
            effect.ack(recorded.revision, {seq: (EventKind.TOOL_RESULT, output)})

        if s.since_compaction >= 2 and rng.random() < mix.compaction:
            await self.compact(s)

    async def compact(self, s: SessionBook) -> None:
        plan = await self.caller.call(
            "plan_compaction", api.PlanCompactionRequest(session_id=s.session_id, retain_tokens=0)
        )
        if plan is None or plan.shadowed_tokens < 40:  # a summary would not be smaller
            return
        summary = self.book.unique("summary")
        compact = api.CompactRequest(
            session_id=s.session_id,
            request_id=str(uuid.uuid4()),
            plan_token=plan.plan_token,
            summary=summary,
        )
        effect = s.expect("Compact", compact.request_id, (summary,))
        compacted = await self.caller.call("compact", compact)
        if compacted is None:
            return
        claims = commit_claims(compacted.commits)
        claims[compacted.summary_seq] = (EventKind.COMPACTION_SUMMARY, summary)
        effect.ack(compacted.revision, claims)
        s.since_compaction = 0
