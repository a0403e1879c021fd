"""The transport floor of a FULL request (S3): what gRPC and the client's parse alone cost per
surface node, measured on the very responses the service sent.

S3 keeps one FULL ``AdmitResponse`` of its smallest and of its largest session (re-serialized:
the same messages, the same size). This server — a separate ``grpc.aio`` process, as the
service is — answers a call naming a size with those bytes as they are (a pass-through
serializer: nothing built, nothing encoded), and the benchmark's client receives and parses
them into an ``AdmitResponse`` exactly as it does the service's. Its marginal cost per node is
the part of S3's FULL marginal cost that no storage or service code can remove; the rest is the
service's (reading and splicing the frames, PostgreSQL's aggregate).

It also streams them (``Stream``), as StreamAdmit sends a response (api/servicer.py
``_stream``): chunks of at most 1 MiB, the first carrying the whole size and SHA-256, each a
``StreamAdmitResponse`` encoded once, before the first call, and written with
``context.write``. That is S7's floor (bench/streamed_full.py): the same bytes in the same
chunks over the same kind of channel, reassembled, checked and parsed by the same client code.

    python -m bench.transport_floor --listen 127.0.0.1:PORT --blobs DIR   # DIR/<key>.bin
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from admission_service.api.allocator import reuse_large_buffers
from admission_service.api.streaming import CHUNK_BYTES
from promptadmission.streaming import reassemble
from promptadmission.v1 import admission_service_pb2 as api

from bench.client import CHANNEL_OPTIONS
from bench.infra import ServerProcess, start_module

_METHOD = "/bench.TransportFloor/Full"
_STREAM = "/bench.TransportFloor/Stream"


def chunked(data: bytes) -> list[bytes]:
    """``data`` as StreamAdmit's encoded chunks (``StreamAdmitResponse``, at most
    ``CHUNK_BYTES`` of data each, the first with the size and SHA-256)."""
    view = memoryview(data)
    first = api.StreamAdmitResponse(
        data=bytes(view[:CHUNK_BYTES]),
        total_bytes=len(data),
        sha256=hashlib.sha256(data).digest(),
    )
    rest = (
        api.StreamAdmitResponse(data=bytes(view[offset : offset + CHUNK_BYTES]))
        for offset in range(CHUNK_BYTES, len(data), CHUNK_BYTES)
    )
    return [chunk.SerializeToString() for chunk in (first, *rest)]


async def serve(listen: str, blobs: Path) -> None:
    reuse_large_buffers()  # as the service's processes do (api/allocator.py)
    responses = {path.stem: path.read_bytes() for path in blobs.glob("*.bin")}
    streams: dict[str, list[bytes]] = {}

    async def full(request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return responses[request.decode()]

    async def stream(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        key = request.decode()
        if key not in streams:  # encoded once, on the first (warm-up) call
            streams[key] = chunked(responses[key])
        for chunk in streams[key]:
            await context.write(chunk)

    server = grpc.aio.server(options=CHANNEL_OPTIONS)
    handler = grpc.method_handlers_generic_handler(
        "bench.TransportFloor",
        {
            "Full": grpc.unary_unary_rpc_method_handler(
                full, request_deserializer=bytes, response_serializer=bytes
            ),
            "Stream": grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=bytes, response_serializer=bytes
            ),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(listen)
    await server.start()
    print("ready", flush=True)  # noqa: T201 (the parent process waits for this line)
    await server.wait_for_termination()


def start(blobs: Path) -> ServerProcess:
    """This server on a free port, serving the ``<key>.bin`` files in ``blobs``."""
    return start_module("bench.transport_floor", ["--blobs", str(blobs)], blobs)


Streamed = grpc.aio.UnaryStreamMultiCallable[str, api.StreamAdmitResponse]


def streamed(ch: grpc.aio.Channel) -> Streamed:
    """The floor's ``Stream``: the chunks of the blob named by the request, as StreamAdmit's."""
    return ch.unary_stream(
        _STREAM,
        request_serializer=str.encode,
        response_deserializer=api.StreamAdmitResponse.FromString,
    )


async def streamed_once(stream: Streamed, key: str) -> float:
    """Seconds to receive, reassemble (size and SHA-256 checked) and parse blob ``key``'s
    chunks, as the clients do a StreamAdmit's."""
    started = time.perf_counter()
    chunks = [chunk async for chunk in stream(key)]
    reassemble(chunks, api.AdmitResponse)
    return time.perf_counter() - started


@contextlib.asynccontextmanager
async def _serving(blobs: dict[str, bytes]) -> AsyncIterator[grpc.aio.Channel]:
    """This server serving ``blobs`` by name, and a channel to it of the benchmark's options."""
    with tempfile.TemporaryDirectory() as directory:
        for name, data in blobs.items():
            (Path(directory) / f"{name}.bin").write_bytes(data)
        server = start(Path(directory))
        try:
            async with grpc.aio.insecure_channel(server.target, options=CHANNEL_OPTIONS) as ch:
                yield ch
        finally:
            server.stop()


@contextlib.asynccontextmanager
async def streaming(blobs: dict[str, bytes]) -> AsyncIterator[Streamed]:
    """This server serving ``blobs`` by name, and its ``Stream``; each blob streamed once first
    (the server encodes its chunks then)."""
    async with _serving(blobs) as ch:
        stream = streamed(ch)
        for name in blobs:
            await streamed_once(stream, name)
        yield stream


async def measure(responses: dict[int, bytes], samples: int) -> dict[int, float]:
    """p50 (ms) of receiving and parsing each size's response, over ``samples`` calls each,
    the sizes alternating."""
    async with _serving({str(nodes): data for nodes, data in responses.items()}) as ch:
        call = ch.unary_unary(
            _METHOD,
            request_serializer=lambda nodes: str(nodes).encode(),
            response_deserializer=api.AdmitResponse.FromString,
        )
        times: dict[int, list[float]] = {nodes: [] for nodes in responses}
        for nodes in responses:  # warm up
            await call(nodes)
        for _ in range(samples):
            for nodes in responses:
                started = time.perf_counter()
                await call(nodes)
                times[nodes].append(time.perf_counter() - started)
    return {nodes: statistics.median(values) * 1000 for nodes, values in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--blobs", type=Path, required=True)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.listen, args.blobs))


if __name__ == "__main__":
    main()
