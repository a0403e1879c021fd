"""What a derived request's response carries (issue 23 item 1), on the in-memory storage: the
wire format's one form by default, both only when asked; a body nobody asked for is never
rendered; the bound counts only what is sent; a replay rebuilds each choice byte for byte, and
a recipe stored before the choice existed reads as both."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

import pytest
import xxhash
from admission_service.api import convert
from admission_service.app import derivation, handlers
from admission_service.app.commands import (
    AdmitCommand,
    CompactCommand,
    Delivery,
    Idempotency,
    PlanCompactionCommand,
    RequestContent,
    Spliced,
)
from admission_service.app.deps import Deps
from admission_service.app.limits import Limits
from admission_service.app.replay import Recipe
from admission_service.domain.errors import ResponseTooLarge
from admission_service.domain.messages import Tool
from admission_service.domain.wire import WireFormat
from admission_service.domain.wire import rendered_tools as wire_tools
from admission_service.storage import codec
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.app_support import CATALOG, ROUTE, user
from tests.fakes.storage import FakeStorage
from tests.unit.app.test_use_cases import TOKENS


def make_app(storage: FakeStorage, **kwargs: Any) -> Deps:
    return Deps.compose(
        None, CATALOG, page_tokens=TOKENS, storage=storage, encoders=convert.ENCODERS, **kwargs
    )


async def admit_encoded(
    deps: Deps, sid: str, turn: int, wire: WireFormat, content: RequestContent | None, key: str
) -> tuple[AdmitCommand, Idempotency, bytes]:
    command = AdmitCommand(
        sid,
        turn,
        1,
        "A",
        (),
        ROUTE,
        (user(f"turn {turn} \U0001f600"),),
        wire_format=wire,
        delivery=Delivery(content),
    )
    idempotency = Idempotency(key, b"digest")
    reply = await handlers.admit(deps, "t", command, idempotency)
    assert reply.encoded is not None
    return command, idempotency, reply.encoded


@pytest.mark.parametrize(
    ("wire", "content", "expected"),
    [
        (WireFormat.NEUTRAL, None, pb.REQUEST_CONTENT_MESSAGES),
        (WireFormat.OPENAI_CHAT, None, pb.REQUEST_CONTENT_BODY),
        (WireFormat.ANTHROPIC_MESSAGES, None, pb.REQUEST_CONTENT_BODY),
        (WireFormat.OPENAI_RESPONSES, RequestContent.MESSAGES, pb.REQUEST_CONTENT_MESSAGES),
        (WireFormat.OPENAI_RESPONSES, RequestContent.BOTH, pb.REQUEST_CONTENT_BOTH),
        (WireFormat.NEUTRAL, RequestContent.BOTH, pb.REQUEST_CONTENT_BOTH),
    ],
)
async def test_a_response_carries_what_was_asked(
    wire: WireFormat, content: RequestContent | None, expected: int
) -> None:
    deps = make_app(FakeStorage())
    await handlers.create_session(deps, "t", "s", None)
    _, _, encoded = await admit_encoded(deps, "s", 1, wire, content, "r1")
    request = api.AdmitResponse.FromString(encoded).request
    assert request.content == expected
    messages = expected != pb.REQUEST_CONTENT_BODY
    body = expected != pb.REQUEST_CONTENT_MESSAGES and wire is not WireFormat.NEUTRAL
    assert len(request.messages) == (2 if messages else 0)
    assert bool(request.body_json) is body
    assert request.total_messages == 2


async def test_a_body_not_asked_for_is_not_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    def render_body(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("rendered")

    monkeypatch.setattr(derivation, "render_body", render_body)
    deps = make_app(FakeStorage())
    await handlers.create_session(deps, "t", "s", None)
    _, _, encoded = await admit_encoded(
        deps, "s", 1, WireFormat.OPENAI_CHAT, RequestContent.MESSAGES, "r1"
    )
    assert len(api.AdmitResponse.FromString(encoded).request.messages) == 2


async def test_the_bound_counts_only_what_is_sent() -> None:
    """Messages and body of about 60 KB each: one fits a 100 KB bound, both do not; a
    streamed call has its own bound."""
    limits = replace(Limits(), max_response_bytes=100_000, max_streamed_response_bytes=110_000)
    deps = make_app(FakeStorage(), limits=limits)
    await handlers.create_session(deps, "t", "s", None)
    text = "\u00e9" * 30_000  # 60 000 bytes in the frames and in the body
    for content in (RequestContent.MESSAGES, RequestContent.BODY):
        command = AdmitCommand(
            "s",
            1,
            1,
            "A",
            (),
            ROUTE,
            (user(text),),
            wire_format=WireFormat.OPENAI_CHAT,
            validate_only=True,
            delivery=Delivery(content),
        )
        await handlers.admit(deps, "t", command, None)
    both = replace(command, delivery=Delivery(RequestContent.BOTH))
    with pytest.raises(ResponseTooLarge) as refused:
        await handlers.admit(deps, "t", both, None)
    assert refused.value.metadata["bound"] == "max_response_bytes"
    streamed = replace(command, delivery=Delivery(RequestContent.BOTH, streamed=True))
    with pytest.raises(ResponseTooLarge) as refused:
        await handlers.admit(deps, "t", streamed, None)
    assert refused.value.metadata["bound"] == "max_streamed_response_bytes"


READ = Tool("read", "reads a file", '{"type":"object","properties":{"path":{"type":"string"}}}')


def with_tool(tool: Tool, wire: WireFormat, **fields: Any) -> AdmitCommand:
    """Session "s"'s first step, with one user message and ``tool``."""
    return AdmitCommand("s", 1, 1, "A", (tool,), ROUTE, (user("hi"),), wire_format=wire, **fields)


