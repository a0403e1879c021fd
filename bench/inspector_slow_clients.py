"""``python -m bench.inspector_slow_clients``: another tenant's API latency while slow clients
hold the inspector (issue 21 item 2).

Starts ``admission-service serve`` as configured by default (``PAS_WORKERS`` unset: one worker
per core, unless ``--workers``) with the inspector on and two tenants' tokens, on a database of
its own. Tenant B's calls (GetSession and ListSessions, alternately, one at a time) are timed
without an attack, then while ``--connections`` unauthenticated clients each open a connection
to the inspector, send ``GET / HTTP/1.1\\r\\nHost: x\\r\\n`` and wait (connecting again half a
second after the server closes it, so the pressure lasts the whole measurement). Printed as
JSON: each phase's p50, p99 and max in ms and its failed calls, the slow clients' connections
opened and closed by the server, the most threads and open sockets the inspector's process had
and the most threads of the whole server.

    python -m bench.inspector_slow_clients [--connections 2000] [--calls 400] [--workers N]

It measures whatever ``admission_service`` the interpreter imports (``PYTHONPATH`` may point at
an older checkout's ``service/``: before issue 21 the inspector ran inside the serving process
and only ``--workers 1`` started).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

import grpc
from admission_service.token_hashes import hash_token
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from bench.infra import ServerProcess, bench_database, free_port, start_service

SLOW_REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n"
ATTACKER_TOKEN = "slow-clients-attacker-0123456789abcdef"
VICTIM_TOKEN = "slow-clients-victim-0123456789abcdef"
INSPECTOR_LINE = re.compile(rb"inspector \(pid (\d+)\) serving")


@dataclass
class SlowClients:
    """``count`` slow clients against ``host:port`` until ``stop``."""

    host: str
    port: int
    count: int
    reconnect_after: float | None = None  # None: a closed client stays closed
    opened: int = 0
    closed_by_server: int = 0
    failed: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _attempts: int = 0
    _tried: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self, *, within: float = 60) -> None:
        """Start every client and wait until each has tried to connect once."""
        self._tasks = [asyncio.create_task(self._client()) for _ in range(self.count)]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._tried.wait(), within)

    def _attempted(self) -> None:
        self._attempts += 1
        if self._attempts == self.count:
            self._tried.set()

    async def _client(self) -> None:
        first = True
        while True:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), 10
                )
            except (OSError, TimeoutError):
                self.failed += 1
                if first:
                    first = False
                    self._attempted()
                if self.reconnect_after is None:
                    return
                await asyncio.sleep(self.reconnect_after)
                continue
            self.opened += 1
            if first:
                first = False
                self._attempted()
            try:
                writer.write(SLOW_REQUEST)
                await writer.drain()
                while await reader.read(65536):
                    pass  # a 503 before the close, or nothing
                self.closed_by_server += 1
            except OSError:
                self.closed_by_server += 1
            finally:
                writer.close()
            if self.reconnect_after is None:
                return
            await asyncio.sleep(self.reconnect_after)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def counts(self) -> dict[str, int]:
        return {
            "connections_opened": self.opened,
            "closed_by_server": self.closed_by_server,
            "connect_failures": self.failed,
        }


def _attacker_main(host: str, port: int, count: int, reconnect: bool, pipe: Connection) -> None:
    """The slow clients' own process (an attacker is not the victim's event loop): connects
    them, says so, holds them until told to stop, then reports its counts."""

    async def attack() -> None:
        clients = SlowClients(host, port, count, reconnect_after=0.5 if reconnect else None)
        await clients.start()
        pipe.send(clients.counts())
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
        await clients.stop()
        pipe.send(clients.counts())

    asyncio.run(attack())


@contextlib.contextmanager
def slow_clients_process(
    host: str, port: int, count: int, *, reconnect: bool = False
) -> Iterator[Callable[[], dict[str, int]]]:
    """``count`` slow clients in a process of their own, connected when this yields; the
    yielded function stops them and returns their counts."""
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=_attacker_main, args=(host, port, count, reconnect, theirs), daemon=True
    )
    process.start()
    final: dict[str, int] = {}

    def stop() -> dict[str, int]:
        if not final:
            ours.send("stop")
            final.update(ours.recv() if ours.poll(30) else {})
        return final

    try:
        if not ours.poll(90):
            raise RuntimeError("the slow clients did not connect within 90 s")
        ours.recv()
        yield stop
    finally:
        stop()
        process.join(10)
        if process.is_alive():
            process.kill()


def stub(target: str) -> tuple[grpc.aio.Channel, api_grpc.AdmissionServiceAsyncStub]:
    channel = grpc.aio.insecure_channel(target)
    return channel, cast(
        "api_grpc.AdmissionServiceAsyncStub", api_grpc.AdmissionServiceStub(channel)
    )


async def timed_calls(
    service: api_grpc.AdmissionServiceAsyncStub, token: str, session_ids: list[str], calls: int
) -> tuple[list[float], int]:
    """Latencies (s) of ``calls`` GetSession/ListSessions calls, one at a time, and the
    number that failed (a 5 s deadline each)."""
    metadata = (("authorization", f"Bearer {token}"),)
    latencies: list[float] = []
    failures = 0
    for index in range(calls):
        started = time.perf_counter()
        try:
            if index % 2:
                await service.ListSessions(
                    api.ListSessionsRequest(page_size=20), metadata=metadata, timeout=5
                )
            else:
                session_id = session_ids[index // 2 % len(session_ids)]
                await service.GetSession(
                    api.GetSessionRequest(session_id=session_id), metadata=metadata, timeout=5
                )
        except grpc.aio.AioRpcError:
            failures += 1
            continue
        latencies.append(time.perf_counter() - started)
    return latencies, failures


def summary(latencies: list[float], failures: int) -> dict[str, Any]:
    ordered = sorted(latencies) or [float("nan")]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "calls": len(latencies) + failures,
        "failed": failures,
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def open_sockets(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            count += fd.readlink().name.startswith("socket:")
    return count


def server_pids(server: ServerProcess) -> list[int]:
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children")
    with contextlib.suppress(OSError):
        return [server.pid, *(int(pid) for pid in children.read_text().split())]
    return [server.pid]


def inspector_pid(server: ServerProcess, timeout: float = 30) -> int:
    """The inspector's process (before issue 21: the serving process itself)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = INSPECTOR_LINE.search(server.log.read_bytes())
        if found:
            return int(found.group(1))
        if b"serving the inspector on" in server.log.read_bytes():
            return server.pid
        time.sleep(0.1)  # polling: another process's log
    raise RuntimeError(f"the inspector did not start: see {server.log}")


