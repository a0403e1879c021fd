"""A body's tools are written once per tool set and format and spliced into each body
(``wire.rendered_tools``): the body is byte for byte the one ``json.dumps`` writes for the
whole object, whatever the messages, the schemas (floats, integers beyond 64 bits, lone
surrogates) and the format."""

from __future__ import annotations

import json
from typing import Any

import pytest
from admission_service.domain import json_text, wire
from admission_service.domain.errors import WireFormatError
from admission_service.domain.messages import Message, Role, Text, Tool, system_message
from admission_service.domain.wire import RENDERED_TOOLS, WireFormat, render_body
from hypothesis import given
from hypothesis import strategies as st

FORMATS = [WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES, WireFormat.ANTHROPIC_MESSAGES]


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


schema_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too: orjson refuses them
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),  # lone surrogates too
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)
schemas = st.dictionaries(st.text(max_size=6), schema_values, max_size=3).map(
    lambda extra: dumps({**extra, "type": "object"})
)
tools = st.lists(
    st.builds(
        Tool,
        st.from_regex(r"[a-zA-Z0-9_-]{1,12}", fullmatch=True),
        st.text(max_size=8),
        st.just("") | schemas,
    ),
    max_size=4,
)
texts = st.text(min_size=1, max_size=10)
conversations = st.lists(
    st.builds(lambda text: Message(Role.USER, (Text(text),)), texts)
    | st.builds(lambda text: Message(Role.ASSISTANT, (Text(text),)), texts),
    max_size=4,
).map(lambda rest: [system_message("be brief"), *rest])


def unspliced(messages: list[Message], form: WireFormat, tool_set: list[Tool]) -> str:
    """The body as one ``json.dumps`` of the whole object: its members without tools as the
    format renders them, then its tools."""
    body = json.loads(render_body(messages, form, in_history=True, provider="openai").body_json)
    if tool_set:
        body["tools"] = wire._TOOLS[form](tool_set)
    return dumps(body)


@given(conversations, st.sampled_from(FORMATS), tools)
def test_the_spliced_body_is_the_whole_objects_json(
    messages: list[Message], form: WireFormat, tool_set: list[Tool]
) -> None:
    spliced = render_body(messages, form, in_history=True, provider="openai", tools=tool_set)
    assert spliced.body_json == unspliced(messages, form, tool_set)
    again = render_body(messages, form, in_history=True, provider="openai", tools=tool_set)
    assert again.body_json == spliced.body_json


@pytest.mark.parametrize("form", FORMATS)
def test_a_tool_set_is_written_once_per_format(form: WireFormat) -> None:
    tool_set = [Tool("read", "reads a file", '{"type":"object","x":1.5e-07}')]
    first = wire.rendered_tools(form, tool_set)
    same_again = [Tool("read", "reads a file", '{"type":"object","x":1.5e-07}')]  # new objects
    assert wire.rendered_tools(form, same_again) is first
    assert first == dumps(wire._TOOLS[form](tool_set)).encode()
    assert b'"x":1.5e-07' in first  # json's float, not orjson's 1.5e-7


def test_a_large_tool_set_is_kept_aside_and_found_by_equality() -> None:
    schema = json_text.dumps({"type": "object", "description": "x" * RENDERED_TOOLS.max_bytes})
    tool_set = [Tool("big", "", schema)]
    first = wire.rendered_tools(WireFormat.OPENAI_CHAT, tool_set)
    assert not RENDERED_TOOLS.keeps(len(schema))
    assert wire.rendered_tools(WireFormat.OPENAI_CHAT, [Tool("big", "", schema[:])]) is first
    # Another format's rendering of the same set is not the chat one.
    other = wire.rendered_tools(WireFormat.ANTHROPIC_MESSAGES, tool_set)
    assert other != first and b'"input_schema"' in other


def test_a_refused_tool_set_is_refused_every_time() -> None:
    refused = [Tool("list", "", '{"type":"array"}')]  # Messages wants an object schema
    for _ in range(2):
        with pytest.raises(WireFormatError, match=r"tools\[0\]\.parameters_json"):
            render_body(
                [system_message("a")], WireFormat.ANTHROPIC_MESSAGES, in_history=True, tools=refused
            )
