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
    Tool,
    ToolCall,
    ToolResult,
    system_message,
)
from admission_service.domain.wire import WireFormat, render, render_body

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


def body(
    wire: WireFormat,
    messages: list[Message] = CONVERSATION,
    in_history: bool = True,
    provider: str = "",
    tools: tuple[Tool, ...] = (),
) -> dict:  # type: ignore[type-arg]
    rendered = render(messages, wire, in_history=in_history, provider=provider, tools=tools)
    return json.loads(rendered)  # type: ignore[no-any-return]


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
    # reasoning_content is DeepSeek's field: not sent on other providers' routes.
    assert "reasoning_content" not in messages[2]
    deepseek = body(WireFormat.OPENAI_CHAT, provider="deepseek")["messages"]
    assert deepseek[2]["reasoning_content"] == "think"
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
    # Assistant text is an input message, as callers send it back (not an output message).
    assert {"role": "assistant", "content": "let me look"} in items
    assert {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "see"},
            {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"},
        ],
    } in items


def test_anthropic_head_to_top_level_and_updates_after_the_user_turn() -> None:
    result = body(WireFormat.ANTHROPIC_MESSAGES)
    assert result["system"] == "A"
    roles = [m["role"] for m in result["messages"]]
    # The update B is held until just before the next assistant message; the user turn after
    # the tool result is one user message with it, the tool result first.
    assert roles == ["user", "assistant", "user", "system", "assistant"]
    # Unsigned reasoning is not sent (the API verifies a thinking block's signature).
    assert [b["type"] for b in result["messages"][1]["content"]] == ["text", "tool_use"]
    assert [b["type"] for b in result["messages"][2]["content"]] == ["tool_result", "text", "image"]
    assert result["messages"][3]["content"] == [{"type": "text", "text": "B"}]


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


PARALLEL = [
    system_message("A"),
    user("read both"),
    Message(Role.ASSISTANT, (ToolCall("c1", "read", '{"p":"a"}'), ToolCall("c2", "read", "{}"))),
    Message(Role.TOOL, (ToolResult("c1", (Text("one"),)),)),
    Message(Role.TOOL, (ToolResult("c2", (Text("it failed"),), is_error=True),)),
]


def test_anthropic_puts_parallel_tool_results_in_one_user_message() -> None:
    messages = body(WireFormat.ANTHROPIC_MESSAGES, PARALLEL)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "one"}]},
        {
            "type": "tool_result",
            "tool_use_id": "c2",
            "content": [{"type": "text", "text": "it failed"}],
            "is_error": True,
        },
    ]


def test_anthropic_sends_a_data_uri_image_as_a_base64_source() -> None:
    image = Image("data:image/png;base64,iVBORw0KGgo=", "image/png")
    messages = body(WireFormat.ANTHROPIC_MESSAGES, [user("x"), Message(Role.USER, (image,))])
    assert messages["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }


def test_anthropic_leaves_out_empty_texts_and_unsigned_reasoning_only_assistants() -> None:
    messages = [
        user("q"),
        Message(Role.ASSISTANT, (Reasoning("hmm"),)),
        Message(Role.USER, (Text(""), Text("again"))),
    ]
    result = body(WireFormat.ANTHROPIC_MESSAGES, messages)["messages"]
    assert result == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "q"}, {"type": "text", "text": "again"}],
        }
    ]


def test_anthropic_sends_signed_reasoning_back_as_thinking() -> None:
    assistant = Message(
        Role.ASSISTANT, (Reasoning("plan", "sig=="), ToolCall("c1", "read", '{"p":"a"}'))
    )
    result = body(WireFormat.ANTHROPIC_MESSAGES, [user("q"), assistant])["messages"]
    assert result[1]["content"][0] == {"type": "thinking", "thinking": "plan", "signature": "sig=="}
    # The other formats never send a signature.
    chat = body(WireFormat.OPENAI_CHAT, [user("q"), assistant], provider="deepseek")
    assert "sig==" not in json.dumps(chat)