@dataclass
class Peaks:
    """The most threads and sockets seen while sampling."""

    inspector_threads: int = 0
    inspector_sockets: int = 0
    server_threads: int = 0

    def sample(self, server: ServerProcess, inspector: int) -> None:
        with contextlib.suppress(OSError):
            self.inspector_threads = max(self.inspector_threads, threads(inspector))
            self.inspector_sockets = max(self.inspector_sockets, open_sockets(inspector))
            total = sum(threads(pid) for pid in server_pids(server))
            self.server_threads = max(self.server_threads, total)


async def sampling(peaks: Peaks, server: ServerProcess, inspector: int) -> None:
    while True:
        peaks.sample(server, inspector)
        await asyncio.sleep(0.2)


async def measure(
    server: ServerProcess, inspector_port: int, connections: int, calls: int, reconnect: bool
) -> dict[str, Any]:
    channel, service = stub(server.target)
    metadata = (("authorization", f"Bearer {VICTIM_TOKEN}"),)
    session_ids = []
    for _ in range(10):
        created = await service.CreateSession(
            api.CreateSessionRequest(), metadata=metadata, timeout=10
        )
        session_ids.append(created.session.session_id)
    await timed_calls(service, VICTIM_TOKEN, session_ids, 50)  # warm every worker's pool
    inspector = inspector_pid(server)
    idle = Peaks()
    idle.sample(server, inspector)
    baseline = summary(*await timed_calls(service, VICTIM_TOKEN, session_ids, calls))
    peaks = Peaks()
    sampler = asyncio.create_task(sampling(peaks, server, inspector))
    try:
        with slow_clients_process(
            "127.0.0.1", inspector_port, connections, reconnect=reconnect
        ) as stop:
            attacked = summary(*await timed_calls(service, VICTIM_TOKEN, session_ids, calls))
            counts = await asyncio.to_thread(stop)
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        await channel.close(None)
    return {
        "slow_connections": connections,
        "without_attack": baseline,
        "with_attack": attacked,
        "attack": {**counts, "reconnecting": reconnect},
        "idle": {
            "inspector_threads": idle.inspector_threads,
            "server_threads": idle.server_threads,
        },
        "peak": {
            "inspector_threads": peaks.inspector_threads,
            "inspector_sockets": peaks.inspector_sockets,
            "server_threads": peaks.server_threads,
        },
        "server_alive": server.process.poll() is None,
    }


def server_env(inspector_port: int, workers: int | None) -> dict[str, str]:
    tokens = f"attacker={hash_token(ATTACKER_TOKEN)} victim={hash_token(VICTIM_TOKEN)}"
    env = {
        "PAS_AUTH_TOKENS": tokens,
        "PAS_INSPECTOR_LISTEN": f"127.0.0.1:{inspector_port}",
        "PAS_LOG_LEVEL": "INFO",
        "PAS_LOG_FORMAT": "text",
    }
    if workers is not None:
        env["PAS_WORKERS"] = str(workers)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--workers", type=int, default=None, help="default: PAS_WORKERS' own")
    parser.add_argument(
        "--reconnect", action="store_true", help="a client connects again 0.5 s after a close"
    )
    args = parser.parse_args()
    inspector_port = free_port()
    with bench_database() as (url, _), tempfile.TemporaryDirectory() as logs:
        server = start_service(url, Path(logs), env=server_env(inspector_port, args.workers))
        try:
            result = asyncio.run(
                measure(server, inspector_port, args.connections, args.calls, args.reconnect)
            )
        finally:
            server.stop()
    print(json.dumps(result, indent=2))  # noqa: T201 (the measurement is the output)


if __name__ == "__main__":
    main()
