"""Opaque tokens: page tokens and compaction plan tokens.

A token is base64url JSON with a checksum, bound to the session (or tenant) it was issued for.
It is not a secret — everything it names is re-validated — but a corrupted, truncated or
foreign token is refused with INVALID_ARGUMENT instead of being misread.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from admission_service.domain.errors import InvalidArgument


def _checksum(scope: str, body: bytes) -> str:
    return hashlib.sha256(scope.encode() + b"\x00" + body).hexdigest()[:16]


def encode_token(scope: str, payload: dict[str, Any]) -> str:
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    data = json.dumps({"b": body.decode(), "c": _checksum(scope, body)}).encode()
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def decode_token(scope: str, token: str, field: str) -> dict[str, Any]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        body = data["b"].encode()
        if data["c"] != _checksum(scope, body):
            raise ValueError("checksum")
        payload = json.loads(body)
        if not isinstance(payload, dict):
            raise ValueError("shape")
    except (ValueError, KeyError, TypeError, UnicodeError):
        raise InvalidArgument(field, "is not a token this service issued for this call") from None
    return payload
