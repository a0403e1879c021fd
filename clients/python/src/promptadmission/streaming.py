"""Responses of any size: StreamAdmit and StreamReconcile send an ``AdmitResponse`` or
``ReconcileResponse`` encoded, in chunks of at most 1 MiB, so a derived request far over gRPC's
default 4 MiB message limit reaches the caller through default limits and proxies.

``reassemble`` puts the chunks back together: the first chunk carries the whole size, and the
first or, when the request set ``sha256_in_last_chunk``, the last its SHA-256; the bytes are
checked against both before they are parsed. The clients' ``admit_streamed`` and
``reconcile_streamed`` call it (and ask for the digest last: the service then hashes while it
sends); it is public for callers of the raw stubs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Protocol, TypeVar

from google.protobuf.message import Message

__all__ = ["Chunk", "StreamedResponseError", "reassemble"]

_M = TypeVar("_M", bound=Message)


class Chunk(Protocol):
    """A ``StreamAdmitResponse`` or ``StreamReconcileResponse``."""

    @property
    def data(self) -> bytes: ...
    @property
    def total_bytes(self) -> int: ...
    @property
    def sha256(self) -> bytes: ...


class StreamedResponseError(Exception):
    """The chunks do not make the response they announced (missing bytes, or bytes that are
    not the ones whose SHA-256 a chunk carried). Not retried: repeat the call with the same
    ``request_id`` to receive the stored response again."""


def reassemble(chunks: Iterable[Chunk], response_type: type[_M]) -> _M:
    """The response the chunks carry, checked against the size the first announces and the
    SHA-256 the first or the last carries (exactly one of the chunks)."""
    parts: list[bytes] = []
    digests: list[bytes] = []
    total = -1
    for chunk in chunks:
        if total < 0:
            total = chunk.total_bytes
        if chunk.sha256:
            digests.append(chunk.sha256)
        parts.append(chunk.data)
    if total < 0:
        raise StreamedResponseError("the stream ended before its first chunk")
    if len(digests) != 1:
        raise StreamedResponseError(f"{len(digests)} chunks carried a SHA-256, not one")
    digest = digests[0]
    data = b"".join(parts)
    if len(data) != total:
        raise StreamedResponseError(f"received {len(data)} of the {total} bytes announced")
    if hashlib.sha256(data).digest() != digest:
        raise StreamedResponseError("the reassembled response does not match its SHA-256")
    return response_type.FromString(data)
