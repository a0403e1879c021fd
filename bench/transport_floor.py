"""The transport floor of a FULL request (S3): what gRPC and the client's parse alone cost per
surface node, measured on the very responses the service sent.

S3 keeps one FULL ``AdmitResponse`` of its smallest and of its largest session (re-serialized:
the same messages, the same size). This server — a separate ``grpc.aio`` process, as the
service is — answers a call naming a size with those bytes as they are (a pass-through
serializer: nothing built, nothing encoded), and the benchmark's client receives and parses
them into an ``AdmitResponse`` exactly as it does the service's. Its marginal cost per node is
the part of S3's FULL marginal cost that no storage or service code can remove; the rest is the
service's (reading and splicing the frames, PostgreSQL's aggregate).

    python -m bench.transport_floor --listen 127.0.0.1:PORT --blobs DIR   # DIR/<nodes>.bin
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import grpc
from promptadmission.v1 import admission_service_pb2 as api

from bench.client import CHANNEL_OPTIONS
from bench.infra import ServerProcess, start_module

_METHOD = "/bench.TransportFloor/Full"


async def serve(listen: str, blobs: Path) -> None:
    responses = {int(path.stem): path.read_bytes() for path in blobs.glob("*.bin")}

    async def full(request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return responses[int(request)]

    server = grpc.aio.server(options=CHANNEL_OPTIONS)
    handler = grpc.method_handlers_generic_handler(
        "bench.TransportFloor",
        {
            "Full": grpc.unary_unary_rpc_method_handler(
                full, request_deserializer=bytes, response_serializer=bytes
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(listen)
    await server.start()
    print("ready", flush=True)  # noqa: T201 (the parent process waits for this line)
    await server.wait_for_termination()


def start(blobs: Path) -> ServerProcess:
    """This server on a free port, serving the ``<nodes>.bin`` files in ``blobs``."""
    return start_module("bench.transport_floor", ["--blobs", str(blobs)], blobs)


async def measure(responses: dict[int, bytes], samples: int) -> dict[int, float]:
    """p50 (ms) of receiving and parsing each size's response, over ``samples`` calls each,
    the sizes alternating."""
    with tempfile.TemporaryDirectory() as directory:
        for nodes, data in responses.items():
            (Path(directory) / f"{nodes}.bin").write_bytes(data)
        server = start(Path(directory))
        try:
            async with grpc.aio.insecure_channel(server.target, options=CHANNEL_OPTIONS) as ch:
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
        finally:
            server.stop()
    return {nodes: statistics.median(values) * 1000 for nodes, values in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--blobs", type=Path, required=True)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.listen, args.blobs))


if __name__ == "__main__":
    main()
