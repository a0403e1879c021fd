"""Page tokens minted the way an attacker would (issue 21): with the key derivation of the
service before issue 21, byte for byte what it issued, from nothing but the database URL's
user, password (none with trust authentication) and database name."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from collections.abc import Mapping

_LABEL = b"promptadmission page-token key v1"
_LENGTH = struct.Struct(">H")


def old_derived_key(user: str, password: str | None, database: str) -> bytes:
    material = "\x00".join((user, password or "", database)).encode()
    return hmac.new(_LABEL, material, hashlib.sha256).digest()


def mint_v1(
    user: str, password: str | None, database: str, scope: str, cursor: Mapping[str, int | str]
) -> str:
    """A version-1 token of ``cursor`` for ``scope`` under the old derived key."""

    def text(value: str) -> bytes:
        return _LENGTH.pack(len(value.encode())) + value.encode()

    parts = [bytes([1, len(cursor)])]
    for name in sorted(cursor):
        value = cursor[name]
        parts.append(text(name))
        parts += [b"i", struct.pack(">q", value)] if isinstance(value, int) else [b"s", text(value)]
    body = b"".join(parts)
    scope_bytes = scope.encode()
    key = old_derived_key(user, password, database)
    tag = hmac.new(key, _LENGTH.pack(len(scope_bytes)) + scope_bytes + body, hashlib.sha256)
    return base64.urlsafe_b64encode(body + tag.digest()[:16]).decode().rstrip("=")
