"""``python -m bench.trajectory_pages``: what ListTrajectory costs on sessions whose prompt or
tools are large (issue 21 item 3).

The real service (``admission-service serve`` under the default ``PAS_WORKERS``, on a database
of its own) gets:

* *amplification*: one session whose first step stores 1 MiB of tools and a 512 KiB prompt,
  then 199 tiny steps with the same prompt and tools;
* *changes*: one session whose 32 KB prompt changes at each of 60 steps.

For each it reads the whole trajectory with ``page_size`` 200 and with the default page size
(a client allowing any message size), reports the pages, the largest page's bytes, the total
bytes, the seconds, and the growth of the RSS summed over every process of the server (the
parent and its workers, sampled every 10 ms while the pages are read); then four readers at
once, then the same read with a default client (4 MiB receive limit) and the CLI
``admission-service inspect SESSION_ID --trajectory``. Prints JSON.

It only uses fields every version of ListTrajectory has, so it measures an older service too:
run it with the interpreter of that checkout's venv (the service it starts is that venv's).
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from bench.infra import (
    SERVE,
    ServerProcess,
    _rss_mib,
    bench_database,
    print_report,
    start_service,
)

MIB = 1 << 20
ROUTE = pb.Route(provider="deepseek", model="deepseek-flash")
UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def big_tools(total: int, count: int = 4) -> list[pb.Tool]:
    """``count`` tools of ``total`` bytes together (each schema under the 256 KiB limit)."""
    each = total // count - 64
    schema = '{"type":"object","description":"%s"}'
    return [
        pb.Tool(name=f"tool{i}", description="big", parameters_json=schema % ("s" * each))
        for i in range(count)
    ]


def _admit(
    stub: api_grpc.AdmissionServiceStub, sid: str, step: int, prompt: str, tools: Any
) -> None:
    stub.Admit(
        api.AdmitRequest(
            session_id=sid,
            turn=1,
            step=step,
            rendered_prompt=prompt,
            tools=tools,
            route=ROUTE,
            users=[
                pb.Message(
                    role=pb.MESSAGE_ROLE_USER,
                    content=[pb.ContentBlock(text=pb.TextBlock(text=f"u{step}"))],
                )
            ],
        ),
        timeout=60,
    )


def amplification(stub: api_grpc.AdmissionServiceStub, steps: int) -> str:
    sid = f"amp-{uuid.uuid4().hex[:8]}"
    stub.CreateSession(api.CreateSessionRequest(session_id=sid))
    prompt, tools = "p" * (512 * 1024), big_tools(MIB)
    for step in range(1, steps + 1):
        _admit(stub, sid, step, prompt, tools)
    return sid


def changes(stub: api_grpc.AdmissionServiceStub, steps: int) -> str:
    sid = f"chg-{uuid.uuid4().hex[:8]}"
    stub.CreateSession(api.CreateSessionRequest(session_id=sid))
    for step in range(1, steps + 1):
        _admit(stub, sid, step, f"prompt {step} " + "c" * 32_000, [])
    return sid


def _server_rss_mib(server: ServerProcess) -> float:
    """The RSS of every process of the server: the parent and all its descendants."""
    total, pending = 0.0, [server.pid]
    while pending:
        pid = pending.pop()
        try:
            total += _rss_mib(pid)
            for task in Path(f"/proc/{pid}/task").glob("*/children"):
                pending += [int(child) for child in task.read_text().split()]
        except (OSError, RuntimeError):  # ended meanwhile
            continue
    return total


@contextmanager
def _peak(server: ServerProcess) -> Iterator[dict[str, float]]:
    """The RSS growth of the whole server while the block runs (MiB), sampled every 10 ms."""
    before = _server_rss_mib(server)
    figures = {"before": before, "peak": before}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.01):
            figures["peak"] = max(figures["peak"], _server_rss_mib(server))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield figures
    finally:
        stop.set()
        sampler.join()
        figures["peak"] = max(figures["peak"], _server_rss_mib(server))
        figures["growth"] = figures["peak"] - before


def _read(stub: api_grpc.AdmissionServiceStub, sid: str, page_size: int) -> dict[str, Any]:
    sizes, entries, token = [], 0, ""
    start = time.perf_counter()
    while True:
        page = stub.ListTrajectory(
            api.ListTrajectoryRequest(session_id=sid, page_size=page_size, page_token=token),
            timeout=120,
        )
        sizes.append(page.ByteSize())
        entries += len(page.entries)
        if not (token := page.next_page_token):
            break
    return {
        "page_size": page_size,
        "entries": entries,
        "pages": len(sizes),
        "max_page_bytes": max(sizes),
        "total_bytes": sum(sizes),
        "seconds": round(time.perf_counter() - start, 3),
    }


def _measured(server: ServerProcess, read: Callable[[], Any]) -> dict[str, Any]:
    with _peak(server) as rss:
        result = read()
    return {"result": result, "rss_growth_mib": round(rss["growth"], 1)}


def _attempt(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except grpc.RpcError as exc:
        return {"error": exc.code().name, "details": (exc.details() or "")[:120]}


def _cli(target: str, sid: str) -> dict[str, Any]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", SERVE, "inspect", sid, "--trajectory", "--target", target],
        capture_output=True,
        timeout=300,
    )
    return {
        "exit": done.returncode,
        "seconds": round(time.perf_counter() - start, 3),
        "stdout_bytes": len(done.stdout),
        "stderr": done.stderr.decode(errors="replace")[-160:],
    }


def measure(server: ServerProcess, sid: str) -> dict[str, Any]:
    big = grpc.insecure_channel(server.target, options=UNLIMITED)
    default = grpc.insecure_channel(server.target)
    stub, default_stub = api_grpc.AdmissionServiceStub(big), api_grpc.AdmissionServiceStub(default)
    try:
        figures: dict[str, Any] = {}
        for page_size in (200, 0):
            figures[f"page_size_{page_size}"] = _measured(
                server, functools.partial(_read, stub, sid, page_size)
            )

        def four() -> list[Any]:
            with ThreadPoolExecutor(4) as pool:
                return list(pool.map(lambda _: _read(stub, sid, 200)["seconds"], range(4)))

        figures["four_at_once_page_size_200"] = _measured(server, four)
        figures["default_client_default_pages"] = _attempt(lambda: _read(default_stub, sid, 0))
        figures["cli"] = _cli(server.target, sid)
        return figures
    finally:
        big.close()
        default.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trajectory_pages")
    parser.add_argument("--steps", type=int, default=200, help="steps of the amplification case")
    parser.add_argument("--changes", type=int, default=60, help="32 KB prompt changes")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    with bench_database() as (url, where), tempfile.TemporaryDirectory() as logs:
        server = start_service(url, Path(logs))
        try:
            channel = grpc.insecure_channel(server.target, options=UNLIMITED)
            stub = api_grpc.AdmissionServiceStub(channel)
            started = time.perf_counter()
            amp = amplification(stub, args.steps)
            chg = changes(stub, args.changes)
            channel.close()
            report = {
                "server": where,
                "workers": len(server.workers()),
                "setup_seconds": round(time.perf_counter() - started, 1),
                "amplification": {"steps": args.steps, **measure(server, amp)},
                "changes": {"steps": args.changes, **measure(server, chg)},
            }
        finally:
            server.stop()
    print_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