@pytest.mark.parametrize(
    ("messages", "provider", "field", "why"),
    [
        (
            [Message(Role.USER, (Image("https://x/y.png", "image/png"),))],
            "deepseek",
            "messages[0].content[0]",
            "takes no image",
        ),
        (
            [Message(Role.USER, (Image("data:image/tiff;base64,AAAA", ""),))],
            "anthropic",
            "messages[0].content[0]",
            "image/tiff",
        ),
    ],
)
def test_anthropic_refuses_images_it_cannot_take(
    messages: list[Message], provider: str, field: str, why: str
) -> None:
    with pytest.raises(WireFormatError, match=why) as caught:
        render(messages, WireFormat.ANTHROPIC_MESSAGES, in_history=True, provider=provider)
    assert caught.value.metadata == {
        "field": field,
        "wire_format": "WIRE_FORMAT_ANTHROPIC_MESSAGES",
    }


def test_openai_chat_sends_tool_result_images_in_a_user_message_after_the_results() -> None:
    shot = Image("https://x/shot.png", "image/png")
    messages = [
        user("look"),
        Message(Role.ASSISTANT, (ToolCall("c1", "shot", "{}"), ToolCall("c2", "read", "{}"))),
        Message(Role.TOOL, (ToolResult("c1", (Text("taken"), shot)),)),
        Message(Role.TOOL, (ToolResult("c2", (Text("text"),)),)),
    ]
    chat = body(WireFormat.OPENAI_CHAT, messages)["messages"]
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "user"]
    assert chat[4]["content"] == [{"type": "image_url", "image_url": {"url": "https://x/shot.png"}}]
    responses = body(WireFormat.OPENAI_RESPONSES, messages)["input"]
    assert responses[3] == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [
            {"type": "input_text", "text": "taken"},
            {"type": "input_image", "image_url": "https://x/shot.png", "detail": "auto"},
        ],
    }


TOOLS = (
    Tool("read", "Read a file", '{"type":"object","properties":{"p":{"type":"string"}}}'),
    Tool("now", "", ""),
)


def test_each_format_carries_the_tools_in_its_providers_shape() -> None:
    assert body(WireFormat.OPENAI_CHAT, tools=TOOLS)["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"p": {"type": "string"}}},
            },
        },
        {
            "type": "function",
            "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
        },
    ]
    assert body(WireFormat.OPENAI_RESPONSES, tools=TOOLS)["tools"][0] == {
        "type": "function",
        "name": "read",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"p": {"type": "string"}}},
        "strict": False,
    }
    assert body(WireFormat.ANTHROPIC_MESSAGES, tools=TOOLS)["tools"][1] == {
        "name": "now",
        "input_schema": {"type": "object", "properties": {}},
    }
    assert "tools" not in body(WireFormat.OPENAI_CHAT)


@pytest.mark.parametrize(
    "wire", [WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES, WireFormat.ANTHROPIC_MESSAGES]
)
def test_a_tool_name_the_providers_refuse_is_refused(wire: WireFormat) -> None:
    with pytest.raises(WireFormatError, match=r"tools\[0\].name"):
        body(wire, tools=(Tool("read file", "", ""),))


def test_anthropic_needs_an_object_input_schema() -> None:
    with pytest.raises(WireFormatError, match=r"tools\[0\].parameters_json"):
        body(WireFormat.ANTHROPIC_MESSAGES, tools=(Tool("t", "", '{"type":"string"}'),))


@pytest.mark.parametrize(
    "wire", [WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES, WireFormat.ANTHROPIC_MESSAGES]
)
def test_a_lone_surrogate_a_caller_escaped_is_sent_escaped(wire: WireFormat) -> None:
    """JSON may escape a lone surrogate, which UTF-8 cannot hold: the body Messages parses from
    a call's arguments, and every format from a tool's schema, is sent as UTF-8 with it escaped
    again (it once failed to encode after the step had committed)."""
    escaped = '{"type":"object","description":"\\ud800"}'
    call = Message(Role.ASSISTANT, (ToolCall("c1", "read", '{"p":"\\udfff"}'),))
    messages = [system_message("A"), user("hi"), call, RESULT]
    sent = render_body(messages, wire, in_history=True, tools=(Tool("read", "", escaped),)).body
    parsed = json.loads(sent.decode("utf-8"))
    assert b"\\ud800" in sent
    tool = parsed["tools"][0]
    schema = tool.get("function", tool).get("parameters", tool.get("input_schema"))
    assert schema == {"type": "object", "description": "\ud800"}
