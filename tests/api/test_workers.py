"""``serve`` with several worker processes sharing the port (issue 14): a real process tree."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from admission_service.api.workers import STRAGGLER_SECONDS
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from tests.api.serve_process import free_port, serving, stop_with_sigterm

GRACE_SECONDS = 5
WORKER_LINE = re.compile(r"worker (\d) of 2 \(pid (\d+)\) starting on \S+ \((\w+)\)")


def free_port_pair() -> int:
    """A port p with p + 1 also free (the two workers' metrics ports)."""
    for _ in range(50):
        port = free_port()
        try:
            with socket.create_server(("127.0.0.1", port + 1)):
                return port
        except OSError:
            continue
    raise AssertionError("no two consecutive free ports")


def calls_counted(metrics_port: int) -> float:
    """CreateSession calls the worker behind ``metrics_port`` has started."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("grpc_server_started_total") and 'grpc_method="CreateSession"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class TwoWorkers:
    process: subprocess.Popen[bytes]
    target: str
    metrics: int
    log: Path

    def worker_pids(self) -> set[int]:
        """The workers' pids, from their start lines (waiting for both)."""
        deadline = time.monotonic() + 60
        while len(found := WORKER_LINE.findall(self.log.read_text())) < 2:
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)  # polling: another process's log
        # Each serves on the default event loop (PAS_EVENT_LOOP), uvloop.
        assert {loop for _, _, loop in found} == {"uvloop"}
        return {int(pid) for _, pid, _ in found}


@contextlib.contextmanager
def two_workers(
    database_url: str, tmp_path: Path, grace_seconds: float = GRACE_SECONDS, **env: str
) -> Iterator[TwoWorkers]:
    """``serve`` with PAS_WORKERS=2 as a real process tree, serving; killed at the end if the
    test left it running."""
    metrics = free_port_pair()
    with serving(
        database_url,
        tmp_path,
        PAS_METRICS_LISTEN=f"127.0.0.1:{metrics}",
        PAS_WORKERS="2",
        PAS_SHUTDOWN_GRACE_SECONDS=str(grace_seconds),
        PAS_LOG_FORMAT="text",
        **env,
    ) as served:
        yield TwoWorkers(served.process, served.target, metrics, served.log)


def wait_gone(pids: set[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.slow
def test_two_workers_share_the_port_and_drain_on_sigterm(database_url: str, tmp_path: Path) -> None:
    with two_workers(database_url, tmp_path) as server:
        pids = server.worker_pids()
        assert len(pids) == 2 and server.process.pid not in pids
        # Every new connection is handed to one of the listening workers by the kernel; a
        # private subchannel pool makes each channel its own connection.
        served = [0.0, 0.0]
        deadline = time.monotonic() + 60
        while min(served) == 0 and time.monotonic() < deadline:
            for _ in range(8):
                options = [("grpc.use_local_subchannel_pool", 1)]
                with grpc.insecure_channel(server.target, options=options) as channel:
                    grpc.channel_ready_future(channel).result(timeout=10)
                    api_grpc.AdmissionServiceStub(channel).CreateSession(
                        api.CreateSessionRequest(session_id=f"w-{uuid.uuid4().hex}"), timeout=10
                    )
            served = [calls_counted(server.metrics), calls_counted(server.metrics + 1)]
        assert min(served) > 0, f"calls per worker: {served}"
        code = stop_with_sigterm(server.process, server.log, GRACE_SECONDS)
    text = server.log.read_text()
    assert code == 0, text
    assert text.count("shutting down") == 2, text  # each worker drained
    assert "Traceback" not in text
    assert wait_gone(pids, 5)


@pytest.mark.slow
def test_workers_do_not_outlive_a_killed_parent(database_url: str, tmp_path: Path) -> None:
    """kill -9 of the parent (a crash) takes the workers with it: orphans would go on serving
    the shared port beside a restarted server."""
    with two_workers(database_url, tmp_path) as server:
        pids = server.worker_pids()
        server.process.kill()
        server.process.wait()
        assert wait_gone(pids, 10), f"workers {pids} outlived their parent"


@pytest.mark.slow
def test_a_worker_that_cannot_stop_is_killed_past_the_bound(
    database_url: str, tmp_path: Path
) -> None:
    """A worker whose own shutdown watchdog cannot run (here: stopped, SIGSTOP) must not keep
    the server from exiting: past the grace + the watchdog's overrun (PAS_SHUTDOWN_OVERRUN_SECONDS,
    shortened here from its 30 s) + STRAGGLER_SECONDS the parent kills it and exits 1, naming
    it."""
    grace, overrun = 1.0, 3.0
    with two_workers(
        database_url, tmp_path, grace, PAS_SHUTDOWN_OVERRUN_SECONDS=f"{overrun:g}"
    ) as server:
        pids = server.worker_pids()
        frozen = min(pids)
        os.kill(frozen, signal.SIGSTOP)
        started = time.monotonic()
        code = stop_with_sigterm(server.process, server.log, grace + STRAGGLER_SECONDS)
        took = time.monotonic() - started
    text = server.log.read_text()
    assert code == 1, text
    bound = grace + overrun + STRAGGLER_SECONDS
    assert f"(pid {frozen}) did not stop within {bound:g}s of SIGTERM: killing it" in text
    assert took >= bound - 1, took  # the other worker's quick stop did not end the wait
    assert wait_gone(pids, 5)
