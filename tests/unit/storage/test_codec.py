"""The stored encoding is the API's protobuf encoding, byte for byte (a derived request is
spliced from the stored frames, never re-encoded), and reads back to the same message."""

from __future__ import annotations

from admission_service.domain.messages import (
    Block,
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
from admission_service.storage import codec
from hypothesis import given
from hypothesis import strategies as st
from promptadmission.v1 import session_pb2 as pb

texts = st.text(max_size=300)  # any valid string: NUL, astral plane, empty
inner = st.one_of(st.builds(Text, texts), st.builds(Image, texts, texts))
blocks_0004 = st.one_of(  # the blocks stored up to revision 0005
    inner,
    st.builds(Reasoning, texts, texts),
    st.builds(ToolCall, texts, texts, texts),
    st.builds(ToolResult, texts, st.tuples(inner, inner) | st.tuples(), st.booleans()),
)
roles = st.sampled_from(list(Role))
messages_0004 = st.builds(Message, roles, st.lists(blocks_0004, max_size=4).map(tuple))
strings = st.lists(texts, max_size=3).map(tuple)
blocks = st.one_of(
    blocks_0004,
    st.builds(Text, texts, st.sampled_from(["", "commentary", "final_answer"])),
    st.builds(RedactedReasoning, texts, texts),
    st.builds(ReasoningItem, texts, texts, strings, strings),
)
messages = st.builds(Message, roles, st.lists(blocks, max_size=4).map(tuple))

_ROLES = {role: pb.MessageRole.Value(f"MESSAGE_ROLE_{role.name}") for role in Role}


def _block_to_proto(block: Block) -> pb.ContentBlock:
    """The reference: the API's ``ContentBlock`` built field by field from the proto schema."""
    if isinstance(block, Text):
        return pb.ContentBlock(text=pb.TextBlock(text=block.text, phase=block.phase))
    if isinstance(block, Image):
        return pb.ContentBlock(image=pb.ImageBlock(uri=block.uri, media_type=block.media_type))
    if isinstance(block, Reasoning):
        return pb.ContentBlock(
            reasoning=pb.ReasoningBlock(text=block.text, signature=block.signature)
        )
    if isinstance(block, RedactedReasoning):
        return pb.ContentBlock(
            redacted_reasoning=pb.RedactedReasoningBlock(provider=block.provider, data=block.data)
        )
    if isinstance(block, ReasoningItem):
        return pb.ContentBlock(
            reasoning_item=pb.ReasoningItemBlock(
                id=block.item_id,
                encrypted_content=block.encrypted_content,
                summary=block.summary,
                content=block.content,
            )
        )
    if isinstance(block, ToolCall):
        return pb.ContentBlock(
            tool_call=pb.ToolCallBlock(
                call_id=block.call_id, name=block.name, arguments_json=block.arguments_json
            )
        )
    return pb.ContentBlock(
        tool_result=pb.ToolResultBlock(
            call_id=block.call_id,
            content=[_block_to_proto(part) for part in block.content],
            is_error=block.is_error,
        )
    )


def message_to_proto(message: Message) -> pb.Message:
    """The reference ``promptadmission.v1.Message`` (the API edge sends ``codec.to_proto``)."""
    return pb.Message(
        role=_ROLES[message.role], content=[_block_to_proto(block) for block in message.content]
    )


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
