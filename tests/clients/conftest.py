"""Fixtures for the client tests: the real service, run as its own process.

The server is the installed ``admission-service serve`` (the console script beside the running
interpreter) on a free loopback port, serving the run's migrated test database. Running it out
of process lets the blocking ``SyncAdmissionClient`` and the TypeScript driver call it while the
test's event loop waits on them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
TYPESCRIPT = ROOT / "clients/typescript"
START_TIMEOUT = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_until_serving(target: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"admission-service exited with {process.returncode}:\n{log.read_text()}"
                )
            try:
                response = health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"admission-service did not serve on {target} in time:\n{log.read_text()}"
                )
            time.sleep(0.05)


@pytest.fixture(scope="session")
def server_target(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``127.0.0.1:<port>`` of a running ``admission-service serve`` on the test database (its
    output goes to ``server.log`` in the run's temporary directory)."""
    log = tmp_path_factory.mktemp("admission-service") / "server.log"
    target = f"127.0.0.1:{_free_port()}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PAS_LISTEN": target,
        "PAS_MIGRATE_ON_START": "false",
        "PAS_LOG_LEVEL": "WARNING",
        "PAS_SHUTDOWN_GRACE_SECONDS": "1",
    }
    command = [str(Path(sys.executable).with_name("admission-service")), "serve"]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        _wait_until_serving(target, process, log)
        yield target
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def node_driver() -> list[str]:
    """The command that runs the TypeScript client's test driver (built by ``make ts-test``).

    Without node or the built driver the test is skipped, unless ``PAS_REQUIRE_TYPESCRIPT=1``
    (as ``make test`` sets it), where that is a failure.
    """
    node = shutil.which("node")
    driver = TYPESCRIPT / "dist/test/driver.js"
    missing = (
        "node is not installed"
        if node is None
        else f"{driver.relative_to(ROOT)} is not built (run `make ts-test`)"
        if not driver.exists()
        else None
    )
    if missing is not None:
        if os.environ.get("PAS_REQUIRE_TYPESCRIPT") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    assert node is not None
    return [node, str(driver)]
