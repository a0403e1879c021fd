"""Provider wire formats (SPEC §7, reference §7)."""

from __future__ import annotations

import json

import pytest
from admission_service.domain.errors import WireFormatError
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
    system_message,
)
from admission_service.domain.wire import WireFormat, render

from .sim import user

CALL = Message(
    Role.ASSISTANT, (Reasoning("think"), Text("let me look"), ToolCall("c1", "read", '{"p":"a"}'))
)
RESULT = Message(Role.TOOL, (ToolResult("c1", (Text("file body"),)),))
CONVERSATION = [
    system_message("A"),
    user("hi"),
    CALL,
    RESULT,
    system_message("B"),
    Message(Role.USER, (Text("see"), Image("https://x/y.png", "image/png"))),
    Message(Role.ASSISTANT, (Text("done"),)),
]


def body(wire: WireFormat, messages: list[Message] = CONVERSATION, in_history: bool = True) -> dict:  # type: ignore[type-arg]
    return json.loads(render(messages, wire, in_history=in_history))  # type: ignore[no-any-return]


def test_neutral_has_no_body() -> None:
    assert render(CONVERSATION, WireFormat.NEUTRAL, in_history=False) == ""


def test_openai_chat_keeps_later_system_messages_in_place() -> None:
    messages = body(WireFormat.OPENAI_CHAT)["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "system",
        "user",
        "assistant",
    ]
    assert messages[2]["reasoning_content"] == "think"
    assert messages[2]["tool_calls"][0]["function"] == {"name": "read", "arguments": '{"p":"a"}'}
    assert messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "file body"}
    assert messages[5]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "https://x/y.png"},
    }


def test_openai_responses_sends_later_system_messages_as_developer() -> None:
    items = body(WireFormat.OPENAI_RESPONSES)["input"]
    assert items[0] == {"role": "system", "content": "A"}
    assert {"role": "developer", "content": "B"} in items
    assert {
        "type": "function_call",
        "call_id": "c1",
        "name": "read",
        "arguments": '{"p":"a"}',
    } in items
    assert {"type": "function_call_output", "call_id": "c1", "output": "file body"} in items


def test_anthropic_head_to_top_level_and_updates_after_the_user_turn() -> None:
    result = body(WireFormat.ANTHROPIC_MESSAGES)
    assert result["system"] == "A"
    roles = [m["role"] for m in result["messages"]]
    # The update B is held until just before the next assistant message.
    assert roles == ["user", "assistant", "user", "user", "system", "assistant"]
    assert result["messages"][1]["content"][1]["type"] == "tool_use"
    assert result["messages"][2]["content"][0]["type"] == "tool_result"
    assert result["messages"][4]["content"] == [{"type": "text", "text": "B"}]


def test_anthropic_update_needs_a_preceding_user_or_tool_result_turn() -> None:
    with pytest.raises(WireFormatError, match="without a preceding user"):
        render(
            [system_message("A"), system_message("B")],
            WireFormat.ANTHROPIC_MESSAGES,
            in_history=True,
        )
    with pytest.raises(WireFormatError, match="without a preceding user"):
        render(
            [
                system_message("A"),
                user("u"),
                Message(Role.ASSISTANT, (Text("x"),)),
                system_message("B"),
            ],
            WireFormat.ANTHROPIC_MESSAGES,
            in_history=True,
        )


def test_an_empty_update_is_refused() -> None:
    empty = Message(Role.SYSTEM, (Text(""),))
    with pytest.raises(WireFormatError, match="empty"):
        render([system_message("A"), user("u"), empty], WireFormat.OPENAI_CHAT, in_history=True)


@pytest.mark.parametrize(
    "wire", [WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES, WireFormat.ANTHROPIC_MESSAGES]
)
def test_no_non_leading_system_message_on_a_route_that_is_not_in_history(wire: WireFormat) -> None:
    with pytest.raises(WireFormatError, match="not in-history"):
        render(CONVERSATION, wire, in_history=False)
    leading_only = [system_message("A"), user("hi")]
    assert render(leading_only, wire, in_history=False)


def test_text_round_trips_nul_and_astral_characters() -> None:
    text = "a\x00b\U0001f600"
    result = body(WireFormat.OPENAI_CHAT, [system_message(text), user(text)])
    assert [m["content"] for m in result["messages"]] == [text, text]
