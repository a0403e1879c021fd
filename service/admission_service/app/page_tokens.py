"""Opaque, keyed tokens: every page token (ListSessions, ListEvents, ListTrajectory, any new
paged RPC) and the compaction plan token. One helper for all of them: call
``PageTokens.encode(scope, cursor)`` when a page has more and ``PageTokens.decode(scope, token,
field)`` on the way in, with a ``scope`` naming the call and what it is bound to (for example
``events/<tenant>/<session>``).

A token is base64url (no padding) of a compact binary body — a version byte, then the cursor's
fields sorted by name, each an int64 or a UTF-8 string — followed by a 16-byte HMAC-SHA256 tag
over the scope and the body (AIP-158: clients must treat it as opaque, and can no longer read or
edit it). A token issued for another scope — another tenant, session or RPC — fails the tag, as
does a forged, truncated or corrupted one: all are INVALID_ARGUMENT naming the field, checked
before anything is read from the database.

Keys rotate without breaking tokens in flight: tokens are signed with the first key and
accepted under any configured key (``PAS_PAGE_TOKEN_KEYS``: add the new key in front, and
drop the old one once its tokens have expired from clients' hands). Without configured keys the
key is derived from the database URL's user, password and database name (``derived``): every
replica behind a balancer that shares the database agrees on it, restarts keep tokens valid,
and nobody without the database password can mint one. Set ``PAS_PAGE_TOKEN_KEYS`` when the
database has no password.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from admission_service.domain.errors import InvalidArgument

if TYPE_CHECKING:  # the configuration imports this module, and SQLAlchemy is slow to import
    from sqlalchemy.engine import URL

VERSION = 1
TAG_BYTES = 16
MIN_KEY_CHARS = 32
# Our own tokens are well under 200 characters; anything longer is refused before decoding.
MAX_TOKEN_CHARS = 1024
_TOKEN_ALPHABET = re.compile(r"[A-Za-z0-9_-]+")
_INT, _STR = b"i", b"s"
_INT64 = struct.Struct(">q")
_LENGTH = struct.Struct(">H")
_DERIVATION_LABEL = b"promptadmission page-token key v1"

Cursor = Mapping[str, int | str]


class _Malformed(Exception):
    """The body does not parse (only reachable with a valid tag: a bug, or an old version)."""


class PageTokens:
    """Issues and checks the tokens of one service; ``keys[0]`` signs, every key verifies."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("at least one page-token key is required")
        self._keys = tuple(keys)

    @classmethod
    def configured(cls, keys: Sequence[str], database_url: URL) -> PageTokens:
        """The configured ``keys``; without any, one key derived from the parts of the database
        URL every replica shares (not the host: each replica may reach the database through its
        own pooler)."""
        if keys:
            return cls([key.encode() for key in keys])
        parts = (database_url.username, database_url.password, database_url.database)
        material = "\x00".join(part or "" for part in parts).encode("utf-8", "surrogatepass")
        return cls([hmac.new(_DERIVATION_LABEL, material, hashlib.sha256).digest()])

    def encode(self, scope: str, cursor: Cursor) -> str:
        body = bytes([VERSION]) + _pack(cursor)
        tag = _tag(self._keys[0], scope, body)
        return base64.urlsafe_b64encode(body + tag).decode("ascii").rstrip("=")

    def decode(self, scope: str, token: str, field: str) -> dict[str, Any]:
        """The cursor ``token`` carries; INVALID_ARGUMENT naming ``field`` unless this service
        issued it for ``scope``."""
        refused = InvalidArgument(field, "is not a token this service issued for this call")
        if len(token) > MAX_TOKEN_CHARS or not _TOKEN_ALPHABET.fullmatch(token):
            raise refused
        try:
            data = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise refused from None
        body, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
        if len(body) < 1 or body[0] != VERSION:
            raise refused
        if not any(hmac.compare_digest(tag, _tag(key, scope, body)) for key in self._keys):
            raise refused
        try:
            return _unpack(body[1:])
        except _Malformed:
            raise refused from None


def _tag(key: bytes, scope: str, body: bytes) -> bytes:
    scope_bytes = scope.encode("utf-8", "surrogatepass")
    message = _LENGTH.pack(len(scope_bytes)) + scope_bytes + body
    return hmac.new(key, message, hashlib.sha256).digest()[:TAG_BYTES]


def _pack(cursor: Cursor) -> bytes:
    parts = [bytes([len(cursor)])]
    for name in sorted(cursor):
        value = cursor[name]
        parts.append(_text(name))
        if isinstance(value, int):
            parts += [_INT, _INT64.pack(value)]
        else:
            parts += [_STR, _text(value)]
    return b"".join(parts)


def _text(value: str) -> bytes:
    encoded = value.encode("utf-8")
    return _LENGTH.pack(len(encoded)) + encoded


def _unpack(data: bytes) -> dict[str, Any]:
    reader = _Reader(data)
    cursor: dict[str, Any] = {}
    for _ in range(reader.take(1)[0]):
        name = reader.text()
        kind = reader.take(1)
        if kind == _INT:
            cursor[name] = _INT64.unpack(reader.take(_INT64.size))[0]
        elif kind == _STR:
            cursor[name] = reader.text()
        else:
            raise _Malformed
    if reader.position != len(data):
        raise _Malformed
    return cursor


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def take(self, size: int) -> bytes:
        end = self.position + size
        if end > len(self.data):
            raise _Malformed
        chunk = self.data[self.position : end]
        self.position = end
        return chunk

    def text(self) -> str:
        (size,) = _LENGTH.unpack(self.take(_LENGTH.size))
        try:
            return self.take(size).decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed from None
