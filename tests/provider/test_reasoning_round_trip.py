"""Reasoning that must travel back (issue 25), against the official SDKs: a provider response —
the SDK's own response type, non-streamed or accumulated by the SDK's stream helper from
recorded server-sent events (tests/fixtures/reasoning) — is recorded through the next Admit's
previous_output on the real server, and the next derived request validates against the SDK's
param types, carries the opaque data byte for byte where the provider wants it, and reaches the
provider through the SDK unchanged.

The three turns: Anthropic extended thinking with a redacted_thinking block and a tool call; a
stateless Responses turn (``store: false``, ``include: ["reasoning.encrypted_content"]``)
whose reasoning items carry encrypted_content; a DeepSeek thinking-mode turn streamed as
``reasoning_content`` deltas then a tool call. The TypeScript client runs the same fixtures
(clients/typescript/test/reasoning.test.ts).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from admission_service.domain.accounting import BLOCK_OVERHEAD, opaque_tokens
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import create_session, rich_error, user
from tests.clients.harness_sdk import anthropic_client, openai_client, sdk_response
from tests.provider.oracles import check_body
from tests.provider.recording import ProviderServer, provider_server

if TYPE_CHECKING:
    from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

    Stub = api_grpc.AdmissionServiceAsyncStub

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reasoning"
CASES = {path.stem: json.loads(path.read_text()) for path in sorted(FIXTURES.glob("*.json"))}
FORMATS = {
    "openai_chat": pb.WIRE_FORMAT_OPENAI_CHAT,
    "openai_responses": pb.WIRE_FORMAT_OPENAI_RESPONSES,
    "anthropic_messages": pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
}
TOOL = pb.Tool(
    name="read_file",
    description="Read a file",
    parameters_json='{"type":"object","properties":{"path":{"type":"string"}}}',
)


def _text(value: str, phase: str = "") -> pb.ContentBlock:
    return pb.ContentBlock(text=pb.TextBlock(text=value, phase=phase))


def _call(call_id: str, name: str, arguments: str) -> pb.ContentBlock:
    return pb.ContentBlock(
        tool_call=pb.ToolCallBlock(call_id=call_id, name=name, arguments_json=arguments)
    )


def assistant_of(wire: str, response: Any) -> pb.Message:
    """The SDK response as the assistant message a harness records: every block, in order."""
    blocks: list[pb.ContentBlock] = []
    if wire == "anthropic_messages":
        for block in response.content:
            if block.type == "thinking":
                reasoning = pb.ReasoningBlock(text=block.thinking, signature=block.signature)
                blocks.append(pb.ContentBlock(reasoning=reasoning))
            elif block.type == "redacted_thinking":
                redacted = pb.RedactedReasoningBlock(provider="anthropic", data=block.data)
                blocks.append(pb.ContentBlock(redacted_reasoning=redacted))
            elif block.type == "tool_use":
                blocks.append(_call(block.id, block.name, json.dumps(block.input)))
            else:
                blocks.append(_text(block.text))
    elif wire == "openai_responses":
        for item in response.output:
            if item.type == "reasoning":
                reasoning_item = pb.ReasoningItemBlock(
                    id=item.id,
                    encrypted_content=item.encrypted_content or "",
                    summary=[part.text for part in item.summary],
                    content=[part.text for part in item.content or []],
                )
                blocks.append(pb.ContentBlock(reasoning_item=reasoning_item))
            elif item.type == "message":
                blocks.extend(_text(part.text, item.phase or "") for part in item.content)
            else:
                blocks.append(_call(item.call_id, item.name, item.arguments))
    else:
        message = response.choices[0].message
        reasoning_content = getattr(message, "reasoning_content", None)  # DeepSeek's extension
        if reasoning_content:
            blocks.append(pb.ContentBlock(reasoning=pb.ReasoningBlock(text=reasoning_content)))
        if message.content:
            blocks.append(_text(message.content))
        for tool_call in message.tool_calls or []:
            function = tool_call.function
            blocks.append(_call(tool_call.id, function.name, function.arguments))
    return pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=blocks)


def expected_reasoning(case: dict[str, Any]) -> list[Any]:
    """What the next request must carry, exactly, taken from the fixture's provider response:
    the Anthropic thinking and redacted_thinking blocks, the Responses reasoning items as input
    items (plus the phased message), DeepSeek's whole reasoning_content."""
    response = case["response"]
    if case["wire_format"] == "anthropic_messages":
        return [b for b in response["content"] if b["type"] in {"thinking", "redacted_thinking"}]
    if case["wire_format"] == "openai_responses":
        return [
            {key: item[key] for key in ("type", "id", "summary", "encrypted_content")}
            for item in response["output"]
            if item["type"] == "reasoning"
        ]
    return [case["reasoning_content"]]


