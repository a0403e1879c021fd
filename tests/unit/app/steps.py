"""What the handler tests on the in-memory storage share (``test_<use case>.py``): the deps
they run on (the API's own response encoders, so replays are the bytes a client gets), one
call per handler as a harness makes it, and the guarantee every refusal keeps: the refused call
left the session as it was (``App.refused``: its revision, its events, every stored row)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from admission_service.api import convert
from admission_service.app import handlers
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    CompactCommand,
    CompactResult,
    Idempotency,
    PlanCompactionCommand,
    PlanResult,
    ReconcileCommand,
    RecordCommand,
    RecordResult,
    RouteRequest,
    SessionInfo,
    Usage,
)
from admission_service.app.deps import Deps
from admission_service.app.hooks import Phase
from admission_service.app.page_tokens import PageTokens
from admission_service.app.unit_of_work import Reply
from admission_service.domain.errors import SessionNotFound
from admission_service.domain.events import Event
from admission_service.domain.messages import Block, Message, Role, Text, ToolCall, ToolResult

from tests.app_support import CATALOG, ROUTE, user
from tests.fakes.storage import FakeStorage, State

TENANT = "t"
TOKENS = PageTokens([b"k" * 32])
# The catalog's in-history route (a changed prompt is appended after the history) and a route
# it does not know (the default: a changed prompt rewrites the head).
IN_HISTORY = ROUTE
REPLACE = RouteRequest("openai", "gpt-test", 128_000)

E = TypeVar("E", bound=BaseException)
R = TypeVar("R")

__all__ = [
    "BEFORE_COMMIT",
    "IN_HISTORY",
    "REPLACE",
    "TENANT",
    "App",
    "Cancelling",
    "assistant",
    "key",
    "result",
    "user",
]


def assistant(text: str = "ok", *calls: str) -> Message:
    """The model's reply: ``text``, then a tool call for each id in ``calls``."""
    blocks: tuple[Block, ...] = (Text(text), *(ToolCall(call, "read", "{}") for call in calls))
    return Message(Role.ASSISTANT, blocks)


def result(call_id: str, text: str = "done") -> ToolResult:
    return ToolResult(call_id, (Text(text),))


class Cancelling:
    """Cancels the first call of ``method`` reaching ``phase``, as a client going away would."""

    def __init__(self, method: str, phase: Phase) -> None:
        self.target = (method, phase)

    async def reached(self, method: str, phase: Phase) -> None:
        if (method, phase) == self.target:
            raise asyncio.CancelledError


class LosingTheCancellation:
    """Cancels the first call of ``method`` reaching ``phase`` and swallows the
    ``CancelledError`` at its next await, as Python 3.11's ``asyncio.wait_for`` (in psycopg's
    waits) does when the cancellation lands as a round trip completes: the call goes on with
    only its task's ``cancelling()`` count saying it was cancelled."""

    def __init__(self, method: str, phase: Phase) -> None:
        self.target = (method, phase)

    async def reached(self, method: str, phase: Phase) -> None:
        if (method, phase) == self.target:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)


# Every phase a mutation passes before it commits (``app/hooks.py``).
BEFORE_COMMIT = (Phase.LOAD, Phase.VALIDATE, Phase.PROJECT, Phase.DERIVE, Phase.COMMIT)


def key(request_id: str, digest: bytes = b"digest") -> Idempotency:
    return Idempotency(request_id, digest)


def fresh(reply: Reply[R]) -> R:
    """The result of a call that ran (a replayed one has only the stored bytes)."""
    assert reply.result is not None, "replayed, not run"
    return reply.result


@dataclass(frozen=True)
class Observed:
    """Everything a call could have changed: the session as GetSession and ListEvents answer
    it (None: there is none), and every row of the storage, stored responses included."""

    info: SessionInfo | None
    events: tuple[Event, ...]
    rows: State = field(repr=False)
    commits: int


