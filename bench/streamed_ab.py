"""S7 (``bench.streamed_full``) on two checkouts of the service at once: each grows its own 1M
sessions on one database, then every sample takes one FULL StreamAdmit per checkout (their
order alternating) and one call of the transport floor, format by format, so a change to the
streamed path is measured against its parent on the same machine at the same moment (S7's
floor moves ±10 % between runs; this pairs the calls instead).

    git worktree add /tmp/before <commit>
    python -m bench.streamed_ab /tmp/before . [--samples 40] [--text-results 5]

Each checkout's ``service`` folder is put first on its server's ``PYTHONPATH`` (``bench.paired``);
the client (this process) asks for the digest in the last chunk, which an older service ignores.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import cast

import grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from bench import paired, transport_floor
from bench.client import CHANNEL_OPTIONS
from bench.infra import ServerProcess, bench_database
from bench.streamed_full import grow_sessions, p50_ms, service_once
from tests.clients.large_sessions import FAMILY, TEXT_RESULTS, WIRE_NAMES, full_request


async def measure(trees: dict[str, str], samples: int, text_results: int) -> dict[str, object]:
    """Per wire format: the floor's p50 and each checkout's p50 (ms) and ratio to it."""
    with bench_database() as (url, _), tempfile.TemporaryDirectory() as logs:
        services = paired.serve(url, Path(logs), trees)
        try:
            requests: dict[str, dict[str, api.AdmitRequest]] = {}
            for key, service in services.items():
                sessions = await asyncio.to_thread(grow_sessions, service.target, text_results)
                requests[key] = {
                    WIRE_NAMES[wire]: full_request(sessions[family], wire, step=0)
                    for wire, family in FAMILY.items()
                }
            return await _alternate(services, requests, samples)
        finally:
            for service in services.values():
                service.stop()


async def _alternate(
    services: dict[str, ServerProcess],
    requests: dict[str, dict[str, api.AdmitRequest]],
    samples: int,
) -> dict[str, object]:
    keys = list(services)
    names = list(requests[keys[0]])
    channels = {
        key: grpc.aio.insecure_channel(service.target, options=CHANNEL_OPTIONS)
        for key, service in services.items()
    }
    stubs = {
        key: cast("api_grpc.AdmissionServiceAsyncStub", api_grpc.AdmissionServiceStub(ch))
        for key, ch in channels.items()
    }
    times: dict[tuple[str, str], list[float]] = {(k, n): [] for k in keys for n in names}
    floor_times: dict[str, list[float]] = {name: [] for name in names}
    blobs: dict[str, bytes] = {}
    try:
        for key in keys:  # warm up; the floor streams the first checkout's bytes
            for name in names:
                for _ in range(2):
                    _, blobs[name] = await service_once(stubs[key], requests[key][name], True)
        async with transport_floor.streaming(blobs) as stream:
            for sample in range(samples):
                order = keys if sample % 2 == 0 else keys[::-1]
                for name in names:
                    for key in order:
                        elapsed, _ = await service_once(stubs[key], requests[key][name], True)
                        times[(key, name)].append(elapsed)
                    floor_times[name].append(await transport_floor.streamed_once(stream, name))
    finally:
        for ch in channels.values():
            await ch.close(None)
    rows: dict[str, object] = {}
    for name in names:
        floor_p50 = p50_ms(floor_times[name])
        row: dict[str, float] = {"floor_p50_ms": floor_p50}
        for key in keys:
            p50 = p50_ms(times[(key, name)])
            row[f"{key}_p50_ms"], row[f"{key}_ratio"] = p50, round(p50 / floor_p50, 3)
        rows[name] = row
    return {"samples": samples, "formats": rows}


def main(argv: list[str] | None = None) -> None:
    parser = paired.parser(__doc__)
    parser.add_argument("--samples", type=int, default=40, help="StreamAdmits per checkout")
    parser.add_argument(
        "--text-results", type=int, default=TEXT_RESULTS, help="tool outputs of ~0.9 MB"
    )
    args = parser.parse_args(argv)
    trees = paired.checkouts(args)
    paired.report(trees, asyncio.run(measure(trees, args.samples, args.text_results)))


if __name__ == "__main__":
    main()
