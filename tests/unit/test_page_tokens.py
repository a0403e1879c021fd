"""Page and plan tokens (app/page_tokens.py): opaque, keyed, bound to their scope, rotated
without breaking tokens in flight, and every hostile token refused as INVALID_ARGUMENT."""

from __future__ import annotations

import base64
import json

import pytest
from admission_service.app.page_tokens import MAX_TOKEN_CHARS, TAG_BYTES, PageTokens
from admission_service.domain.errors import InvalidArgument
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

OLD_KEY = b"o" * 32
NEW_KEY = b"n" * 32
SCOPE = "events/tenant-a/session-1"
CURSOR: dict[str, int | str] = {"after": 41, "i": "session-7", "t": "2026-11-30T22:00:00+00:00"}


def refused(tokens: PageTokens, token: str, scope: str = SCOPE) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        tokens.decode(scope, token, "page_token")
    assert caught.value.field == "page_token"
    return caught.value


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def test_a_token_round_trips() -> None:
    tokens = PageTokens([OLD_KEY])
    token = tokens.encode(SCOPE, CURSOR)
    assert tokens.decode(SCOPE, token, "page_token") == CURSOR


def test_a_token_of_another_scope_is_refused() -> None:
    tokens = PageTokens([OLD_KEY])
    token = tokens.encode(SCOPE, CURSOR)
    for other in ("events/tenant-b/session-1", "events/tenant-a/session-2", "sessions/tenant-a"):
        refused(tokens, token, other)


def test_rotation_signs_with_the_first_key_and_accepts_any() -> None:
    old = PageTokens([OLD_KEY])
    rotated = PageTokens([NEW_KEY, OLD_KEY])
    in_flight = old.encode(SCOPE, CURSOR)
    assert rotated.decode(SCOPE, in_flight, "page_token") == CURSOR
    fresh = rotated.encode(SCOPE, CURSOR)
    assert PageTokens([NEW_KEY]).decode(SCOPE, fresh, "page_token") == CURSOR
    refused(old, fresh)  # the new key is not the old one
    refused(PageTokens([NEW_KEY]), in_flight)  # the old key retired


def test_the_default_key_is_derived_from_the_shared_database_settings() -> None:
    """Replicas behind a balancer agree without configuration; the host may differ."""
    one = PageTokens.configured((), make_url("postgresql://app:pw@10.0.0.1:6432/pas"))
    two = PageTokens.configured((), make_url("postgresql://app:pw@pooler-b:5432/pas"))
    token = one.encode(SCOPE, CURSOR)
    assert two.decode(SCOPE, token, "page_token") == CURSOR
    other_password = PageTokens.configured((), make_url("postgresql://app:x@10.0.0.1/pas"))
    refused(other_password, token)
    configured = PageTokens.configured(("k" * 32,), make_url("postgresql://app:pw@h/pas"))
    refused(configured, token)


def _forged_offsets() -> list[str]:
    """Tokens a client could build: the cursor edited, or another body under a guessed tag."""
    tokens = PageTokens([OLD_KEY])
    genuine = base64.urlsafe_b64decode(tokens.encode(SCOPE, {"after": 1}) + "==")
    body, tag = genuine[:-TAG_BYTES], genuine[-TAG_BYTES:]
    huge = PageTokens([b"attacker-key" * 3]).encode(SCOPE, {"after": 2**63 - 1})
    return [
        b64(body[:-1] + bytes([body[-1] ^ 1]) + tag),  # the offset edited
        b64(body + bytes(TAG_BYTES)),  # a zero tag
        huge,  # a huge offset under another key
        b64(body[:-8] + b"\xff" * 8 + tag),  # a negative offset
        b64(b"\x01" + json.dumps({"after": "x"}).encode() + tag),  # a non-integer offset
    ]


HOSTILE = [
    "",
    "x",
    "=",
    "forged",
    "[" * 100_000,
    "A" * (MAX_TOKEN_CHARS + 4),
    "abc\x00def",
    "\ud800",
    "abc\udfffdef",
    "AAAA====",
    "🙂",
    b64(json.dumps({"b": '{"after":1}', "c": "0" * 16}).encode()),  # the old JSON format
    b64(json.dumps([1, 2, 3]).encode()),
    b64(b"\x01"),
    b64(b"\x02" + bytes(TAG_BYTES)),  # an unknown version
    *_forged_offsets(),
]


@pytest.mark.parametrize("token", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_tokens_are_invalid_arguments(token: str) -> None:
    refused(PageTokens([OLD_KEY]), token)


def test_a_truncated_token_is_refused_at_every_length() -> None:
    tokens = PageTokens([OLD_KEY])
    token = tokens.encode(SCOPE, CURSOR)
    for end in range(len(token)):
        refused(tokens, token[:end])


@given(st.text(max_size=300))
def test_no_text_decodes_without_the_key(token: str) -> None:
    refused(PageTokens([OLD_KEY]), token)


@given(
    st.dictionaries(
        st.text(max_size=20),
        st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=50)),
        max_size=5,
    )
)
def test_any_cursor_round_trips(cursor: dict[str, int | str]) -> None:
    tokens = PageTokens([OLD_KEY])
    assert tokens.decode(SCOPE, tokens.encode(SCOPE, cursor), "page_token") == cursor
