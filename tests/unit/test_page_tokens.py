"""Page and plan tokens (app/page_tokens.py): opaque, keyed, bound to their scope, rotated
without breaking tokens in flight, and every hostile token refused as INVALID_ARGUMENT."""

from __future__ import annotations

import base64
import json

import pytest
from admission_service.app.page_tokens import (
    KEY_ID_BYTES,
    MAX_TOKEN_CHARS,
    TAG_BYTES,
    PageTokens,
    Shape,
    key_id,
)
from admission_service.domain.errors import InvalidArgument
from hypothesis import given
from hypothesis import strategies as st

from tests.attacker_tokens import mint_v1

OLD_KEY = b"o" * 32
NEW_KEY = b"n" * 32
SCOPE = "events/tenant-a/session-1"
CURSOR: dict[str, int | str] = {"after": 41, "i": "session-7", "t": "2026-11-30T22:00:00+00:00"}
SHAPE: Shape = {"after": int, "i": str, "t": str}


def shape_of(cursor: dict[str, int | str]) -> Shape:
    return {name: type(value) for name, value in cursor.items()}


def refused(tokens: PageTokens, token: str, scope: str = SCOPE) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        tokens.decode(scope, token, "page_token", SHAPE)
    assert caught.value.field == "page_token"
    return caught.value


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def test_a_token_round_trips() -> None:
    tokens = PageTokens([OLD_KEY])
    token = tokens.encode(SCOPE, CURSOR)
    assert tokens.decode(SCOPE, token, "page_token", SHAPE) == CURSOR


def test_a_token_of_another_scope_is_refused() -> None:
    tokens = PageTokens([OLD_KEY])
    token = tokens.encode(SCOPE, CURSOR)
    for other in ("events/tenant-b/session-1", "events/tenant-a/session-2", "sessions/tenant-a"):
        refused(tokens, token, other)


def test_rotation_signs_with_the_first_key_and_accepts_any() -> None:
    old = PageTokens([OLD_KEY])
    rotated = PageTokens([NEW_KEY, OLD_KEY])
    in_flight = old.encode(SCOPE, CURSOR)
    assert rotated.decode(SCOPE, in_flight, "page_token", SHAPE) == CURSOR
    fresh = rotated.encode(SCOPE, CURSOR)
    assert PageTokens([NEW_KEY]).decode(SCOPE, fresh, "page_token", SHAPE) == CURSOR
    refused(old, fresh)  # the new key is not the old one
    refused(PageTokens([NEW_KEY]), in_flight)  # the old key retired


def test_tokens_name_their_key_and_any_configured_key_verifies() -> None:
    """The key id in the token picks the key; it is derived from the secret, so a stored key
    and the same key configured agree, and it reveals nothing of the secret."""
    token = PageTokens([NEW_KEY]).encode(SCOPE, CURSOR)
    body = base64.urlsafe_b64decode(token + "==")
    assert body[1 : 1 + KEY_ID_BYTES] == key_id(NEW_KEY) != key_id(OLD_KEY)
    assert PageTokens([OLD_KEY, b"x" * 32, NEW_KEY]).decode(SCOPE, token, "page_token", SHAPE)


async def test_stored_keys_are_read_by_the_first_paged_call() -> None:
    """A server starts while its database is down; its keys are read when first needed."""
    reads: list[int] = []

    async def load() -> list[bytes]:
        reads.append(1)
        return [NEW_KEY, OLD_KEY]

    tokens = PageTokens(loader=load)
    assert not reads
    await tokens.ready()
    await tokens.ready()
    assert reads == [1]
    token = tokens.encode(SCOPE, CURSOR)
    assert PageTokens([NEW_KEY]).decode(SCOPE, token, "page_token", SHAPE) == CURSOR


def test_tokens_minted_the_way_an_attacker_would_are_refused() -> None:
    """Before issue 21 the key was derived from the database URL's user and database name
    (no password with trust authentication): such a token, byte for byte what the old server
    issued, is refused; so is the current format under a guessed key, with the genuine key id
    copied from a token the attacker was given."""
    tokens = PageTokens([OLD_KEY])
    refused(tokens, mint_v1("postgres", None, "postgres", SCOPE, CURSOR))
    genuine = base64.urlsafe_b64decode(tokens.encode(SCOPE, CURSOR) + "==")
    guessed = PageTokens([b"guessed-key" * 3]).encode(SCOPE, CURSOR)
    body = base64.urlsafe_b64decode(guessed + "==")[:-TAG_BYTES]
    forged = body[:1] + genuine[1 : 1 + KEY_ID_BYTES] + body[1 + KEY_ID_BYTES :]
    refused(tokens, b64(forged + body[-TAG_BYTES:]))
    refused(tokens, guessed)


WRONG_SHAPES: list[dict[str, int | str]] = [
    {},
    {"after": "41", "i": "session-7", "t": "2026-11-30T22:00:00+00:00"},  # a string offset
    {"i": "session-7", "t": "2026-11-30T22:00:00+00:00"},  # a field missing
    {**CURSOR, "extra": 1},
    {"after": 41, "i": "session\x007", "t": "2026-11-30T22:00:00+00:00"},  # NUL in a string
    {"after": 41, "i": 7, "t": "2026-11-30T22:00:00+00:00"},
]


@pytest.mark.parametrize("cursor", WRONG_SHAPES, ids=range(len(WRONG_SHAPES)))
def test_a_well_signed_token_of_another_shape_is_refused(cursor: dict[str, int | str]) -> None:
    tokens = PageTokens([OLD_KEY])
    refused(tokens, tokens.encode(SCOPE, cursor))


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
    b64(b"\x03" + bytes(KEY_ID_BYTES + TAG_BYTES)),  # an unknown version
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
        st.one_of(
            st.integers(-(2**63), 2**63 - 1),
            st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=50),
        ),
        max_size=5,
    )
)
def test_any_cursor_round_trips(cursor: dict[str, int | str]) -> None:
    tokens = PageTokens([OLD_KEY])
    decoded = tokens.decode(SCOPE, tokens.encode(SCOPE, cursor), "page_token", shape_of(cursor))
    assert decoded == cursor
