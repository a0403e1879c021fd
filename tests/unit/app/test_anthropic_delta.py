"""An Anthropic Messages DELTA through the use cases, on the in-memory storage (issue 23, item 3):
the body the caller rebuilds from it is the FULL body; the held messages are read again only when
the new ones change the held list's end (and then only those); a replay rebuilds it byte for byte;
and it is FULL whenever the service cannot know the caller's body continues the one it rendered.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

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
    RecordCommand,
    RequestContent,
)
from admission_service.app.deps import Deps
from admission_service.app.replay import Recipe
from admission_service.domain.messages import Message, Role, Text, ToolCall, ToolResult
from admission_service.domain.session import HeldPrefix, RequestSelection, RequestView
from admission_service.domain.wire import MessagesEnd, WireFormat
from promptadmission.v1 import admission_service_pb2 as api

from tests.app_support import CATALOG, ROUTE, user
from tests.fakes.storage import FakeSessionStore, FakeStorage
from tests.unit.app.test_use_cases import TOKENS

ANTHROPIC = WireFormat.ANTHROPIC_MESSAGES
Json = dict[str, Any]


class Reads:
    """How many held messages the fake storage was asked for again (``frames_before``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch | None = None) -> None:
        self.windows: list[int] = []
        if monkeypatch is None:
            return
        original = FakeSessionStore.frames_before

        async def frames_before(store: FakeSessionStore, end_position: int, count: int) -> bytes:
            self.windows.append(count)
            return await original(store, end_position, count)

        monkeypatch.setattr(FakeSessionStore, "frames_before", frames_before)


def make_app(reads: Reads) -> Deps:
    return Deps.compose(
        None, CATALOG, page_tokens=TOKENS, storage=FakeStorage(), encoders=convert.ENCODERS
    )


class Harness:
    """A caller that holds the whole body of each request, as the kits do."""

    def __init__(self, deps: Deps, sid: str) -> None:
        self.deps, self.sid = deps, sid
        self.body: Json | None = None
        self.held: HeldPrefix | None = None
        self.turn = 0
        self.admission_id = ""

    def selection(self) -> RequestSelection:
        return RequestSelection(RequestView.DELTA, self.held)

    async def admit(
        self, *users: str, prompt: str = "A", output: RecordCommand | None = None, **kwargs: Any
    ) -> AttemptResult:
        self.turn += 1
        command = AdmitCommand(
            self.sid,
            self.turn,
            1,
            prompt,
            (),
            kwargs.pop("route", ROUTE),
            tuple(user(text) for text in users),
            wire_format=kwargs.pop("wire", ANTHROPIC),
            selection=kwargs.pop("selection", self.selection()),
            previous_output=output,
            **kwargs,
        )
        reply = await handlers.admit(self.deps, "t", command, Idempotency(f"r{self.turn}", b"d"))
        assert reply.result is not None
        result = reply.result
        self.admission_id = result.admission_id
        self.take(result)
        assert reply.encoded is not None
        self.last = (command, reply.encoded)
        return result

    def take(self, result: AttemptResult) -> None:
        request = result.request
        if not request.body_json:
            self.body, self.held = None, None
            return
        body: Json = json.loads(request.body_json)
        if request.view is RequestView.DELTA:
            assert self.body is not None
            items = self.body["messages"]
            kept = len(items) - request.replaced_body_items
            whole: Json = {"messages": items[:kept] + body["messages"]}
            if "system" in body or "system" in self.body:
                whole["system"] = body.get("system", self.body.get("system"))
            whole.update((k, v) for k, v in body.items() if k not in whole)
            body = whole
        self.body = body
        self.held = HeldPrefix(request.total_messages, request.digest, len(body["messages"]))

    def answered(self, *blocks: Any) -> RecordCommand:
        return RecordCommand(self.sid, self.admission_id, Message(Role.ASSISTANT, tuple(blocks)))

    async def full_body(self) -> str:
        inspected = await handlers.inspect(self.deps, "t", self.sid, ANTHROPIC)
        return inspected.request.body_json


def dumps(body: Json | None) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


async def start(reads: Reads) -> Harness:
    deps = make_app(reads)
    await handlers.create_session(deps, "t", "s", None)
    return Harness(deps, "s")


