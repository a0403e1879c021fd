"""``admission-service serve`` as an operator runs it: a subprocess on its own port, its output
in a log file, used once its health check says SERVING, killed at the end if a test left it
running."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from admission_service.config import Settings
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve_command() -> list[str]:
    script = Path(sys.executable).parent / "admission-service"
    if script.is_file():
        return [str(script), "serve"]
    found = shutil.which("admission-service")
    if found:
        return [found, "serve"]
    return [
        sys.executable,
        "-c",
        "import sys; from admission_service.cli import main; sys.exit(main(['serve']))",
    ]


def wait_until_serving(target: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            assert process.poll() is None, "the service exited before serving"
            try:
                response = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
            except grpc.RpcError:
                time.sleep(0.1)  # polling: nothing listens yet
                continue
            if response.status == health_pb2.HealthCheckResponse.SERVING:
                return
    raise AssertionError(f"the service was not SERVING within {timeout}s")


@dataclass(frozen=True, slots=True)
class Served:
    process: subprocess.Popen[bytes]
    target: str
    log: Path


@contextlib.contextmanager
def serving(database_url: str, tmp_path: Path, **settings: str | None) -> Iterator[Served]:
    """``serve`` on ``database_url`` with the ``PAS_*`` ``settings`` (``None`` removes one the
    environment has), listening on a free port unless ``PAS_LISTEN`` is given; serving."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PAS_LISTEN": f"127.0.0.1:{free_port()}",
        "PAS_LOG_LEVEL": "INFO",
    }
    for name, value in settings.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    target = env["PAS_LISTEN"]
    log = tmp_path / "service.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            serve_command(), env=env, stdout=output, stderr=subprocess.STDOUT, cwd=tmp_path
        )
        try:
            wait_until_serving(target, process, timeout=60)
            yield Served(process, target, log)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


# The watchdog's limit past the grace, as the servers these tests start have it (the default).
_OVERRUN_SECONDS = Settings().shutdown_overrun_seconds


def stop_with_sigterm(process: subprocess.Popen[bytes], log: Path, grace_seconds: float) -> int:
    """SIGTERM, then the exit status. Waits past the shutdown watchdog's limit, so a stop that
    is stuck ends with its stacks in the log (shutdown_watchdog) and the test shows them."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=grace_seconds + _OVERRUN_SECONDS + 15)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"still running after SIGTERM and the watchdog's limit:\n{log.read_text()}"
        ) from None
