"""``python -m bench.receive_stall``: how long receiving one large unary request holds a bare
``grpc.aio`` server's event loop, with nothing of the service in the way.

Every call to the service pays gRPC's receive path before any of the service's code runs. It
runs on the event loop with the GIL held, so while a large request is received no other call
on that worker makes progress. This probe isolates that part, so a gRPC upgrade (or a change
of channel options) can be judged on its own. It uses a generic handler whose deserializer is
the identity (the bytes as received, no parse) and a ticker task that sleeps 1 ms at a time and
records each gap between its wake-ups. A client in another process (its GIL is not the
server's) sends ``--requests`` requests of ``--mib`` MiB one after the other. The longest gaps
are the loop's stalls.

    python -m bench.receive_stall --mib 15 --requests 60

Measured with grpcio 1.80.0 and 1.85.3 on the same machine (docs/BENCHMARKS.md, tenth round).
Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import grpc
from grpc import aio

from bench.infra import print_report

MIB = 1 << 20
UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
METHOD = "/bench.ReceiveStall/Take"

# The client, in a process of its own: ``size`` bytes, ``count`` times, to ``target``.
_CLIENT = """
import sys, grpc
target, size, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
with grpc.insecure_channel(target, options=options) as channel:
    take = channel.unary_unary("/bench.ReceiveStall/Take")
    payload = b"x" * size
    for _ in range(count):
        take(payload)
"""


async def _take(request: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:
    return b"ok"


async def measure(size: int, requests: int) -> dict[str, object]:
    server = aio.server(options=UNLIMITED)
    handler = grpc.method_handlers_generic_handler(
        "bench.ReceiveStall", {"Take": grpc.unary_unary_rpc_method_handler(_take)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append((now - last) * 1000)
            last = now

    ticking = asyncio.create_task(ticker())
    try:
        client = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CLIENT, f"127.0.0.1:{port}", str(size), str(requests)
        )
        if await client.wait() != 0:
            raise RuntimeError("the client failed")
    finally:
        done.set()
        await ticking
        await server.stop(None)
    gaps.sort()
    return {
        "grpcio": grpc.__version__,
        "request_mib": round(size / MIB, 2),
        "requests": requests,
        "loop_gap_ms": {
            "p50": round(statistics.median(gaps), 2),
            "p99": round(gaps[int(len(gaps) * 0.99)], 2),
            "max": round(gaps[-1], 2),
            # Each request stalls the loop once: the median of the ``requests`` longest gaps is
            # a request's typical stall.
            "median_stall": round(statistics.median(gaps[-requests:]), 2),
            "longest": [round(gap, 1) for gap in gaps[-10:]],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.receive_stall")
    parser.add_argument("--mib", type=float, default=15.0, help="each request's size")
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(int(args.mib * MIB), args.requests))
    print_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
