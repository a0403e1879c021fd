"""Sessions driven through the real server: after every step, Inspect's body in each format is
one the provider accepts (tests/provider/oracles.py), or a refusal naming what the format
cannot express; Admit refuses it with UNSUPPORTED_WIRE_CONTENT, Record refuses what no format
can express, and a step is not admitted while a tool call is unanswered."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
import pytest
from admission_service.cli import format_inspect
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import IN_HISTORY_ROUTE, REPLACE_ROUTE, create_session, rich_error
from tests.provider.oracles import check_body
from tests.provider.sessions import PNG

if TYPE_CHECKING:
    Stub = api_grpc.AdmissionServiceAsyncStub
ANTHROPIC_ROUTE = pb.Route(
    provider="anthropic",
    model="claude-test",
    system_prompt_update=pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY,
)
ROUTES = {"deepseek": IN_HISTORY_ROUTE, "anthropic": ANTHROPIC_ROUTE, "openai": REPLACE_ROUTE}
FORMATS = {
    "openai_chat": pb.WIRE_FORMAT_OPENAI_CHAT,
    "openai_responses": pb.WIRE_FORMAT_OPENAI_RESPONSES,
    "anthropic_messages": pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
}
TOOLS = [
    pb.Tool(
        name="read_file",
        description="Read a file",
        parameters_json='{"type":"object","properties":{"path":{"type":"string"}}}',
    ),
    pb.Tool(name="screenshot"),
]


def text(value: str) -> pb.ContentBlock:
    return pb.ContentBlock(text=pb.TextBlock(text=value))


def image(uri: str) -> pb.ContentBlock:
    return pb.ContentBlock(image=pb.ImageBlock(uri=uri, media_type="image/png"))


def call(
    call_id: str, name: str = "read_file", arguments: str = '{"path":"a.py"}'
) -> pb.ContentBlock:
    return pb.ContentBlock(
        tool_call=pb.ToolCallBlock(call_id=call_id, name=name, arguments_json=arguments)
    )


def reasoning(value: str, signature: str = "") -> pb.ContentBlock:
    return pb.ContentBlock(reasoning=pb.ReasoningBlock(text=value, signature=signature))


# The tokenizer each route family prices with (admission_service/tokenizers.py).
TOKENIZERS = {"deepseek": "deepseek-v4", "anthropic": "claude", "openai": "o200k_base"}


class Driver:
    """One session on one route, checking every format's body after each step."""

    def __init__(self, stub: Stub, session_id: str, provider: str) -> None:
        self.stub, self.session_id, self.provider = stub, session_id, provider
        self.route = ROUTES[provider]
        self.step = 0
        self.refusals: set[tuple[str, str]] = set()

    async def admit(self, prompt: str, *users: list[pb.ContentBlock]) -> str:
        self.step += 1
        admitted = await self.stub.Admit(
            api.AdmitRequest(
                session_id=self.session_id,
                step=self.step,
                rendered_prompt=prompt,
                tools=TOOLS,
                route=self.route,
                users=[pb.Message(role=pb.MESSAGE_ROLE_USER, content=user) for user in users],
            )
        )
        await self.check_every_format()
        return admitted.admission_id

    async def record(
        self, admission_id: str, assistant: list[pb.ContentBlock], *results: pb.ToolResult
    ) -> None:
        await self.stub.Record(
            api.RecordRequest(
                session_id=self.session_id,
                admission_id=admission_id,
                assistant=pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=assistant),
                tool_results=results,
            )
        )
        await self.check_every_format()

    async def check_every_format(self) -> None:
        in_history = self.route is not REPLACE_ROUTE
        for name, wire in FORMATS.items():
            inspected = await self.stub.Inspect(
                api.InspectRequest(session_id=self.session_id, wire_format=wire)
            )
            request = inspected.request
            assert inspected.breakdown.tokenizer == TOKENIZERS[self.provider]
            if request.HasField("render_error"):
                assert not request.body_json and request.messages
                assert request.render_error.reason == "UNSUPPORTED_WIRE_CONTENT"
                self.refusals.add((name, request.render_error.field))
                continue
            problems = check_body(
                name, request.body_json, provider=self.provider, in_history=in_history
            )
            assert problems == [], (name, self.provider, request.body_json)


@pytest.mark.parametrize("provider", list(ROUTES))
async def test_an_agent_session_renders_for_every_provider(stub: Stub, provider: str) -> None:
    driver = Driver(stub, await create_session(stub), provider)
    first = await driver.admit("You are careful.", [text("Look at this"), image(PNG)])
    await driver.record(
        first,
        [
            reasoning("Two files.", "c2lnbmF0dXJl"),
            text(""),
            call("c1"),
            call("c2", "screenshot", "{}"),
        ],
        pb.ToolResult(call_id="c1", content=[text("no such file")], is_error=True),
        pb.ToolResult(call_id="c2", content=[text("shot:"), image("https://example.com/s.png")]),
    )
    second = await driver.admit("You are careful. PLAN MODE.", [text(""), text("Plan it.")])
    await driver.record(second, [reasoning("Only thinking.")])
    third = await driver.admit("You are careful. PLAN MODE.", [text("Well?")])
    await driver.record(third, [text("Plan: split main.py.")])
    plan = await stub.PlanCompaction(
        api.PlanCompactionRequest(session_id=driver.session_id, retain_tokens=0)
    )
    await stub.Compact(
        api.CompactRequest(session_id=driver.session_id, plan_token=plan.plan_token, summary="s")
    )
    await driver.admit("You are careful.", [text("Go ahead.")])
    # The only refusal: DeepSeek's Anthropic-compatible API takes no images, and the first image
    # is in the first user message, DerivedRequest.messages[1] (until compaction folds it).
    expected = (
        {("anthropic_messages", "messages[1].content[1]")} if provider == "deepseek" else set()
    )
    assert driver.refusals == expected


