"""S7 (issue 23): a FULL Admit of a session of a million tokens, streamed (StreamAdmit), beside
the transport floor of the same bytes. Target: its p50 <= 2x the floor's.

The session is tests/clients/large_sessions.py's "1M": a question, then five 920 000-character
tool outputs of seeded prose (~4.6 MB; 1.05 M tokens by o200k_base on the ``openai`` route,
1.11 M by Claude's tokenizer on the ``anthropic`` one), grown once per route. Each sample is a
FULL Admit with a fresh ``request_id`` (as ``admit_streamed`` sends, so the service commits and
stores it as it does for a client), no new users (the same request every time), in each wire
format: NEUTRAL (typed messages), OPENAI_CHAT and OPENAI_RESPONSES on the ``openai`` session,
ANTHROPIC_MESSAGES on the ``anthropic`` one (rendered bodies). The client receives the chunks
on a ``grpc.aio`` channel and reassembles, checks and parses them
(``promptadmission.streaming.reassemble``, what ``admit_streamed`` does), asking for the SHA-256
in the last chunk as the clients do; ``--compare-first`` also times, sample by sample, a call
asking for it in the first (the service then hashes the response before sending it).

The floor (bench/transport_floor.py ``Stream``) is a separate ``grpc.aio`` process that streams
each format's response bytes, as the service sent them, in the same 1 MiB chunks with the size
and SHA-256 in the first, encoded before the first call; the same client code receives,
reassembles, checks and parses them on the same kind of channel. Service and floor samples
alternate, format by format, so both see the same machine.

    python -m bench.streamed_full [--samples 30] [--workers N] [--compare-first] [--out FILE]

(the service on a database of its own: DATABASE_URL's server, else an embedded PostgreSQL).
``python -m bench --only S7`` runs it inside the full benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

import grpc
from promptadmission import SyncAdmissionClient
from promptadmission.streaming import reassemble
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from bench import transport_floor
from bench.client import CHANNEL_OPTIONS
from bench.infra import ServerProcess, bench_database, chosen, print_report, start_service
from tests.clients.large_sessions import (
    FAMILY,
    TEXT_RESULTS,
    WIRE_NAMES,
    Family,
    Grown,
    full_request,
    grow,
)

TARGET_RATIO = 2.0


def grow_sessions(target: str, text_results: int) -> dict[Family, Grown]:
    """The 1M session on each family's route (``text_results`` tool outputs of ~0.9 MB)."""
    families: tuple[Family, ...] = ("openai", "anthropic")
    with SyncAdmissionClient(target, timeout=600) as client:
        return {
            family: grow(client, "1M", family, text_results=text_results) for family in families
        }


async def service_once(
    admission: api_grpc.AdmissionServiceAsyncStub, request: api.AdmitRequest, sha256_last: bool
) -> tuple[float, bytes]:
    """One FULL StreamAdmit with a fresh request_id: its seconds and the response's bytes."""
    request.request_id = str(uuid.uuid4())
    started = time.perf_counter()
    call = admission.StreamAdmit(
        api.StreamAdmitRequest(request=request, sha256_in_last_chunk=sha256_last)
    )
    chunks = [chunk async for chunk in call]
    response = reassemble(chunks, api.AdmitResponse)
    elapsed = time.perf_counter() - started
    assert response.request.view == pb.REQUEST_VIEW_FULL
    return elapsed, b"".join(chunk.data for chunk in chunks)


def p50_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


