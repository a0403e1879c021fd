"""``admission-service serve`` as an operator runs it: a subprocess that stops on SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

GRACE_SECONDS = 5


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
                time.sleep(0.1)
                continue
            if response.status == health_pb2.HealthCheckResponse.SERVING:
                return
    raise AssertionError(f"the service was not SERVING within {timeout}s")


@pytest.mark.slow
def test_sigterm_shuts_down_gracefully(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PAS_LISTEN": f"127.0.0.1:{port}",
        "PAS_SHUTDOWN_GRACE_SECONDS": str(GRACE_SECONDS),
        "PAS_LOG_LEVEL": "INFO",
    }
    log = tmp_path / "service.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            serve_command(), env=env, stdout=output, stderr=subprocess.STDOUT, cwd=tmp_path
        )
        try:
            wait_until_serving(f"127.0.0.1:{port}", process, timeout=60)
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=GRACE_SECONDS + 10)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    text = log.read_text()
    assert code == 0, text
    assert "shutting down" in text
    assert "Traceback" not in text