@pytest.mark.parametrize(
    ("wire", "content"),
    [
        (WireFormat.NEUTRAL, None),
        (WireFormat.OPENAI_CHAT, None),
        (WireFormat.ANTHROPIC_MESSAGES, RequestContent.MESSAGES),
        (WireFormat.OPENAI_RESPONSES, RequestContent.BOTH),
    ],
)
async def test_the_typed_tools_go_with_the_typed_messages(
    wire: WireFormat, content: RequestContent | None
) -> None:
    """A body carries the tools in its own shape: a response carrying only the body does not
    carry them again as typed tools."""
    deps = make_app(FakeStorage())
    await handlers.create_session(deps, "t", "s", None)
    command = with_tool(READ, wire, delivery=Delivery(content))
    reply = await handlers.admit(deps, "t", command, Idempotency("r1", b"digest"))
    assert reply.encoded is not None
    request = api.AdmitResponse.FromString(reply.encoded).request
    typed = request.content != pb.REQUEST_CONTENT_BODY
    assert [tool.name for tool in request.tools] == (["read"] if typed else [])
    if request.body_json:
        assert json.loads(request.body_json)["tools"][0] == json.loads(wire_tools(wire, [READ]))[0]
    replayed = await handlers.admit(deps, "t", command, Idempotency("r1", b"digest"))
    assert replayed.encoded == reply.encoded


async def test_the_idempotency_record_keeps_neither_the_prompt_nor_the_tools() -> None:
    """The prompt and tools are the admission's, stored once by digest: a record keeps the
    head without them and replays them from the admission; a record stored when the head held
    them replays as it was sent."""
    storage = FakeStorage()
    deps = make_app(storage)
    await handlers.create_session(deps, "t", "s", None)
    schema = json.dumps({"type": "object", "description": "unique-schema-text " * 50})
    prompt = "unique-prompt-text " * 50
    command = AdmitCommand("s", 1, 1, prompt, (Tool("big", "", schema),), ROUTE, (user("hi"),))
    await handlers.admit(deps, "t", command, None)  # logs the header, which lists the tools
    command = replace(command, step=2, users=(user("go on"),))
    key = Idempotency("r1", b"digest")
    first = await handlers.admit(deps, "t", command, key)
    assert first.encoded is not None and first.result is not None
    sent = api.AdmitResponse.FromString(first.encoded)
    assert sent.effective_prompt.text == prompt
    assert [tool.parameters_json for tool in sent.request.tools] == [schema]
    record = storage.state.responses[("t", "s")]["r1"]
    assert b"unique-schema-text" not in record.response
    assert b"unique-prompt-text" not in record.response
    replayed = await handlers.admit(deps, "t", command, key)
    assert replayed.encoded == first.encoded

    # A record stored before: its head holds the prompt and the tools, its recipe names neither.
    assert record.derived_request is not None
    recipe = codec.loads(record.derived_request)
    assert recipe.pop("tools") is True and recipe.pop("prompt") is True
    # ... and is checked by its SHA-256 (recipes now keep XXH3's 128 bits: replay.CHECK_ALGORITHM).
    assert recipe.pop("response_xxh3_128") == xxhash.xxh3_128_hexdigest(first.encoded)
    parts = Spliced.of(first.result)
    old_head = convert.admit_response(first.result, with_messages=False).SerializeToString(
        deterministic=True
    ) + convert.encode_admit.splice(b"", Spliced(tools=parts.tools))
    old = old_head + convert.encode_admit.splice(b"", replace(parts, prompt="", tools=()))
    assert api.AdmitResponse.FromString(old) == sent
    recipe["response_sha256"] = hashlib.sha256(old).hexdigest()
    storage.state.responses[("t", "s")]["r1"] = replace(
        record, response=old_head, derived_request=codec.dumps(recipe)
    )
    replayed = await handlers.admit(deps, "t", command, key)
    assert replayed.encoded == old


