"""A worker's held bodies through the use cases, on the in-memory storage (app/held_bodies.py):
a FULL body made from the previous request's held body and the messages after it is the body
rendered from scratch, in every format, whatever happened between (answers, tool calls, prompt
changes in the history, merges into the held list's last turn, compactions, validate-only
steps, another format, a replay), and a held body is continued only when it is the body of the
session's previous request."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from admission_service.api import convert
from admission_service.app import handlers
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    CompactCommand,
    Delivery,
    Idempotency,
    PlanCompactionCommand,
    ReconcileCommand,
    RecordCommand,
    RequestContent,
)
from admission_service.app.deps import Deps
from admission_service.app.held_bodies import HELD_BODY_MIN, HeldBodies, HeldBody
from admission_service.domain.catalog import Capability
from admission_service.domain.messages import (
    Block,
    Message,
    Role,
    Text,
    Tool,
    ToolCall,
    ToolResult,
)
from admission_service.domain.series import Route
from admission_service.domain.session import RequestView
from admission_service.domain.wire import WireFormat, render_body
from promptadmission.v1 import admission_service_pb2 as api

from tests.app_support import CATALOG, ROUTE, user
from tests.fakes.storage import FakeStorage
from tests.unit.app.test_use_cases import TOKENS

BODIES = [WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES, WireFormat.ANTHROPIC_MESSAGES]
LARGE = "x" * HELD_BODY_MIN  # one message makes the body worth holding


def make_app(held_body_bytes: int = 16 * 1024 * 1024) -> Deps:
    return Deps.compose(
        None,
        CATALOG,
        page_tokens=TOKENS,
        storage=FakeStorage(),
        encoders=convert.ENCODERS,
        held_body_bytes=held_body_bytes,
    )


class Caller:
    """A harness posting the FULL body of each step in ``wire``."""

    def __init__(self, deps: Deps, wire: WireFormat) -> None:
        self.deps, self.wire = deps, wire
        self.turn = 0
        self.admission_id = ""
        self.sent: list[tuple[AdmitCommand, bytes]] = []

    async def admit(
        self, *texts: str, prompt: str = "A", output: RecordCommand | None = None, **kwargs: object
    ) -> AttemptResult:
        self.turn += 1
        command = AdmitCommand(
            "s",
            self.turn,
            1,
            prompt,
            kwargs.pop("tools", ()),  # type: ignore[arg-type]
            kwargs.pop("route", ROUTE),  # type: ignore[arg-type]
            tuple(user(text) for text in texts),
            wire_format=self.wire,
            previous_output=output,
            **kwargs,  # type: ignore[arg-type]
        )
        reply = await handlers.admit(
            self.deps, "t", command, Idempotency(f"r{self.turn}-{self.wire}", b"d")
        )
        assert reply.result is not None
        if not command.validate_only:  # a validate-only answer is not stored, so not encoded
            assert reply.encoded is not None
            self.admission_id = reply.result.admission_id
            self.sent.append((command, reply.encoded))
        return reply.result

    def answered(self, *blocks: Block, results: tuple[ToolResult, ...] = ()) -> RecordCommand:
        return RecordCommand("s", self.admission_id, Message(Role.ASSISTANT, blocks), results)

    async def rendered_afresh(self) -> str:
        """The session's FULL body as Inspect renders it, from every stored frame."""
        inspected = await handlers.inspect(self.deps, "t", "s", self.wire)
        return inspected.request.body_json


async def start(wire: WireFormat, **kwargs: int) -> Caller:
    deps = make_app(**kwargs)
    await handlers.create_session(deps, "t", "s", None)
    return Caller(deps, wire)


@pytest.mark.parametrize("wire", BODIES)
async def test_the_next_full_body_continues_the_held_one(wire: WireFormat) -> None:
    caller = await start(wire)
    first = await caller.admit(LARGE)
    assert caller.deps.bodies.used == 0 and len(caller.deps.bodies) == 1
    second = await caller.admit("next", output=caller.answered(Text("ok")))
    assert second.request.view is RequestView.FULL
    assert caller.deps.bodies.used == 1
    assert second.request.body_json == await caller.rendered_afresh()
    assert second.request.body_json.startswith(first.request.body_json[:1000])
    # The same request again (no new message): the held body as it is.
    third = await caller.admit()
    assert third.request.body_json == second.request.body_json
    assert caller.deps.bodies.used == 2