async def test_admit_refuses_a_body_the_format_cannot_express(stub: Stub) -> None:
    session_id = await create_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Admit(
            api.AdmitRequest(
                session_id=session_id,
                rendered_prompt="A",
                route=IN_HISTORY_ROUTE,
                users=[pb.Message(role=pb.MESSAGE_ROLE_USER, content=[text("see"), image(PNG)])],
                wire_format=pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
            )
        )
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.FAILED_PRECONDITION
    assert error.reason == "UNSUPPORTED_WIRE_CONTENT"
    assert "messages[1].content[1]" in error.message and "ANTHROPIC_MESSAGES" in error.message
    session = await stub.GetSession(api.GetSessionRequest(session_id=session_id))
    assert session.session.event_count == 0


async def one_step(
    stub: Stub, route: pb.Route, assistant: list[pb.ContentBlock], *results: pb.ToolResult
) -> tuple[str, str]:
    """A new session with one admitted step and its recorded output: (session, admission)."""
    session_id = await create_session(stub)
    admitted = await stub.Admit(
        api.AdmitRequest(
            session_id=session_id,
            rendered_prompt="A",
            route=route,
            users=[pb.Message(role=pb.MESSAGE_ROLE_USER, content=[text("go")])],
        )
    )
    await stub.Record(
        api.RecordRequest(
            session_id=session_id,
            admission_id=admitted.admission_id,
            assistant=pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=assistant),
            tool_results=results,
        )
    )
    return session_id, admitted.admission_id


async def test_no_step_is_admitted_while_a_tool_call_is_unanswered(stub: Stub) -> None:
    session_id, admission_id = await one_step(
        stub,
        REPLACE_ROUTE,
        [call("c1"), call("c2")],
        pb.ToolResult(call_id="c1", content=[text("one")]),
    )
    before = await stub.GetSession(api.GetSessionRequest(session_id=session_id))
    next_step = api.AdmitRequest(
        session_id=session_id,
        step=1,
        rendered_prompt="B",
        route=REPLACE_ROUTE,
        users=[pb.Message(role=pb.MESSAGE_ROLE_USER, content=[text("next")])],
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Admit(next_step)
    error = rich_error(caught.value)
    assert (error.code, error.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "UNANSWERED_TOOL_CALL",
    )
    assert error.error_infos[0].metadata["call_id"] == "c2"
    after = await stub.GetSession(api.GetSessionRequest(session_id=session_id))
    assert after.session.revision == before.session.revision
    await stub.Record(
        api.RecordRequest(
            session_id=session_id,
            admission_id=admission_id,
            tool_results=[pb.ToolResult(call_id="c2", content=[text("two")])],
        )
    )
    next_step.wire_format = pb.WIRE_FORMAT_OPENAI_CHAT
    answer = await stub.Admit(next_step)
    assert (
        check_body("openai_chat", answer.request.body_json, provider="openai", in_history=False)
        == []
    )


@pytest.mark.parametrize(
    ("result", "field"),
    [
        (pb.ToolResult(call_id="c1", content=[text("")], is_error=True), "tool_results[0].content"),
        (
            pb.ToolResult(call_id="c1", content=[image("data:image/png,raw")]),
            "tool_results[0].content[0].image.uri",
        ),
        (
            pb.ToolResult(
                call_id="c1",
                content=[pb.ContentBlock(image=pb.ImageBlock(uri=PNG, media_type="image/jpeg"))],
            ),
            "tool_results[0].content[0].image.media_type",
        ),
    ],
)
async def test_record_refuses_what_no_format_can_express(
    stub: Stub, result: pb.ToolResult, field: str
) -> None:
    session_id = await create_session(stub)
    admitted = await stub.Admit(
        api.AdmitRequest(session_id=session_id, rendered_prompt="A", route=REPLACE_ROUTE)
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Record(
            api.RecordRequest(
                session_id=session_id,
                admission_id=admitted.admission_id,
                assistant=pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=[call("c1")]),
                tool_results=[result],
            )
        )
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.violated_fields == [field]


async def test_a_reasoning_signature_round_trips(stub: Stub) -> None:
    session_id, _ = await one_step(stub, ANTHROPIC_ROUTE, [reasoning("r", "c2ln"), text("a")])
    inspected = await stub.Inspect(
        api.InspectRequest(
            session_id=session_id,
            wire_format=pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
            content=pb.REQUEST_CONTENT_BOTH,
        )
    )
    assert inspected.request.messages[-1].content[0].reasoning.signature == "c2ln"
    assert '{"type":"thinking","thinking":"r","signature":"c2ln"}' in inspected.request.body_json


def test_inspect_on_the_command_line_prints_why_the_body_cannot_be_rendered() -> None:
    response = api.InspectResponse(
        session=pb.Session(session_id="s"),
        effective_prompt=pb.EffectivePrompt(location=pb.PROMPT_LOCATION_NONE),
        request=pb.DerivedRequest(
            wire_format=pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
            render_error=pb.RenderError(
                reason="UNSUPPORTED_WIRE_CONTENT",
                field="messages[1].content[1]",
                message="messages[1].content[1]: no images (WIRE_FORMAT_ANTHROPIC_MESSAGES)",
            ),
        ),
    )
    out = format_inspect(response)
    assert "body: cannot be rendered: messages[1].content[1]: no images" in out