def carried_reasoning(wire: str, body: dict[str, Any]) -> list[Any]:
    if wire == "anthropic_messages":
        (turn,) = [m for m in body["messages"] if m["role"] == "assistant"]
        return [b for b in turn["content"] if b["type"] in {"thinking", "redacted_thinking"}]
    if wire == "openai_responses":
        return [item for item in body["input"] if item.get("type") == "reasoning"]
    (turn,) = [m for m in body["messages"] if m["role"] == "assistant"]
    return [turn["reasoning_content"]]


def post_through_sdk(
    server: ProviderServer, case: dict[str, Any], body: dict[str, Any]
) -> dict[str, Any]:
    """The next request posted by the official SDK (model and the harness's fields merged): the
    JSON the provider receives."""
    server.answer({"response": case["response"]})
    wire = case["wire_format"]
    if wire == "anthropic_messages":
        anthropic_client(server).messages.create(model="claude-test", max_tokens=64, **body)
    elif wire == "openai_responses":
        openai_client(server).responses.create(model="gpt-test", **case["request"], **body)
    else:
        openai_client(server).chat.completions.create(model="deepseek-flash", **body)
    return server.requests[-1][1]


async def two_steps(
    stub: Stub, case: dict[str, Any], assistant: pb.Message
) -> tuple[str, api.AdmitResponse]:
    """Admit a step, then the next one with ``assistant`` and its tool result as the previous
    output: the session and the next step's response."""
    route = pb.Route(provider=case["provider"], model="reasoning-model", context_window=200_000)
    session_id = await create_session(stub)

    def step(number: int) -> api.AdmitRequest:
        return api.AdmitRequest(
            session_id=session_id,
            route=route,
            tools=[TOOL],
            turn=1,
            step=number,
            rendered_prompt="Be brief.",
            wire_format=FORMATS[case["wire_format"]],
        )

    first_request = step(1)
    first_request.users.append(user("a.py?"))
    first = await stub.Admit(first_request)
    result = case["tool_result"]
    second_request = step(2)
    second_request.previous_output.CopyFrom(
        api.StepOutput(
            admission_id=first.admission_id,
            assistant=assistant,
            tool_results=[
                pb.ToolResult(call_id=result["call_id"], content=[_text(result["text"])])
            ],
        )
    )
    second = await stub.Admit(second_request)
    return session_id, second


@pytest.mark.parametrize("mode", ["response", "stream"])
@pytest.mark.parametrize("name", sorted(CASES))
async def test_reasoning_round_trips_into_the_next_request(
    stub: Stub, name: str, mode: str
) -> None:
    case = CASES[name]
    wire = case["wire_format"]
    with provider_server() as server:
        response = sdk_response({"wire_format": wire, mode: case[mode]}, server)
        if mode == "stream" and wire == "openai_chat":
            # The Python SDK's accumulator concatenates the deltas (the Node SDK keeps the last).
            assert response.choices[0].message.reasoning_content == case["reasoning_content"]
        _, second = await two_steps(stub, case, assistant_of(wire, response))

        body_json = second.request.body_json
        assert check_body(wire, body_json, provider=case["provider"], in_history=False) == []
        body = json.loads(body_json)
        assert carried_reasoning(wire, body) == expected_reasoning(case)
        assert list(second.request.omitted) == []
        received = post_through_sdk(server, case, body)
        assert carried_reasoning(wire, received) == expected_reasoning(case)
        assert {key: received[key] for key in body} == body  # byte for byte through the SDK