@pytest.mark.parametrize("wire", BODIES)
async def test_a_random_session_is_continued_body_for_body(wire: WireFormat) -> None:
    """Sixty seeded steps mixing what a long agent session does; after each, the body sent is
    the one rendered afresh, and every response replays byte for byte."""
    caller = await start(wire)
    rng = random.Random(23)
    await caller.admit(LARGE)
    calls = 0
    for _ in range(60):
        kind = rng.choice(["answer", "tool", "merge", "prompt", "compact", "validate", "chat"])
        if kind == "answer":
            await caller.admit("more", output=caller.answered(Text("ok")))
        elif kind == "tool":
            calls += 1
            call = ToolCall(f"c{calls}", "read", '{"p":"a"}')
            result = ToolResult(f"c{calls}", (Text("out" * rng.randint(1, 3000)),))
            await caller.admit(output=caller.answered(Text("looking"), call, results=(result,)))
        elif kind == "merge":  # no model call between: merges into the held last turn
            await caller.admit("and this")
        elif kind == "prompt":
            await caller.admit("go", prompt=f"A {rng.random()}", output=caller.answered(Text("k")))
        elif kind == "compact":
            plan = await handlers.plan_compaction(
                caller.deps, "t", PlanCompactionCommand("s", retain_tokens=rng.randint(0, 50))
            )
            await handlers.compact(
                caller.deps, "t", CompactCommand("s", plan.plan_token, "summary"), None
            )
            await caller.admit(LARGE, output=caller.answered(Text("ok")))  # large again
            continue
        elif kind == "validate":
            await caller.admit("maybe", validate_only=True)
            continue
        else:  # another format in between: its body is held beside, never mixed in
            other = Caller(caller.deps, WireFormat.OPENAI_CHAT)
            other.turn, other.admission_id = caller.turn, caller.admission_id
            await other.admit("from chat")
            caller.turn, caller.admission_id = other.turn, other.admission_id
            continue
        sent = api.AdmitResponse.FromString(caller.sent[-1][1])
        assert sent.request.body_json == await caller.rendered_afresh()
    assert caller.deps.bodies.used > 10
    for command, encoded in caller.sent:
        key = Idempotency(f"r{command.turn}-{caller.wire}", b"d")
        replayed = await handlers.admit(caller.deps, "t", command, key)
        assert replayed.result is None and replayed.encoded == encoded


async def test_a_body_is_continued_only_when_it_is_the_previous_requests() -> None:
    caller = await start(WireFormat.ANTHROPIC_MESSAGES)
    await caller.admit(LARGE)
    key = ("t", "s", caller.wire)
    held = caller.deps.bodies.peek(key)
    assert held is not None
    # A validate-only step continues the held body but leaves nothing behind (its request is
    # not the session's): the next step continues the committed body.
    await caller.admit("maybe", validate_only=True)
    assert caller.deps.bodies.used == 1 and caller.deps.bodies.peek(key) is held
    await caller.admit("next", output=caller.answered(Text("ok")))
    assert caller.deps.bodies.used == 2
    # Another worker (its own held bodies, on the same storage) moves the session on: this
    # worker's body is of an earlier request, so the next body is rendered afresh.
    elsewhere = Caller(replace(caller.deps, bodies=HeldBodies(16 * 1024 * 1024)), caller.wire)
    elsewhere.turn, elsewhere.admission_id = caller.turn, caller.admission_id
    await elsewhere.admit("from another worker", output=caller.answered(Text("ok")))
    caller.turn, caller.admission_id = elsewhere.turn, elsewhere.admission_id
    result = await caller.admit("back here", output=caller.answered(Text("ok")))
    assert caller.deps.bodies.used == 2
    assert result.request.body_json == await caller.rendered_afresh()
    # The typed messages asked for too: every frame is read, nothing continued.
    both = await caller.admit(
        "both", output=caller.answered(Text("ok")), delivery=Delivery(RequestContent.BOTH)
    )
    assert caller.deps.bodies.used == 2
    assert both.request.messages
    assert both.request.body_json == await caller.rendered_afresh()


async def test_a_continued_body_carries_the_tools_of_its_own_step() -> None:
    caller = await start(WireFormat.OPENAI_RESPONSES)
    read = Tool("read", "reads a file", '{"type":"object"}')
    write = Tool("write", "writes a file", '{"type":"object","properties":{"p":{}}}')
    await caller.admit(LARGE, tools=(read,))
    second = await caller.admit("next", output=caller.answered(Text("ok")), tools=(read, write))
    assert caller.deps.bodies.used == 1
    assert [tool["name"] for tool in json.loads(second.request.body_json)["tools"]] == [
        "read",
        "write",
    ]
    assert second.request.body_json == await caller.rendered_afresh()
    third = await caller.admit("no tools", output=caller.answered(Text("ok")))
    assert "tools" not in json.loads(third.request.body_json)
    assert third.request.body_json == await caller.rendered_afresh()


