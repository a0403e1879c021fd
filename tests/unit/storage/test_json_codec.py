"""The canonical JSON of a session's facts (headers with their tools and configuration,
contexts) round-trips every value exactly, NUL and astral text included. Messages are stored
in their protobuf encoding (``tests/unit/storage/test_codec.py``)."""

from __future__ import annotations

from admission_service.domain.events import Event, EventKind
from admission_service.domain.messages import Tool
from admission_service.domain.series import (
    ContextLog,
    HeaderLog,
    HeaderReason,
    RequestContext,
    RequestHeader,
    canonical_config,
)
from admission_service.storage import codec
from hypothesis import given
from hypothesis import strategies as st

# Any valid string: every code point except the surrogates.
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
tools = st.lists(st.builds(Tool, texts, texts, texts), max_size=3).map(tuple)
configs = st.dictionaries(texts, texts, max_size=3).map(canonical_config)
seqs = st.integers(0, 2**40)


@given(tools)
def test_tools_round_trip(value: tuple[Tool, ...]) -> None:
    assert codec.decode_tools(codec.encode_tools(value)) == value


header_events = st.builds(
    Event,
    seqs,
    st.just(EventKind.REQUEST_HEADER),
    header=st.builds(
        HeaderLog,
        seqs,
        st.sampled_from(HeaderReason),
        st.booleans(),
        st.builds(RequestHeader, texts, texts, tools, configs),
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


@given(st.one_of(header_events, context_events))
def test_a_facts_payload_round_trips(event: Event) -> None:
    """``events.payload`` of a header or context event, read back as ``storage/rows.py`` does."""
    payload = codec.loads(codec.dumps(codec.event_payload(event)))
    if event.header is not None:
        assert codec.header_from_json(payload["header"]) == event.header
    else:
        assert codec.context_from_json(payload["context"]) == event.context


def test_nul_and_astral_text_survive_byte_for_byte() -> None:
    tools = (Tool("grep", "a\x00b\U0001f600", "{}"),)
    encoded = codec.encode_tools(tools)
    assert b"\x00" not in encoded  # JSON escapes it, so bytea/text columns both accept it
    assert codec.decode_tools(encoded) == tools