async def test_a_step_after_the_models_answer_carries_only_its_new_items(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = Reads(monkeypatch)
    caller = await start(reads)
    first = await caller.admit("Read main.py.")
    assert first.request.view is RequestView.FULL
    calling = caller.answered(Text("Reading."), ToolCall("c1", "read", '{"p":"main.py"}'))
    result = RecordCommand(caller.sid, "", tool_results=(ToolResult("c1", (Text("print(1)"),)),))
    second = await caller.admit(
        output=replace(calling, tool_results=result.tool_results), prompt="A"
    )
    assert second.request.view is RequestView.DELTA
    assert second.request.replaced_body_items == 0
    body = json.loads(second.request.body_json)
    assert [m["role"] for m in body["messages"]] == ["assistant", "user"]
    assert "system" not in body  # the held body's
    assert dumps(caller.body) == await caller.full_body()
    assert reads.windows == []  # nothing held was read again
    # The model's answer, then a prompt change in the history and a user: still an append.
    third = await caller.admit("Plan it.", prompt="A\nPLAN", output=caller.answered(Text("ok")))
    assert third.request.view is RequestView.DELTA and third.request.replaced_body_items == 0
    assert [m["role"] for m in json.loads(third.request.body_json)["messages"]] == [
        "assistant",
        "user",
        "system",
    ]
    assert dumps(caller.body) == await caller.full_body()
    assert reads.windows == []


async def test_user_content_after_a_held_user_turn_resends_that_turn_and_what_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = Reads(monkeypatch)
    caller = await start(reads)
    await caller.admit("Read main.py.")
    await caller.admit("Plan it.", prompt="A\nPLAN", output=caller.answered(Text("ok")))
    held = caller.body
    assert held is not None and [m["role"] for m in held["messages"]] == [
        "user",
        "assistant",
        "user",
        "system",
    ]
    # No model call between (a harness admitting again): the user merges into the held turn,
    # before the system update that trails it.
    again = await caller.admit("And the tests.", prompt="A\nPLAN")
    assert again.request.view is RequestView.DELTA
    assert again.request.replaced_body_items == 2
    body = json.loads(again.request.body_json)
    assert [m["role"] for m in body["messages"]] == ["user", "system"]
    assert [b["text"] for b in body["messages"][0]["content"]] == ["Plan it.", "And the tests."]
    assert dumps(caller.body) == await caller.full_body()
    # Read again: the held system update and user message (the update came first), not the
    # whole request.
    assert reads.windows == [2]


async def test_an_anthropic_delta_replays_byte_for_byte() -> None:
    """From the surface's nodes, and once a compaction shadowed them, from the log; both the
    DELTA of the new items alone and the one made again with the held turn."""
    caller = await start(Reads())
    await caller.admit("one")
    sent = []
    await caller.admit("two", output=caller.answered(Text("ok")))
    sent.append(caller.last)
    await caller.admit("three")  # merges into the held turn
    sent.append(caller.last)
    for (command, encoded), key in zip(sent, ("r2", "r3"), strict=True):
        replayed = await handlers.admit(caller.deps, "t", command, Idempotency(key, b"d"))
        assert replayed.result is None and replayed.encoded == encoded
    assert api.AdmitResponse.FromString(sent[1][1]).request.replaced_body_items == 1
    plan = await handlers.plan_compaction(
        caller.deps, "t", PlanCompactionCommand("s", retain_tokens=0)
    )
    await handlers.compact(caller.deps, "t", CompactCommand("s", plan.plan_token, "sum"), None)
    for (command, encoded), key in zip(sent, ("r2", "r3"), strict=True):
        replayed = await handlers.admit(caller.deps, "t", command, Idempotency(key, b"d"))
        assert replayed.result is None and replayed.encoded == encoded


def test_a_recipe_keeps_the_held_end_it_continued() -> None:
    end = MessagesEnd("anthropic", 4, "user", True, 3, "assistant")
    recipe = Recipe(3, 5, "anthropic_messages", True, "anthropic", "a", b"\x01" * 32)
    assert Recipe.from_json(recipe.to_json()) == recipe
    continued = replace(recipe, continues=end)
    assert Recipe.from_json(continued.to_json()) == continued


async def test_full_unless_the_caller_holds_the_body_the_service_rendered() -> None:
    caller = await start(Reads())
    await caller.admit("one")
    assert caller.held is not None
    held = caller.held
    # The held body's length not said (an older client): FULL, as before.
    untold = RequestSelection(RequestView.DELTA, replace(held, body_items=0))
    assert (await caller.admit("two", selection=untold)).request.view is RequestView.FULL
    # Another length than the list rendered: FULL.
    wrong = RequestSelection(RequestView.DELTA, replace(caller.held, body_items=5))
    assert (await caller.admit("three", selection=wrong)).request.view is RequestView.FULL
    # A chat body before: no Messages list to continue.
    await caller.admit("four", wire=WireFormat.OPENAI_CHAT, selection=caller.selection())
    assert caller.held is not None
    chat_held = replace(caller.held, body_items=1)
    after_chat = await caller.admit(
        "five", selection=RequestSelection(RequestView.DELTA, chat_held)
    )
    assert after_chat.request.view is RequestView.FULL
    # Holding that FULL body, the next is a DELTA again.
    again = await caller.admit("six")
    assert again.request.view is RequestView.DELTA
    assert dumps(caller.body) == await caller.full_body()


async def test_the_messages_alone_are_a_delta_without_a_held_body() -> None:
    caller = await start(Reads())
    first = await caller.admit("one")
    held = HeldPrefix(first.request.total_messages, first.request.digest)
    second = await caller.admit(
        "two",
        selection=RequestSelection(RequestView.DELTA, held),
        delivery=Delivery(RequestContent.MESSAGES),
    )
    assert second.request.view is RequestView.DELTA
    assert second.request.first_message_index == first.request.total_messages
    assert [m.role for m in second.request.messages] == [Role.USER]