async def test_a_retry_continues_the_held_body_and_another_route_does_not() -> None:
    caller = await start(WireFormat.ANTHROPIC_MESSAGES)
    first = await caller.admit(LARGE)
    retried = await handlers.reconcile(
        caller.deps,
        "t",
        ReconcileCommand("s", first.admission_id, ROUTE, WireFormat.ANTHROPIC_MESSAGES),
        None,
    )
    assert retried.result is not None
    assert caller.deps.bodies.used == 1
    assert retried.result.request.body_json == await caller.rendered_afresh()
    # A replacing route: its body is not the in-history route's.
    replacing = replace(ROUTE, system_prompt_update=Capability.REPLACE)
    moved = await caller.admit("moved", output=caller.answered(Text("ok")), route=replacing)
    assert caller.deps.bodies.used == 1
    assert moved.request.body_json == await caller.rendered_afresh()


async def test_small_bodies_are_not_held_and_the_bound_holds() -> None:
    caller = await start(WireFormat.OPENAI_CHAT)
    await caller.admit("small")
    assert len(caller.deps.bodies) == 0
    bounded = await start(WireFormat.OPENAI_CHAT, held_body_bytes=HELD_BODY_MIN)
    await bounded.admit(LARGE)  # larger than the bound with its item's JSON around it
    assert len(bounded.deps.bodies) == 0 and bounded.deps.bodies.bytes == 0
    off = await start(WireFormat.OPENAI_CHAT, held_body_bytes=0)
    await off.admit(LARGE)
    await off.admit("next", output=off.answered(Text("ok")))
    assert len(off.deps.bodies) == 0 and off.deps.bodies.used == 0


def test_the_least_recently_used_session_leaves_first() -> None:
    route = Route("openai", "m", 1000, in_history=True, tool_update=False)
    body = render_body([user(LARGE)], WireFormat.OPENAI_CHAT, in_history=True, provider="openai")
    size = len(body.body)
    bodies = HeldBodies(2 * size + 10)
    for name in ("a", "b"):
        bodies.put(("t", name, WireFormat.OPENAI_CHAT), HeldBody(b"d", "openai", True, body))
    assert bodies.get(("t", "a", WireFormat.OPENAI_CHAT), route) is not None  # a used last
    bodies.put(("t", "c", WireFormat.OPENAI_CHAT), HeldBody(b"d", "openai", True, body))
    assert bodies.peek(("t", "b", WireFormat.OPENAI_CHAT)) is None
    assert len(bodies) == 2 and bodies.bytes == 2 * size
    # Another provider's or a replacing route's body is not this route's.
    other = replace(route, provider="deepseek")
    assert bodies.get(("t", "a", WireFormat.OPENAI_CHAT), other) is None
    assert bodies.get(("t", "a", WireFormat.OPENAI_CHAT), replace(route, in_history=False)) is None


def test_a_commit_drops_the_sessions_bodies_of_earlier_requests() -> None:
    """A body in another format of the same request stays (a harness may ask for both); one
    of an earlier request can never be continued again and leaves."""
    route = Route("openai", "m", 1000, in_history=True, tool_update=False)
    body = render_body([user(LARGE)], WireFormat.OPENAI_CHAT, in_history=True, provider="openai")
    bodies = HeldBodies(16 * 1024 * 1024)
    bodies.put(("t", "s", WireFormat.OPENAI_CHAT), HeldBody(b"1", "openai", True, body))
    bodies.put(("t", "other", WireFormat.OPENAI_CHAT), HeldBody(b"1", "openai", True, body))
    same = bodies.of("t", "s")
    same.leave(WireFormat.OPENAI_RESPONSES, route, b"1", body)
    assert len(bodies) == 2  # nothing before the commit
    same.committed()
    assert len(bodies) == 3
    later = bodies.of("t", "s")
    later.leave(WireFormat.OPENAI_RESPONSES, route, b"2", body)
    later.committed()
    assert bodies.peek(("t", "s", WireFormat.OPENAI_CHAT)) is None
    assert bodies.peek(("t", "other", WireFormat.OPENAI_CHAT)) is not None
    held = bodies.peek(("t", "s", WireFormat.OPENAI_RESPONSES))
    assert held is not None and held.digest == b"2"
    assert bodies.bytes == 2 * len(body.body)
