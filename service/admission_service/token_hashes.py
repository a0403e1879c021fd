"""The configured form of a bearer token: ``sha256:`` and the hex SHA-256 of its UTF-8.

Shared by the configuration (which checks the entries it reads) and the API's tenancy (which
looks calls up by it), so it sits below both. Tokens are random secrets of at least 128 bits,
so a plain digest is as hard to invert as the token is to guess.
"""

from __future__ import annotations

import hashlib

TOKEN_HASH_PREFIX = "sha256:"


def hash_token(token: str) -> str:
    """The configuration form of ``token``: ``sha256:`` and the hex digest of its UTF-8."""
    return TOKEN_HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def is_token_hash(value: str) -> bool:
    digest = value.removeprefix(TOKEN_HASH_PREFIX)
    return (
        value.startswith(TOKEN_HASH_PREFIX)
        and len(digest) == 64
        and all(c in "0123456789abcdef" for c in digest)
    )
