"""The message model's own measures (domain/messages.py)."""

from __future__ import annotations

import dataclasses

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
)
from hypothesis import given
from hypothesis import strategies as st

texts = st.text(max_size=20)
results_content = st.lists(
    st.one_of(st.builds(Text, texts, texts), st.builds(Image, texts, texts)), max_size=3
).map(tuple)
blocks = st.one_of(
    st.builds(Text, texts, texts),
    st.builds(Image, texts, texts),
    st.builds(Reasoning, texts, texts),
    st.builds(RedactedReasoning, texts, texts),
    st.builds(
        ReasoningItem,
        texts,
        texts,
        st.lists(texts, max_size=3).map(tuple),
        st.lists(texts, max_size=3).map(tuple),
    ),
    st.builds(ToolCall, texts, texts, texts),
    st.builds(ToolResult, texts, results_content, st.booleans()),
)
messages = st.builds(Message, st.sampled_from(list(Role)), st.lists(blocks, max_size=4).map(tuple))


def _strings(value: object) -> list[str]:
    """Every string in ``value`` (dataclasses taken apart by ``astuple``), the role aside."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, tuple):
        return [text for item in value for text in _strings(item)]
    return []


@given(messages)
def test_a_messages_characters_are_those_of_every_string_it_holds(message: Message) -> None:
    content = dataclasses.astuple(message)[1]
    assert message.chars() == sum(map(len, _strings(content)))


def test_a_tool_results_flag_adds_nothing() -> None:
    result = ToolResult("c1", (Text("12345"), Image("u", "image/png")), is_error=True)
    assert Message(Role.TOOL, (result,)).chars() == 2 + 5 + 1 + 9
