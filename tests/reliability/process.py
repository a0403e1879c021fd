"""The real service as a child process (``admission-service serve``), to kill -9 and measure.

Started with the venv's ``admission-service`` console script and configured only through the
environment, as an operator would: ``DATABASE_URL``, ``PAS_LISTEN`` on a free loopback port,
``PAS_MIGRATE_ON_START``, the pool size. Output goes to a log file the test can show.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICE_BIN = Path(sys.executable).with_name("admission-service")
# A restarted server is found again quickly: reconnect after 100 ms, back off to at most 1 s.
CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``serve`` runs worker processes: api/workers.py)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                pending += [int(child) for child in task.read_text().split()]
            except OSError:  # the task ended meanwhile
                continue
    return found


def _alive(measure: Callable[[int], float], pid: int) -> float:
    try:
        return measure(pid)
    except (OSError, RuntimeError):  # a worker that ended between listing and reading
        return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time ``pid`` has used so far (Linux ``/proc``, clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServiceProcess:
    """One ``admission-service serve`` child; ``kill()`` is kill -9, ``start()`` starts it
    again on the same port."""

    def __init__(
        self,
        database_url: str,
        log_path: Path,
        *,
        pool_size: int = 10,
        max_overflow: int = 10,
        migrate: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.log_path = log_path
        base = {
            k: v for k, v in os.environ.items() if not k.startswith("PAS_") and k != "DATABASE_URL"
        }
        self.env = {
            **base,
            "DATABASE_URL": database_url,
            "PAS_LISTEN": f"127.0.0.1:{self.port}",
            "PAS_MIGRATE_ON_START": "true" if migrate else "false",
            "PAS_DB_POOL_SIZE": str(pool_size),
            "PAS_DB_MAX_OVERFLOW": str(max_overflow),
            "PAS_SHUTDOWN_GRACE_SECONDS": "2",
            "PAS_LOG_LEVEL": "WARNING",
            **(env or {}),
        }
        self.pool_size = pool_size
        self.max_overflow = max_overflow
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def rss(self) -> int:
        """Of the whole process tree (the workers too)."""
        return int(sum(_alive(rss_bytes, pid) for pid in process_tree(self.pid)))

    def cpu(self) -> float:
        """CPU seconds used so far by the whole process tree."""
        return sum(_alive(cpu_seconds, pid) for pid in process_tree(self.pid))

    async def start(self, within: float = 60.0) -> None:
        """Start it (again, on the same port) and wait until health says SERVING."""
        assert not self.running, "already running"
        with self.log_path.open("ab") as log:
            log.write(f"---- start {self.starts} at {time.time():.3f}\n".encode())
            log.flush()
            self.process = await asyncio.create_subprocess_exec(
                str(SERVICE_BIN),
                "serve",
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1
        await self.wait_serving(within)

    async def wait_serving(self, within: float) -> None:
        deadline = time.monotonic() + within
        async with grpc.aio.insecure_channel(self.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while True:
                if not self.running:
                    raise RuntimeError(f"the service exited during start:\n{self.log_tail()}")
                try:
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not serving after {within}s:\n{self.log_tail()}")
                await asyncio.sleep(0.05)

    async def kill(self) -> None:
        """kill -9, and reap it."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)
        await self.process.wait()

    async def stop(self, within: float = 15.0) -> int | None:
        """SIGTERM (graceful); kill -9 if it does not exit in time. Returns the exit status."""
        if self.process is None:
            return None
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), within)
            except TimeoutError:
                await self.kill()
        return self.process.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
