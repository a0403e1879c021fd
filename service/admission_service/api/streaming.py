"""Sending a streamed response (StreamAdmit, StreamReconcile) in chunks, without letting a
caller that reads slowly, or not at all, hold a worker's memory.

A streamed response is committed, and stored for its request_id, before its first chunk leaves;
the worker then holds its bytes until the last chunk is written. gRPC accepts a chunk only as
fast as the caller reads (HTTP/2 flow control: a few MiB are buffered, then ``write`` waits), so
without bounds a caller could keep a 1 GiB response in the worker's memory for as long as its
connection lives, and a few callers could exhaust it. Two bounds, both ending the stream with
UNAVAILABLE, which the clients retry under the same request_id to receive the response again
(replayed from the log, byte for byte):

- ``stall_seconds``: a chunk gRPC has not accepted in that long means the caller stopped
  reading (``RESPONSE_STREAM_STALLED``);
- ``StreamingBudget``: the bytes of the responses a worker is sending at once
  (``PAS_LIMIT_MAX_STREAMING_BYTES``); a response that would take it past is dropped before its
  first chunk (``STREAMING_BYTES_EXHAUSTED``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from admission_service.api.convert import varint
from admission_service.domain.errors import Unavailable
from admission_service.off_loop import sha256_started

# A streamed response's chunks carry at most this many bytes of the encoded response: far below
# gRPC's default 4 MiB receive limit and the buffers of proxies on the way (deploy/nginx).
CHUNK_BYTES = 1024 * 1024


class StreamStalled(Unavailable):
    reason = "RESPONSE_STREAM_STALLED"

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"the caller read nothing of the streamed response for {seconds:g} seconds; the "
            "call committed: retry it with the same request_id to receive its response",
            stall_seconds=f"{seconds:g}",
        )


class StreamingBytesExhausted(Unavailable):
    reason = "STREAMING_BYTES_EXHAUSTED"

    def __init__(self, limit: int, held: int, value: int) -> None:
        super().__init__(
            f"this worker is sending {held} bytes of streamed responses and may hold {limit}; "
            f"this one ({value} bytes) was dropped. The call committed: retry it with the same "
            "request_id, with backoff, to receive its response",
            limit=str(limit),
            held=str(held),
            value=str(value),
        )


class StreamingBudget:
    """The bytes of streamed responses one worker holds while sending them (one event loop:
    no lock), with what operators watch (``telemetry.metrics``): the bytes held, the streams
    ended because their caller stalled and the responses dropped over the budget (exhausted)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.stalled = 0
        self.exhausted = 0

    @contextmanager
    def holding(self, size: int) -> Iterator[None]:
        """``size`` bytes held for the block; ``StreamingBytesExhausted`` when they do not fit."""
        if self.held + size > self.limit:
            self.exhausted += 1
            raise StreamingBytesExhausted(self.limit, self.held, size)
        self.held += size
        try:
            yield
        finally:
            self.held -= size


class StreamSender:
    """How a worker sends its streamed responses: within ``budget``, each chunk accepted by
    gRPC within ``stall_seconds`` or the stream ended."""

    def __init__(self, budget: StreamingBudget, stall_seconds: float) -> None:
        self.budget = budget
        self.stall_seconds = stall_seconds

    async def send(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        data: bytes,
        sha256_last: bool,
        hashing: asyncio.Task[bytes] | None = None,
    ) -> None:
        """Send ``data`` in chunks of at most ``CHUNK_BYTES`` (``encoded_chunk``), the first
        carrying the whole size, and the first or, with ``sha256_last``, the last carrying the
        SHA-256 the caller checks the reassembled bytes against: ``hashing``'s, the use case's
        hash begun before its commit, or begun here. In the last chunk, the hash (4.6 MB:
        2.7 ms) runs on a thread while the chunks are written; in the first, nothing is sent
        before it is done. The chunks go to gRPC encoded (registered with a pass-through
        serializer)."""
        with self.budget.holding(len(data)):
            hashing = hashing or sha256_started(data)
            try:
                for part, total, carries_digest in chunks_of(data, sha256_last):
                    digest = await hashing if carries_digest else None
                    await self._write(context, encoded_chunk(part, total, digest))
            finally:
                hashing.cancel()  # the stream ended early: nobody waits for the digest

    async def _write(self, context: grpc.aio.ServicerContext[Any, Any], chunk: bytes) -> None:
        """One chunk, accepted by gRPC within ``stall_seconds``."""
        try:
            async with asyncio.timeout(self.stall_seconds):
                await context.write(chunk)
        except TimeoutError:
            self.budget.stalled += 1
            raise StreamStalled(self.stall_seconds) from None
        except Exception:
            # gRPC refuses a write (its ExecuteBatchError) only when the call ended under
            # it: the caller cancelled, or its connection went. gRPC cancels this task a
            # moment later; it unwinds as that cancellation now, not as an INTERNAL error
            # nobody receives.
            raise asyncio.CancelledError from None


def chunks_of(data: bytes, sha256_last: bool) -> Iterator[tuple[memoryview, int | None, bool]]:
    """The chunks ``data`` is sent in, in order: each one's piece (at most ``CHUNK_BYTES``;
    at least one chunk, an empty response being one empty chunk), the whole size for the
    first (None for the others), and whether it carries the digest (the first, or the last
    with ``sha256_last``)."""
    view = memoryview(data)
    offsets = range(0, len(data) or 1, CHUNK_BYTES)
    for offset in offsets:
        first, last = offset == offsets[0], offset == offsets[-1]
        piece = view[offset : offset + CHUNK_BYTES]
        yield piece, len(data) if first else None, last if sha256_last else first


def encoded_chunk(
    part: memoryview | bytes, total: int | None = None, sha256: bytes | None = None
) -> bytes:
    """A chunk message of a streamed response (``StreamAdmitResponse`` and
    ``StreamReconcileResponse`` share their fields: 1 ``data``, 2 ``total_bytes``, 3
    ``sha256``), byte for byte what protobuf's deterministic encoding of it would be. The
    part's bytes are copied once, into the message; building the message and encoding it
    copied them three times (a third of a 4.6 MB response's time in the service's
    streaming)."""
    fields: list[bytes | memoryview] = [b"\x0a", varint(len(part)), part]
    if total is not None:
        fields += (b"\x10", varint(total))
    if sha256 is not None:
        fields += (b"\x1a\x20", sha256)
    return b"".join(fields)
