"""The stored frames are the API's protobuf encoding, byte for byte (issue 7: a derived request
is spliced from them, never re-encoded)."""

from __future__ import annotations

from admission_service.api.convert import message_to_proto
from admission_service.domain import protowire
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
)
from hypothesis import given
from hypothesis import strategies as st
from promptadmission.v1 import session_pb2 as pb

texts = st.text(max_size=300)  # any valid string: NUL, astral plane, empty
inner = st.one_of(st.builds(Text, texts), st.builds(Image, texts, texts))
blocks = st.one_of(
    inner,
    st.builds(Reasoning, texts),
    st.builds(ToolCall, texts, texts, texts),
    st.builds(ToolResult, texts, st.tuples(inner, inner) | st.tuples(), st.booleans()),
)
messages = st.builds(Message, st.sampled_from(list(Role)), st.lists(blocks, max_size=4).map(tuple))


@given(messages)
def test_encoding_equals_the_generated_code(message: Message) -> None:
    expected = message_to_proto(message).SerializeToString(deterministic=True)
    assert protowire.encode_message(message) == expected
    assert protowire.decode_message(expected) == message


@given(st.lists(messages, max_size=6))
def test_concatenated_frames_are_a_derived_request(values: list[Message]) -> None:
    frames = b"".join(protowire.frame(m) for m in values)
    parsed = pb.DerivedRequest.FromString(frames)
    assert [m.SerializeToString(deterministic=True) for m in parsed.messages] == [
        protowire.encode_message(m) for m in values
    ]
    assert protowire.decode_messages(frames) == tuple(values)


def test_a_large_message_has_a_multi_byte_length() -> None:
    message = Message(Role.USER, (Text("x" * 70_000),))
    assert protowire.decode_messages(protowire.frame(message)) == (message,)