async def s7_streamed_full(
    service: ServerProcess,
    samples: int,
    text_results: int = TEXT_RESULTS,
    formats: tuple[str, ...] = tuple(WIRE_NAMES.values()),
    compare_first: bool = False,
) -> dict[str, Any]:
    """Per wire format: the service's and the floor's p50 (ms), their ratio, the bytes; and
    the largest ratio (the headline, against ``TARGET_RATIO``). ``compare_first``: also the
    p50 of a call asking for the SHA-256 in the first chunk, in the same samples."""
    started = time.perf_counter()
    sessions = await asyncio.to_thread(grow_sessions, service.target, text_results)
    grow_s = time.perf_counter() - started
    requests = {
        WIRE_NAMES[wire]: full_request(sessions[family], wire, step=0)
        for wire, family in FAMILY.items()
        if WIRE_NAMES[wire] in formats
    }
    service_times: dict[str, list[float]] = {name: [] for name in requests}
    floor_times: dict[str, list[float]] = {name: [] for name in requests}
    first_times: dict[str, list[float]] = {name: [] for name in requests}
    blobs: dict[str, bytes] = {}
    async with grpc.aio.insecure_channel(service.target, options=CHANNEL_OPTIONS) as ch:
        admission = cast("api_grpc.AdmissionServiceAsyncStub", api_grpc.AdmissionServiceStub(ch))
        for name, request in requests.items():  # warm up; each format's bytes for the floor
            for _ in range(2):
                _, blobs[name] = await service_once(admission, request, True)
        async with transport_floor.streaming(blobs) as stream:
            for _ in range(samples):
                for name, request in requests.items():
                    elapsed, _ = await service_once(admission, request, True)
                    service_times[name].append(elapsed)
                    if compare_first:
                        elapsed, _ = await service_once(admission, request, False)
                        first_times[name].append(elapsed)
                    floor_times[name].append(await transport_floor.streamed_once(stream, name))
    rows: dict[str, Any] = {}
    for name in requests:
        service_p50, floor_p50 = p50_ms(service_times[name]), p50_ms(floor_times[name])
        rows[name] = {
            "response_bytes": len(blobs[name]),
            "total_tokens": api.AdmitResponse.FromString(blobs[name]).forecast.total_tokens,
            "service_p50_ms": service_p50,
            "service_p90_ms": round(statistics.quantiles(service_times[name], n=10)[-1] * 1000, 2)
            if len(service_times[name]) > 1
            else service_p50,
            "floor_p50_ms": floor_p50,
            "ratio": round(service_p50 / floor_p50, 3),
            "samples": len(service_times[name]),
        }
        if compare_first:
            first_p50 = p50_ms(first_times[name])
            rows[name]["sha256_first_p50_ms"] = first_p50
            rows[name]["sha256_first_ratio"] = round(first_p50 / floor_p50, 3)
    return {
        "grow_s": round(grow_s, 2),
        "formats": rows,
        "p50_ratio_transport": max(row["ratio"] for row in rows.values()),
        "target_ratio": TARGET_RATIO,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.streamed_full")
    parser.add_argument("--samples", type=int, default=30, help="Admits per wire format")
    parser.add_argument("--workers", type=int, help="PAS_WORKERS (default: the service's)")
    parser.add_argument(
        "--text-results", type=int, default=TEXT_RESULTS, help="tool outputs of ~0.9 MB"
    )
    parser.add_argument(
        "--formats",
        default=",".join(WIRE_NAMES.values()),
        help="the wire formats to measure (default: all)",
    )
    parser.add_argument(
        "--compare-first",
        action="store_true",
        help="also time calls asking for the SHA-256 in the first chunk",
    )
    parser.add_argument("--logs", type=Path, help="keep the service's log in this directory")
    parser.add_argument(
        "--profile", type=Path, help="record py-spy collapsed stacks of the service to this file"
    )
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    try:
        formats = chosen(args.formats, WIRE_NAMES.values())
    except ValueError as error:
        parser.error(f"--formats: {error}")
    env = {} if args.workers is None else {"PAS_WORKERS": str(args.workers)}
    with bench_database() as (url, where), tempfile.TemporaryDirectory() as temporary:
        logs = args.logs or Path(temporary)
        logs.mkdir(parents=True, exist_ok=True)
        service = start_service(url, logs, env=env)
        profiler = None
        if args.profile:
            from bench.run import start_profiler  # bench.run imports this module

            profiler = start_profiler(service.pid, args.profile)
        try:
            workers = len(service.workers())
            result = asyncio.run(
                s7_streamed_full(
                    service, args.samples, args.text_results, formats, args.compare_first
                )
            )
        finally:
            if profiler is not None:
                profiler.send_signal(2)  # py-spy writes its output on SIGINT
                profiler.wait(60)
            service.stop()
    report = {"server": where, "service_workers": workers, **result}
    report["target_met"] = result["p50_ratio_transport"] <= TARGET_RATIO
    print_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
