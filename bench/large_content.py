"""``python -m bench.large_content``: another session's Admit latency while one caller sends
Admits of 15 x 1 MiB user messages (issue 23 item 5), beside the same latency without that load.

The real service (``admission-service serve``, on a database of its own) on the in-history
route ``deepseek/deepseek-flash`` (DeepSeek V4's tokenizer, ~0.5 s a MiB). A process of its own
(its GIL is not the measured caller's) sends the large Admits back to back (``validate_only``,
so the session stays small; except in the *committed* case); the main process measures ``--calls``
small Admits on another session, one after the other. Three cases:

* *refused*: the default response bound (4 MiB): each large Admit is refused with
  RESPONSE_TOO_LARGE, which is checked before any counting;
* *admitted*: the bound raised to 64 MiB, so each large Admit is counted (off the event loop,
  in a thread) and its 15 MiB request derived and returned;
* *committed*: as *admitted*, but each large Admit is written (each on a session of its own, so
  no session reaches its size bound): its events and surface nodes encoded, sent to PostgreSQL
  and committed, the work a harness's large step really costs;
* *tools*: a harness's steps on one session, each written (with a ``request_id``, as the
  clients send one, so its response is stored too), each with one short user message
  and the same tool set of 15 x ``--mib`` MiB of schemas in 64 tools (each under the 256 KiB
  schema bound), as a harness sends its tools every step: what a large tool set costs the
  worker each step once it is logged and priced.

``--mib`` sets the size of each large message (default 1). ``--wire-format`` the large Admits'
format (default neutral; a provider format also renders the body, in the *tools* case with the
tool set in it every step). ``--workers`` sets PAS_WORKERS
(default 1: both callers on the same worker, the stall's worst case; with more, the kernel may
put the two connections on different workers). Prints JSON.
Target: the loaded p99 <= 50 ms and <= 2x the unloaded p99.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import random
import statistics
import tempfile
import time
from pathlib import Path
from queue import Empty
from typing import Any

import grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from bench.client import user
from bench.infra import bench_database, chosen, print_report, start_service

MIB = 1 << 20
ROUTE = pb.Route(provider="deepseek", model="deepseek-flash", context_window=1_000_000)
# Each case's response bound: refused, the default 4 MiB; admitted and committed, raised above
# the 15 MiB request.
CASES = {"refused": 4 * MIB, "admitted": 64 * MIB, "committed": 64 * MIB, "tools": 64 * MIB}
# The tools case's tool set: its 15 x --mib MiB in this many tools (64 x 240 KiB for 1 MiB).
TOOLS = 64
WIRE_FORMATS = {
    name.removeprefix("WIRE_FORMAT_"): number
    for name, number in pb.WireFormat.items()
    if name != "WIRE_FORMAT_UNSPECIFIED"
}
UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def fresh_texts(count: int, chars: int, rng: random.Random) -> list[str]:
    """``count`` prose-like texts of random words drawn from 200 000 of them, more than a
    tokenizer's word cache keeps."""
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocabulary = ["".join(rng.choices(letters, k=rng.randint(1, 9))) for _ in range(200_000)]
    return [" ".join(rng.choices(vocabulary, k=chars // 5))[:chars] for _ in range(count)]


def large_tools(count: int, chars: int, rng: random.Random) -> list[pb.Tool]:
    """``count`` tools whose schemas hold ``chars`` characters of prose each (in a property's
    description, as real schemas carry theirs)."""
    return [
        pb.Tool(
            name=f"tool_{number}",
            description=f"Tool {number}.",
            parameters_json=json.dumps(
                {"type": "object", "properties": {"path": {"type": "string", "description": text}}}
            ),
        )
        for number, text in enumerate(fresh_texts(count, chars - 100, rng))
    ]


def admit(session_id: str, step: int, users: list[str], **fields: Any) -> api.AdmitRequest:
    return api.AdmitRequest(
        session_id=session_id,
        turn=0,
        step=step,
        rendered_prompt="You are a careful coding agent.",
        route=ROUTE,
        users=[user(text) for text in users],
        **fields,
    )


def small_latencies(stub: api_grpc.AdmissionServiceStub, calls: int) -> list[float]:
    """``calls`` small Admits on a new session, each timed (ms)."""
    session_id = f"bench-small-{random.getrandbits(48):x}"
    stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
    times = []
    for step in range(calls):
        started = time.perf_counter()
        stub.Admit(admit(session_id, step, [f"step {step}: read the next file"]))
        times.append((time.perf_counter() - started) * 1000)
    return times


def large_load(
    target: str,
    seed: int,
    message_bytes: int,
    case: str,
    wire_format: int,
    started: Any,
    stop: Any,
    outcomes: Any,
) -> None:
    """Large Admits (15 messages of ``message_bytes``, or in the *tools* case as many bytes of
    tool schemas; validate_only, or in the *committed* case each written on a new session, in
    the *tools* case as the steps of one session) back to back on their own channel until
    ``stop``; ``started`` is set as the first is sent; each call's status code name is put on
    ``outcomes``. Run in a process of its own: building and sending 15 MiB requests holds a
    GIL, which must not be the measured caller's (its latency is the service's)."""
    commit = case in ("committed", "tools")
    rng = random.Random(seed)
    tools = large_tools(TOOLS, 15 * message_bytes // TOOLS, rng) if case == "tools" else []
    texts = fresh_texts(3 if tools else 45, 100 if tools else message_bytes, rng)
    with grpc.insecure_channel(target, options=UNLIMITED) as channel:
        stub = api_grpc.AdmissionServiceStub(channel)
        session_id = ""
        sent = 0
        while not stop.is_set():
            step = sent if tools else 0  # the tools case's steps go on one session
            if not session_id or (commit and not tools):
                session_id = f"bench-large-{random.getrandbits(48):x}"
                stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
            users = [texts[(sent + i) % len(texts)] for i in range(1 if tools else 15)]
            sent += len(users)
            started.set()
            try:
                request = admit(
                    session_id,
                    step,
                    users,
                    tools=tools,
                    validate_only=not commit,
                    wire_format=wire_format,
                    # as the clients send one: a committed step also stores its response
                    request_id=f"large-{sent}" if commit else "",
                )
                stub.Admit(request)
                outcomes.put("OK")
            except grpc.RpcError as error:
                outcomes.put(error.code().name)


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if values else 0.0


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values), 2),
        "p99_ms": round(percentile(values, 99), 2),
        "max_ms": round(max(values), 2),
    }


def measure_case(
    url: str,
    logs: Path,
    env: dict[str, str],
    calls: int,
    message_bytes: int,
    seed: int,
    case: str,
    wire_format: int,
) -> dict[str, Any]:
    server = start_service(url, logs, env=env)
    try:
        with grpc.insecure_channel(server.target, options=UNLIMITED) as channel:
            stub = api_grpc.AdmissionServiceStub(channel)
            small_latencies(stub, 20)  # warm: connection, tokenizer, statements
            unloaded = small_latencies(stub, calls)
            processes = multiprocessing.get_context("spawn")
            started, stop, queue = processes.Event(), processes.Event(), processes.Queue()
            load = processes.Process(
                target=large_load,
                args=(server.target, seed, message_bytes, case, wire_format, started, stop, queue),
            )
            load.start()
            if not started.wait(120):
                raise RuntimeError("the large load did not start")
            time.sleep(1.0)  # the load's first call in flight
            loaded = small_latencies(stub, calls)
            stop.set()
            outcomes: list[str] = []
            while load.is_alive() or not queue.empty():
                with contextlib.suppress(Empty):
                    outcomes.append(queue.get(timeout=0.2))
            load.join()
    finally:
        server.stop()
    base, under = summary(unloaded), summary(loaded)
    return {
        "unloaded": base,
        "loaded": under,
        "loaded_over_unloaded_p99": round(under["p99_ms"] / base["p99_ms"], 2),
        "large_calls": {code: outcomes.count(code) for code in sorted(set(outcomes))},
        "target_met": under["p99_ms"] <= 50 and under["p99_ms"] <= 2 * base["p99_ms"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.large_content")
    parser.add_argument(
        "--calls",
        type=int,
        default=2500,
        help="small Admits per measurement (a window long enough to hold large calls whose "
        "counts are remembered: shorter, it sees only the first call's counting)",
    )
    parser.add_argument("--workers", type=int, default=1, help="PAS_WORKERS")
    parser.add_argument(
        "--mib", type=float, default=1.0, help="the size of each of a large Admit's 15 messages"
    )
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        help=f"which cases to run, comma-separated (of {', '.join(CASES)})",
    )
    parser.add_argument(
        "--wire-format",
        choices=[name.lower() for name in WIRE_FORMATS],
        default="neutral",
        help="the large Admits' wire format",
    )
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    try:
        cases_run = chosen(args.cases, CASES)
    except ValueError as error:
        parser.error(f"--cases: {error}")
    workers = {"PAS_WORKERS": str(args.workers)}
    cases = {}
    with bench_database() as (url, where), tempfile.TemporaryDirectory() as logs:
        for case in cases_run:
            env = {**workers, "PAS_LIMIT_MAX_RESPONSE_BYTES": str(CASES[case])}
            cases[case] = measure_case(
                url,
                Path(logs),
                env,
                args.calls,
                int(args.mib * MIB),
                seed=23,
                case=case,
                wire_format=WIRE_FORMATS[args.wire_format.upper()],
            )
    report = {
        "server": where,
        "workers": args.workers,
        "calls": args.calls,
        "large_admit_mib": round(15 * args.mib, 2),
        "wire_format": args.wire_format,
        **cases,
    }
    print_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