@dataclass
class App:
    """The use cases on one in-memory storage, called as the servicer calls them."""

    storage: FakeStorage
    deps: Deps

    @classmethod
    def build(cls, storage: FakeStorage | None = None, **kwargs: Any) -> App:
        storage = storage if storage is not None else FakeStorage()
        kwargs.setdefault("encoders", convert.ENCODERS)
        deps = Deps.compose(None, CATALOG, page_tokens=TOKENS, storage=storage, **kwargs)
        return cls(storage, deps)

    # ---- one call per handler

    async def create(self, sid: str = "s", idempotency: Idempotency | None = None) -> str:
        info = fresh(await handlers.create_session(self.deps, TENANT, sid, idempotency))
        return info.session_id

    def admit_command(
        self, sid: str, prompt: str = "P", *users: str, **kwargs: Any
    ) -> AdmitCommand:
        kwargs.setdefault("turn", 1)
        kwargs.setdefault("step", 1)
        kwargs.setdefault("tools", ())
        kwargs.setdefault("route", IN_HISTORY)
        return AdmitCommand(
            sid, rendered_prompt=prompt, users=tuple(user(text) for text in users), **kwargs
        )

    async def admit(
        self,
        sid: str,
        prompt: str = "P",
        *users: str,
        idempotency: Idempotency | None = None,
        **kwargs: Any,
    ) -> AttemptResult:
        command = self.admit_command(sid, prompt, *users, **kwargs)
        return fresh(await handlers.admit(self.deps, TENANT, command, idempotency))

    async def reconcile(
        self,
        sid: str,
        admission_id: str,
        route: RouteRequest = IN_HISTORY,
        idempotency: Idempotency | None = None,
        **kwargs: Any,
    ) -> AttemptResult:
        command = ReconcileCommand(sid, admission_id, route, **kwargs)
        return fresh(await handlers.reconcile(self.deps, TENANT, command, idempotency))

    async def record(
        self,
        sid: str,
        admission_id: str,
        reply: Message | None = None,
        results: tuple[ToolResult, ...] = (),
        usage: Usage | None = None,
        idempotency: Idempotency | None = None,
        **kwargs: Any,
    ) -> RecordResult:
        command = RecordCommand(sid, admission_id, reply, results, usage, **kwargs)
        return fresh(await handlers.record(self.deps, TENANT, command, idempotency))

    async def plan(
        self,
        sid: str,
        retain_tokens: int | None = 0,
        seq_range: tuple[int, int] | None = None,
    ) -> PlanResult:
        if seq_range is not None:
            retain_tokens = None
        command = PlanCompactionCommand(sid, retain_tokens, seq_range)
        return await handlers.plan_compaction(self.deps, TENANT, command)

    async def compact(
        self,
        sid: str,
        plan_token: str,
        summary: str = "s",
        idempotency: Idempotency | None = None,
        **kwargs: Any,
    ) -> CompactResult:
        command = CompactCommand(sid, plan_token, summary, **kwargs)
        return fresh(await handlers.compact(self.deps, TENANT, command, idempotency))

    async def compact_all(self, sid: str, summary: str = "s") -> CompactResult:
        """Everything after the head, summarised."""
        return await self.compact(sid, (await self.plan(sid)).plan_token, summary)

    # ---- sessions as they are

    async def busy(self, sid: str = "s") -> tuple[str, str]:
        """A session with history: a step with a tool call and its answer, then a second step
        on a changed prompt (in history); returns the session and the second admission."""
        await self.create(sid)
        first = await self.admit(sid, "A", "hello")
        await self.record(sid, first.admission_id, assistant("x" * 80, "c1"), (result("c1"),))
        second = await self.admit(sid, "B", "again", step=2)
        return sid, second.admission_id

    async def info(self, sid: str) -> SessionInfo:
        return await handlers.get_session(self.deps, TENANT, sid)

    async def events(self, sid: str) -> tuple[Event, ...]:
        events: list[Event] = []
        token = ""
        while True:
            page = await handlers.list_events(self.deps, TENANT, sid, 1000, token)
            events += (view.event for view in page.items)
            if not (token := page.next_page_token):
                return tuple(events)

    async def observe(self, sid: str) -> Observed:
        try:
            info: SessionInfo | None = await self.info(sid)
        except SessionNotFound:
            info = None
        events = await self.events(sid) if info is not None else ()
        return Observed(info, events, copy.deepcopy(self.storage.state), self.storage.commits)

    async def refused(self, sid: str, error: type[E], call: Awaitable[object]) -> E:
        """Awaits ``call``, which must raise ``error``, and checks it committed nothing: the
        session's revision and events, and every stored row, are what they were before."""
        before = await self.observe(sid)
        with pytest.raises(error) as raised:
            await call
        after = await self.observe(sid)
        assert after.info == before.info
        assert after.events == before.events
        assert after.rows == before.rows
        assert after.commits == before.commits
        return raised.value