async def test_the_bound_counts_the_typed_tools_sent() -> None:
    """A 50 KB tool set and a short message: over a 40 KB bound as typed tools (NEUTRAL) and
    inside a body alike."""
    limits = replace(Limits(), max_response_bytes=40_000)
    deps = make_app(FakeStorage(), limits=limits)
    await handlers.create_session(deps, "t", "s", None)
    schema = json.dumps({"type": "object", "description": "x" * 50_000})
    for wire in (WireFormat.NEUTRAL, WireFormat.OPENAI_CHAT):
        command = with_tool(Tool("big", "", schema), wire, validate_only=True)
        with pytest.raises(ResponseTooLarge):
            await handlers.admit(deps, "t", command, None)


async def test_each_content_replays_byte_for_byte() -> None:
    """From the surface's nodes, and once a compaction shadowed them, from the log."""
    deps = make_app(FakeStorage())
    await handlers.create_session(deps, "t", "s", None)
    sent = []
    choices = [None, RequestContent.MESSAGES, RequestContent.BODY, RequestContent.BOTH]
    for turn, content in enumerate(choices, start=1):
        sent.append(
            await admit_encoded(deps, "s", turn, WireFormat.OPENAI_RESPONSES, content, f"r{turn}")
        )
    for command, key, encoded in sent:
        replayed = await handlers.admit(deps, "t", command, key)
        assert replayed.result is None and replayed.encoded == encoded
    plan = await handlers.plan_compaction(deps, "t", PlanCompactionCommand("s", retain_tokens=0))
    await handlers.compact(deps, "t", CompactCommand("s", plan.plan_token, "summary"), None)
    for command, key, encoded in sent:
        replayed = await handlers.admit(deps, "t", command, key)
        assert replayed.result is None and replayed.encoded == encoded


def test_a_recipe_stored_before_the_choice_carried_both() -> None:
    recipe = Recipe(3, 0, "openai_chat", False, "openai", "a", b"\x01" * 32)
    stored = codec.loads(recipe.to_json())
    assert stored.pop("content") == "both"
    old = Recipe.from_json(codec.dumps(stored))
    assert old == recipe and old.content is RequestContent.BOTH
    body_only = replace(recipe, content=RequestContent.BODY)
    assert Recipe.from_json(body_only.to_json()) == body_only


async def test_a_lone_surrogate_a_caller_escaped_is_answered_and_replayed() -> None:
    """A schema may escape a lone surrogate, which UTF-8 cannot hold: the body sends the escape
    (the response once failed to encode, after the step had committed)."""
    deps = make_app(FakeStorage())
    await handlers.create_session(deps, "t", "s", None)
    schema = '{"type":"object","description":"\\ud800"}'
    command = with_tool(Tool("read", "", schema), WireFormat.ANTHROPIC_MESSAGES)
    key = Idempotency("r1", b"digest")
    reply = await handlers.admit(deps, "t", command, key)
    assert reply.encoded is not None
    body = api.AdmitResponse.FromString(reply.encoded).request.body_json
    assert json.loads(body)["tools"][0]["input_schema"]["description"] == "\ud800"
    assert (await handlers.admit(deps, "t", command, key)).encoded == reply.encoded
