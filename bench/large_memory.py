"""``python -m bench.large_memory``: a worker's resident memory while one caller sends large
Admits, and after it stops (issue 23: sessions of any size must not grow a worker for ever).

The real service (``admission-service serve``, one worker, on a database of its own) gets
``--calls`` Admits of 15 x 1 MiB user messages, one after the other (``validate_only``, so the
session stays small; the ``openai`` route, whose tokenizer counts 15 MiB in about a second).
Three cases, the first two as in ``bench.large_content``:

* *refused*: the default response bound (4 MiB): each Admit is refused with RESPONSE_TOO_LARGE;
* *admitted*: the bound raised to 64 MiB, so each Admit is counted and its request returned;
* *cancelled*: the default bounds, each Admit sent as a StreamAdmit whose caller cancels after
  the first chunk (the handler is cancelled in the middle of writing its response, with the
  request and the whole response in its frames).

The worker's RSS is read four times during the calls and ``--idle`` seconds (3) after the
last. Prints JSON. A flat line is the target: what one large call needs is given back, or
reused by the next. ``--mib`` sets each message's size (default 1; the smoke test sends
15 x 0.3 MiB, still above the 4 MiB bound).

    python -m bench.large_memory --calls 60
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from bench.infra import bench_database, print_report, start_service
from bench.large_content import MIB, UNLIMITED, admit, fresh_texts

ROUTE = pb.Route(provider="openai", model="gpt-test", context_window=8_000_000)


def unary(stub: api_grpc.AdmissionServiceStub, request: api.AdmitRequest) -> str:
    """The Admit as a unary call; its status."""
    try:
        stub.Admit(request)
        return "OK"
    except grpc.RpcError as error:
        return str(error.code().name)


def cancelled_stream(stub: api_grpc.AdmissionServiceStub, request: api.AdmitRequest) -> str:
    """The Admit as a StreamAdmit, cancelled by its caller once the first chunk arrived."""
    # A grpc._channel._MultiThreadedRendezvous (an iterator and a call); the stubs' type,
    # CallIterator, declares neither ``__next__`` nor ``cancel``.
    chunks: Any = stub.StreamAdmit(api.StreamAdmitRequest(request=request))
    try:
        next(chunks)
    except grpc.RpcError as error:
        return str(error.code().name)
    chunks.cancel()
    return "CANCELLED_AFTER_FIRST_CHUNK"


Call = Callable[[api_grpc.AdmissionServiceStub, api.AdmitRequest], str]


def measure_case(
    url: str, logs: Path, bound: int, call_as: Call, calls: int, message_bytes: int, idle: float
) -> dict[str, Any]:
    env = {"PAS_WORKERS": "1", "PAS_LIMIT_MAX_RESPONSE_BYTES": str(bound)}
    server = start_service(url, logs, env=env)
    try:

        def rss() -> float:
            return round(server.rss_mib(), 1)  # the one worker's

        texts = fresh_texts(30, message_bytes, random.Random(7))
        samples: dict[str, float] = {"start": rss()}
        outcomes: dict[str, int] = {}
        with grpc.insecure_channel(server.target, options=UNLIMITED) as channel:
            stub = api_grpc.AdmissionServiceStub(channel)
            session_id = f"bench-memory-{random.getrandbits(48):x}"
            stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
            for call in range(calls):
                users = [texts[(call * 7 + k) % len(texts)] for k in range(15)]
                request = admit(session_id, 0, users, validate_only=True)
                request.route.CopyFrom(ROUTE)
                code = call_as(stub, request)
                outcomes[code] = outcomes.get(code, 0) + 1
                if (call + 1) % max(1, calls // 4) == 0:
                    samples[f"after {call + 1}"] = rss()
        time.sleep(idle)
        samples[f"{idle:g} s idle"] = rss()
    finally:
        server.stop()
    return {"rss_mib": samples, "calls": outcomes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.large_memory")
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument(
        "--mib", type=float, default=1.0, help="the size of each of an Admit's 15 messages"
    )
    parser.add_argument(
        "--idle", type=float, default=3.0, help="seconds after the last call, before the last read"
    )
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    cases_run: dict[str, tuple[int, Call]] = {
        "refused": (4 * MIB, unary),
        "admitted": (64 * MIB, unary),
        "cancelled": (4 * MIB, cancelled_stream),
    }
    message_bytes = int(args.mib * MIB)
    with bench_database() as (url, where), tempfile.TemporaryDirectory() as logs:
        cases = {
            case: measure_case(url, Path(logs), bound, call, args.calls, message_bytes, args.idle)
            for case, (bound, call) in cases_run.items()
        }
    print_report({"server": where, "large_admit_mib": round(15 * args.mib, 2), **cases}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
