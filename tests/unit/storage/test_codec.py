"""The stored encoding is the API's protobuf encoding, byte for byte (a derived request is
spliced from the stored frames, never re-encoded), and reads back to the same message."""

from __future__ import annotations

from admission_service.api.convert import message_to_proto
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
)
from admission_service.storage import codec
from hypothesis import given
from hypothesis import strategies as st
from promptadmission.v1 import session_pb2 as pb

texts = st.text(max_size=300)  # any valid string: NUL, astral plane, empty
inner = st.one_of(st.builds(Text, texts), st.builds(Image, texts, texts))
blocks = st.one_of(
    inner,
    st.builds(Reasoning, texts, texts),
    st.builds(ToolCall, texts, texts, texts),
    st.builds(ToolResult, texts, st.tuples(inner, inner) | st.tuples(), st.booleans()),
)
messages = st.builds(Message, st.sampled_from(list(Role)), st.lists(blocks, max_size=4).map(tuple))


@given(messages)
def test_encoding_equals_the_api_encoding(message: Message) -> None:
    expected = message_to_proto(message).SerializeToString(deterministic=True)
    assert codec.encode(message) == expected
    assert codec.decode(expected) == message
    assert codec.to_proto(message) == message_to_proto(message)
    assert codec.from_proto(message_to_proto(message)) == message
    encoded, framed = codec.encode_and_frame(message)
    assert (encoded, framed) == (expected, codec.frame(message))
    assert framed.endswith(encoded)


@given(st.lists(messages, max_size=6))
def test_concatenated_frames_are_a_derived_request(values: list[Message]) -> None:
    frames = b"".join(codec.frame(m) for m in values)
    parsed = pb.DerivedRequest.FromString(frames)
    assert [m.SerializeToString(deterministic=True) for m in parsed.messages] == [
        codec.encode(m) for m in values
    ]
    assert codec.decode_frames(frames) == tuple(values)


def test_a_large_message_has_a_multi_byte_length() -> None:
    message = Message(Role.USER, (Text("x" * 70_000),))
    assert codec.decode_frames(codec.frame(message)) == (message,)
