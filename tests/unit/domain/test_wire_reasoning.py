"""Reasoning that must travel back (issue 25) and the wire leftovers of issue 24: each format
renders opaque reasoning where its provider wants it, lists what it has no place for, and
refuses what its provider would refuse, by name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from admission_service.domain.errors import WireFormatError
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    ReasoningItem,
    RedactedReasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
    system_message,
)
from admission_service.domain.wire import Omission, WireFormat, render_body

from .sim import user

SIGNED = Reasoning("Need the file.", "c2lnbmVk")
REDACTED = RedactedReasoning(
    "anthropic", "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8c"
)
ITEM = ReasoningItem("rs_1", "gAAAAABencrypted==", ("Plan: read it.",))
CALL = ToolCall("c1", "read", '{"p":"a"}')
RESULT = Message(Role.TOOL, (ToolResult("c1", (Text("body"),)),))


def rendered(
    wire: WireFormat, messages: list[Message], provider: str = "anthropic"
) -> tuple[Any, tuple[Omission, ...]]:
    out = render_body(messages, wire, in_history=True, provider=provider)
    return json.loads(out.body_json), out.omitted


def turn(*blocks: Any) -> list[Message]:
    return [system_message("S"), user("go"), Message(Role.ASSISTANT, blocks), RESULT]


def test_anthropic_sends_thinking_and_redacted_thinking_back_in_order() -> None:
    body, omitted = rendered(
        WireFormat.ANTHROPIC_MESSAGES, turn(SIGNED, REDACTED, Text("ok"), CALL)
    )
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Need the file.", "signature": "c2lnbmVk"},
        {"type": "redacted_thinking", "data": REDACTED.data},
        {"type": "text", "text": "ok"},
        {"type": "tool_use", "id": "c1", "name": "read", "input": {"p": "a"}},
    ]
    assert omitted == ()


def test_anthropic_lists_what_it_has_no_place_for() -> None:
    blocks = (Reasoning("unsigned"), ITEM, REDACTED, Text("ok", "commentary"), CALL)
    body, omitted = rendered(WireFormat.ANTHROPIC_MESSAGES, turn(*blocks), provider="deepseek")
    assert [part["type"] for part in body["messages"][1]["content"]] == ["text", "tool_use"]
    assert [o.field for o in omitted] == [
        "messages[2].content[0]",
        "messages[2].content[1]",
        "messages[2].content[2]",
        "messages[2].content[3].text.phase",
    ]
    assert "'anthropic'" in omitted[2].why


def test_anthropic_refuses_thinking_that_a_merge_would_put_after_content() -> None:
    first = Message(Role.ASSISTANT, (Text("first"),))
    second = Message(Role.ASSISTANT, (SIGNED, Text("second")))
    with pytest.raises(WireFormatError) as raised:
        rendered(WireFormat.ANTHROPIC_MESSAGES, [user("go"), first, second])
    assert raised.value.metadata["field"] == "messages[2].content[0]"
    # Without thinking in the later message the merge keeps the earlier message's thinking first.
    body, _ = rendered(
        WireFormat.ANTHROPIC_MESSAGES,
        [
            user("go"),
            Message(Role.ASSISTANT, (SIGNED, Text("a"))),
            Message(Role.ASSISTANT, (Text("b"),)),
        ],
    )
    assert [part["type"] for part in body["messages"][1]["content"]] == ["thinking", "text", "text"]


def test_responses_sends_reasoning_items_before_the_item_they_preceded() -> None:
    later = ReasoningItem("rs_2", "", ("",), ("step",))
    blocks = (ITEM, Text("Reading.", "commentary"), later, CALL, SIGNED, REDACTED)
    body, omitted = rendered(WireFormat.OPENAI_RESPONSES, turn(*blocks), provider="openai")
    assert body["input"][2:5] == [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Plan: read it."}],
            "encrypted_content": "gAAAAABencrypted==",
        },
        {"role": "assistant", "content": "Reading.", "phase": "commentary"},
        {
            "type": "reasoning",
            "id": "rs_2",
            "summary": [{"type": "summary_text", "text": ""}],
            "content": [{"type": "reasoning_text", "text": "step"}],
        },
    ]
    assert body["input"][5]["type"] == "function_call"
    assert [o.field for o in omitted] == ["messages[2].content[4]", "messages[2].content[5]"]


def test_responses_joins_texts_of_one_phase_and_splits_phases() -> None:
    blocks = (Text("a", "commentary"), Text("b", "commentary"), Text("c", "final_answer"))
    body, _ = rendered(WireFormat.OPENAI_RESPONSES, [user("go"), Message(Role.ASSISTANT, blocks)])
    assert body["input"][1:] == [
        {"role": "assistant", "content": "ab", "phase": "commentary"},
        {"role": "assistant", "content": "c", "phase": "final_answer"},
    ]


def test_responses_omits_a_reasoning_item_nothing_followed() -> None:
    body, omitted = rendered(
        WireFormat.OPENAI_RESPONSES, [user("go"), Message(Role.ASSISTANT, (ITEM,))]
    )
    assert body["input"] == [{"role": "user", "content": [{"type": "input_text", "text": "go"}]}]
    assert omitted == (
        Omission(
            "messages[1].content[0]",
            "a reasoning item goes back only before the item that followed it",
        ),
    )


def test_chat_sends_deepseek_reasoning_and_lists_opaque_reasoning() -> None:
    blocks = (Reasoning("think"), REDACTED, ITEM, Text("ok", "final_answer"), CALL)
    body, omitted = rendered(WireFormat.OPENAI_CHAT, turn(*blocks), provider="deepseek")
    assert body["messages"][2]["reasoning_content"] == "think"
    assert [o.field for o in omitted] == [
        "messages[2].content[1]",
        "messages[2].content[2]",
        "messages[2].content[3].text.phase",
    ]
    _, on_openai = rendered(WireFormat.OPENAI_CHAT, turn(*blocks), provider="openai")
    assert on_openai[0].field == "messages[2].content[0]"


@pytest.mark.parametrize("wire", [w for w in WireFormat if w is not WireFormat.NEUTRAL])
@pytest.mark.parametrize(
    "image",
    [Image("data:image/svg+xml;base64,PHN2Zz4=", ""), Image("https://x/y.svg", "image/svg+xml")],
)
def test_an_image_type_the_provider_refuses_is_refused_by_name(
    wire: WireFormat, image: Image
) -> None:
    for messages, field in (
        ([Message(Role.USER, (Text("see"), image))], "messages[0].content[1]"),
        (
            [
                user("go"),
                Message(Role.ASSISTANT, (CALL,)),
                Message(Role.TOOL, (ToolResult("c1", (Text("shot"), image)),)),
            ],
            "messages[2].content[0].tool_result.content[1]",
        ),
    ):
        with pytest.raises(WireFormatError) as raised:
            render_body(messages, wire, in_history=True, provider="openai")
        assert raised.value.metadata["field"] == field
        assert "image/svg+xml" in str(raised.value)


def test_neutral_omits_nothing() -> None:
    out = render_body(turn(ITEM, REDACTED, CALL), WireFormat.NEUTRAL, in_history=True)
    assert (out.body_json, out.omitted) == ("", ())