def test_the_responses_turn_keeps_its_order_and_phase() -> None:
    """The Responses fixture's next input: each reasoning item before the item it preceded,
    the commentary message with its phase (the SDK's ResponseOutputMessage.phase)."""
    case = CASES["openai-responses-encrypted-reasoning"]
    kinds = [item["type"] for item in case["response"]["output"]]
    assert kinds == ["reasoning", "message", "reasoning", "function_call"]
    assert case["response"]["output"][1]["phase"] == "commentary"
    assert case["request"] == {"store": False, "include": ["reasoning.encrypted_content"]}


async def test_inspect_lists_what_another_format_leaves_out(stub: Stub) -> None:
    """The same Anthropic turn inspected as OpenAI Chat: the thinking and the redacted thinking
    are listed as omitted, by field, not dropped unreported."""
    case = CASES["anthropic-redacted-thinking-tool-use"]
    with provider_server() as server:
        response = sdk_response(
            {"wire_format": case["wire_format"], "response": case["response"]}, server
        )
    session_id, _ = await two_steps(stub, case, assistant_of(case["wire_format"], response))
    inspected = await stub.Inspect(
        api.InspectRequest(session_id=session_id, wire_format=pb.WIRE_FORMAT_OPENAI_CHAT)
    )
    assert [(o.field, o.why) for o in inspected.request.omitted] == [
        ("messages[2].content[0]", "the anthropic chat API takes no reasoning back"),
        ("messages[2].content[1]", "Chat Completions has no place for opaque reasoning"),
    ]


async def test_opaque_reasoning_is_priced_as_the_reasoning_it_hides(stub: Stub) -> None:
    """The same turn with and without its redacted_thinking block: the next request's forecast
    and Inspect's breakdown differ by the block's price, its data counted as the bytes it hides
    (the provider bills the hidden thinking as input when the block is sent back)."""
    case = CASES["anthropic-redacted-thinking-tool-use"]
    with provider_server() as server:
        response = sdk_response(
            {"wire_format": case["wire_format"], "response": case["response"]}, server
        )
    full = assistant_of(case["wire_format"], response)
    without = pb.Message(role=full.role)
    without.content.extend(b for b in full.content if not b.HasField("redacted_reasoning"))
    priced = []
    for assistant in (full, without):
        session_id, second = await two_steps(stub, case, assistant)
        inspected = await stub.Inspect(api.InspectRequest(session_id=session_id))
        priced.append((second.forecast.total_tokens, inspected.breakdown.message_tokens))
    data = next(b["data"] for b in case["response"]["content"] if b["type"] == "redacted_thinking")
    price = opaque_tokens(data) + BLOCK_OVERHEAD
    assert price > 200  # 1 280 hidden bytes, not the few tokens a tokenizer makes of nothing
    assert (priced[0][0] - priced[1][0], priced[0][1] - priced[1][1]) == (price, price)


@pytest.mark.parametrize(
    ("block", "field"),
    [
        (
            pb.ContentBlock(redacted_reasoning=pb.RedactedReasoningBlock(provider="anthropic")),
            "previous_output.assistant.content[0].redacted_reasoning.data",
        ),
        (
            pb.ContentBlock(reasoning_item=pb.ReasoningItemBlock(encrypted_content="gAAA")),
            "previous_output.assistant.content[0].reasoning_item.id",
        ),
        (_text("x", "draft"), "previous_output.assistant.content[0].text.phase"),
    ],
)
async def test_an_incomplete_reasoning_block_is_refused_by_name(
    stub: Stub, block: pb.ContentBlock, field: str
) -> None:
    """A reasoning block the provider would refuse back is INVALID_ARGUMENT naming its field."""
    case = CASES["anthropic-redacted-thinking-tool-use"]
    assistant = pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=[block])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await two_steps(stub, case, assistant)
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert field in error.message
    assert any(info.metadata.get("field") == field for info in error.error_infos)
