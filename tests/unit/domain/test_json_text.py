"""A body's JSON text is json.dumps's, byte for byte, whatever JSON the caller sent
(domain/json_text.py: orjson where it writes the same text, json where it would not)."""

from __future__ import annotations

import enum
import json
import math

import pytest
from admission_service.domain import json_text
from hypothesis import given
from hypothesis import strategies as st


def reference(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too: orjson refuses those, json writes them
    | st.floats()  # NaN, the infinities, -0.0, subnormals, exponents both ways
    | st.text(),  # lone surrogates too: orjson refuses them, json writes them
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_what_a_caller_sent_is_parsed_whole_and_written_back_as_json_writes_it(
    value: object,
) -> None:
    text = reference(value)  # the caller's JSON (json's own spelling of NaN and Infinity)
    parsed = json_text.loads(text)
    assert reference(parsed) == reference(json.loads(text))
    assert json_text.dumps(parsed) == reference(json.loads(text))


@given(json_values)
def test_the_utf8_text_is_the_text_and_always_utf8(value: object) -> None:
    """``dumps_utf8`` is ``dumps`` in UTF-8; a lone surrogate, which UTF-8 cannot hold, is
    written as its JSON escape, and reads back as itself."""
    parsed = json_text.loads(reference(value))
    text = json_text.dumps(parsed)
    sent = json_text.dumps_utf8(parsed)
    try:
        assert sent == text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        assert sent == text.encode("utf-8", "backslashreplace")
    assert reference(json_text.loads(sent.decode())) == reference(parsed)


def test_the_floats_json_and_orjson_spell_differently() -> None:
    for text in ("1e-05", "1e+16", "1E400", "-0.0", "0.000123", "1.2345678901234568e+17"):
        body = {"input": json_text.loads(f'{{"x":{text}}}')}
        assert json_text.dumps(body) == reference({"input": json.loads(f'{{"x":{text}}}')})
    assert json_text.dumps([json_text.loads("NaN"), json_text.loads("-Infinity")]) == (
        "[NaN,-Infinity]"
    )
    assert math.isnan(json_text.loads("NaN"))


def test_what_orjson_refuses_json_writes() -> None:
    for value in ({"n": 2**64}, {"n": -(2**63) - 1}, {"s": "\ud800"}, {1: "x"}, ("a", "ü")):
        assert json_text.dumps(value) == reference(value)
    assert json_text.dumps_utf8({"s": "a\\\ud800"}) == b'{"s":"a\\\\\\ud800"}'


def test_a_large_text_of_every_kind() -> None:
    text = 'plain "quoted" \\ back\nslash \t ü € 😀 \x00\x1f\x7f \u2028' * 10_000
    assert json_text.dumps({"content": text}) == reference({"content": text})


def test_what_is_not_json_is_refused_as_json_refuses_it() -> None:
    with pytest.raises(TypeError):
        json_text.dumps({"x": object()})


def canonical_reference(value: object) -> bytes:
    """What the service stored as canonical JSON before orjson wrote it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


stored_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # json writes those: orjson spells some differently
    | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=8), children, max_size=4)
    | st.dictionaries(st.integers(), children, max_size=2),  # json's keys as strings
    max_leaves=20,
)


@given(stored_values)
def test_stored_json_is_what_json_wrote_with_sorted_keys(value: object) -> None:
    assert json_text.canonical(value) == canonical_reference(value)


def test_a_large_tool_set_is_written_by_orjson_and_reads_the_same() -> None:
    text = 'schema "quoted" \\ ü € 😀 \x00\x1f\x7f \u2028' * 20_000
    tools = [{"name": f"t{n}", "parameters_json": text, "description": ""} for n in range(8)]
    header = {"tools": tools, "seq": 3, "starts_series": True, "config": {"b": "1", "a": "2"}}
    assert json_text.canonical(header) == canonical_reference(header)


def test_what_stored_json_refuses_json_refuses() -> None:
    class Kind(enum.Enum):
        A = "a"

    for value in ({"x": object()}, {"k": Kind.A}, {(1, 2): "tuple key"}):
        with pytest.raises(TypeError):
            json_text.canonical(value)
