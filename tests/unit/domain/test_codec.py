"""The canonical encoding round-trips every value exactly, NUL and astral text included."""

from __future__ import annotations

from typing import Any

from admission_service.domain import codec
from admission_service.domain.events import Append, Event, EventKind, Replace
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    ReasoningItem,
    RedactedReasoning,
    Role,
    Text,
    Tool,
    ToolCall,
    ToolResult,
)
from admission_service.domain.series import (
    ContextLog,
    HeaderLog,
    HeaderReason,
    RequestContext,
    RequestHeader,
)
from hypothesis import given
from hypothesis import strategies as st

# Any valid protobuf string: every code point except the surrogates.
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
inner = st.one_of(st.builds(Text, texts), st.builds(Image, texts, texts))
blocks = st.one_of(
    inner,
    st.builds(Reasoning, texts),
    st.builds(ToolCall, texts, texts, texts),
    st.builds(ToolResult, texts, st.tuples(inner, inner), st.booleans()),
    st.builds(Text, texts, st.sampled_from(["", "commentary"])),
    st.builds(RedactedReasoning, texts, texts),
    st.builds(ReasoningItem, texts, texts, st.lists(texts).map(tuple), st.lists(texts).map(tuple)),
)
messages = st.builds(Message, st.sampled_from(Role), st.lists(blocks, max_size=4).map(tuple))
tools = st.lists(st.builds(Tool, texts, texts, texts), max_size=3).map(tuple)
seqs = st.integers(0, 2**40)


@given(messages)
def test_messages_round_trip(message: Message) -> None:
    encoded = codec.encode_message(message)
    assert codec.message_from_json(codec.loads(encoded)) == message
    assert codec.encode_message(message) == encoded  # deterministic


@given(tools)
def test_tools_round_trip(value: tuple[Tool, ...]) -> None:
    assert codec.decode_tools(codec.encode_tools(value)) == value


message_events = st.builds(
    Event,
    seqs,
    st.sampled_from([EventKind.USER_MESSAGE, EventKind.SYSTEM_MESSAGE]),
    seqs,
    seqs,
    st.one_of(st.builds(Append), st.builds(Replace, seqs, seqs)),
    st.lists(seqs, max_size=3).map(tuple),
    messages,
    admission_id=texts,
    update=st.booleans(),
)
header_events = st.builds(
    Event,
    seqs,
    st.just(EventKind.REQUEST_HEADER),
    header=st.builds(
        HeaderLog,
        seqs,
        st.sampled_from(HeaderReason),
        st.booleans(),
        st.builds(RequestHeader, texts, texts, tools),
    ),
)
context_events = st.builds(
    Event,
    seqs,
    st.just(EventKind.REQUEST_CONTEXT),
    context=st.builds(
        ContextLog, seqs, st.builds(RequestContext, texts, texts, seqs, st.booleans())
    ),
)


def event_to_json(event: Event) -> dict[str, Any]:
    """An event as ``event_from_json`` reads it (the columns of an ``events`` row)."""
    op: dict[str, Any] | None = None
    if isinstance(event.op, Append):
        op = {"op": "append"}
    elif isinstance(event.op, Replace):
        op = {"op": "replace", "start_seq": event.op.start_seq, "end_seq": event.op.end_seq}
    return {
        "seq": event.seq,
        "kind": event.kind.value,
        "turn": event.turn,
        "step": event.step,
        "surface_op": op,
        "source_seqs": list(event.source_seqs),
        "admission_id": event.admission_id,
        "payload": codec.event_payload(event),
    }


@given(st.one_of(message_events, header_events, context_events))
def test_events_round_trip(event: Event) -> None:
    data = codec.dumps(event_to_json(event))
    assert codec.event_from_json(codec.loads(data)) == event


def test_nul_and_astral_text_survive_byte_for_byte() -> None:
    message = Message(Role.USER, (Text("a\x00b\U0001f600"),))
    encoded = codec.encode_message(message)
    assert b"\x00" not in encoded  # JSON escapes it, so bytea/text columns both accept it
    assert codec.message_from_json(codec.loads(encoded)).text == "a\x00b\U0001f600"
