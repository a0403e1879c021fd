"""The benchmark's own database and server processes.

The benchmark never touches a database it did not create: it creates ``pas_bench_<random>`` on
``DATABASE_URL``'s server when that is set (and drops it at the end), else it starts a private
embedded PostgreSQL in a temporary directory. The service and the floor run as separate
processes, so the load generator never shares their event loop.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from admission_service.storage.embedded import start_embedded_postgres
from admission_service.storage.engine import normalise_database_url
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parents[1]
SERVE = "from admission_service.cli import main; raise SystemExit(main())"


def _execute(server_url: str, statement: str) -> None:
    engine = create_engine(server_url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text(statement))
    finally:
        engine.dispose()


@contextlib.contextmanager
def bench_database(*, durable: bool = True) -> Iterator[tuple[str, str]]:
    """A dedicated, empty database for this run: (its URL, a description of the server)."""
    configured = os.environ.get("DATABASE_URL", "").strip()
    data_dir: Path | None = None
    server = None
    if configured:
        server_url = normalise_database_url(configured)
        where = "DATABASE_URL's server"
    else:
        data_dir = Path(tempfile.mkdtemp(prefix="pas-bench-postgres-"))
        server = start_embedded_postgres(data_dir, durable=durable)
        server_url = normalise_database_url(server.url())
        where = "embedded PostgreSQL" + ("" if durable else " (fsync off)")
    name = f"pas_bench_{secrets.token_hex(6)}"
    _execute(server_url, f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url, where
    finally:
        try:
            _execute(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            if server is not None:
                server.stop()
            if data_dir is not None:
                shutil.rmtree(data_dir, ignore_errors=True)


def postgres_version(url: str) -> str:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            return str(connection.execute(text("SHOW server_version")).scalar())
    finally:
        engine.dispose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    name: str
    process: subprocess.Popen[bytes]
    target: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def workers(self) -> list[int]:
        """The processes serving calls: the worker children of a multi-worker ``serve``
        (``PAS_WORKERS`` > 1), else the process itself."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        with contextlib.suppress(OSError):
            pids = [int(pid) for pid in children.read_text().split() if _is_worker(int(pid))]
            if pids:
                return pids
        return [self.pid]

    def rss_mib(self) -> float:
        """VmRSS of the largest worker process (``/proc/<pid>/status``), in MiB."""
        return max(_rss_mib(pid) for pid in self.workers())

    def memory(self) -> dict[str, Any]:
        """Every process's RSS, PSS and USS (``/proc/<pid>/smaps_rollup``), in MiB: the
        workers', the largest of each, and the whole server's (a supervising parent included).
        RSS counts the pages a worker shares with the parent and its siblings (copy-on-write
        after the fork) in full in every worker; PSS divides each shared page among the
        processes sharing it, so the server's PSS total is what it really occupies; USS is
        what a worker alone holds (what ending it would free)."""
        workers = [memory_mib(pid) for pid in self.workers()]
        processes = [*workers]
        if self.workers() != [self.pid]:
            processes.append(memory_mib(self.pid))
        return {
            "workers": workers,
            "rss_max_mib": max(w["rss"] for w in workers),
            "pss_max_mib": max(w["pss"] for w in workers),
            "uss_max_mib": max(w["uss"] for w in workers),
            "server_pss_mib": round(sum(p["pss"] for p in processes), 1),
            "server_rss_mib": round(sum(p["rss"] for p in processes), 1),
        }

    def cpu_seconds(self) -> float:
        """User + system CPU time the server's processes have used (``/proc/<pid>/stat``),
        the workers' and a supervising parent's."""
        pids = {self.pid, *self.workers()}
        return sum(_cpu_seconds(pid) for pid in pids)

    def cpu_by_worker(self) -> dict[int, float]:
        """Each worker's user + system CPU seconds so far, by pid."""
        return {pid: _cpu_seconds(pid) for pid in self.workers()}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _is_worker(pid: int) -> bool:
    """A spawned worker, not multiprocessing's resource tracker (also a child)."""
    try:
        return b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def memory_mib(pid: int) -> dict[str, float]:
    """RSS, PSS and USS (private clean + private dirty) of ``pid``, in MiB."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            fields[key] = int(value.split()[0])
    return {
        "pid": pid,
        "rss": round(fields["Rss"] / 1024, 1),
        "pss": round(fields["Pss"] / 1024, 1),
        "uss": round((fields["Private_Clean"] + fields["Private_Dirty"]) / 1024, 1),
    }


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0  # a worker that has exited
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_healthy(server: ServerProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited: see {server.log}")
        with grpc.insecure_channel(server.target) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=1
                )
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
        time.sleep(0.1)
    raise RuntimeError(f"{server.name} did not become healthy: see {server.log}")


def _wait_line(server: ServerProcess, timeout: float) -> None:
    assert server.process.stdout is not None
    deadline = time.monotonic() + timeout
    line = server.process.stdout.readline()
    if line.strip() != b"ready" or time.monotonic() > deadline:
        raise RuntimeError(f"{server.name} did not start: see {server.log}")


def start_service(
    database_url: str,
    log_dir: Path,
    pool_size: int = 10,
    env: dict[str, str] | None = None,
    *,
    prepared_statements: bool | None = True,
    name: str = "service",
) -> ServerProcess:
    """``admission-service serve`` on a free port against ``database_url`` (migrating it);
    ``env`` adds to or overrides its environment. ``prepared_statements`` sets
    ``PAS_DB_PREPARED_STATEMENTS``; ``None`` leaves it unset, so the service takes its own
    default for a ``DATABASE_URL`` (off: a transaction-mode pooler may sit in between), as
    deployments run it. ``name`` names its log (``<name>.log``) when several run at once."""
    port = free_port()
    log = log_dir / f"{name}.log"
    base = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PAS_LISTEN": f"127.0.0.1:{port}",
        "PAS_DB_POOL_SIZE": str(pool_size),
        "PAS_LOG_LEVEL": "WARNING",
        "PAS_MIGRATE_ON_START": "true",
        # S3 measures FULL requests of 100 000 nodes (28 MB) on purpose: above the default
        # response bound, which exists to steer harnesses to the DELTA view.
        "PAS_LIMIT_MAX_RESPONSE_BYTES": str(256 * 1024 * 1024),
    }
    base.pop("PAS_DB_PREPARED_STATEMENTS", None)
    if prepared_statements is not None:
        # True by default: connected directly, as the floors are (they prepare after the
        # fifth run too).
        base["PAS_DB_PREPARED_STATEMENTS"] = "true" if prepared_statements else "false"
    env = {**base, **(env or {})}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVE, "serve"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    server = ServerProcess(name, process, f"127.0.0.1:{port}", log)
    try:
        _wait_healthy(server, 60)
    except BaseException:
        server.stop()
        raise
    return server


def start_floor(
    database_url: str,
    log_dir: Path,
    pool_size: int = 10,
    module: str = "bench.floor",
    processes: int = 1,
) -> ServerProcess:
    """A floor server (``bench.floor``, the service's stack, or ``bench.physical_floor``).
    ``processes`` > 1 (the physical floor only): that many processes sharing the port, as the
    service's workers do, each with a pool of ``pool_size``."""
    arguments = ["--database-url", database_url, "--pool-size", str(pool_size)]
    if processes > 1:
        arguments += ["--processes", str(processes)]
    return start_module(module, arguments, log_dir)


def start_module(module: str, arguments: list[str], log_dir: Path) -> ServerProcess:
    """``python -m module --listen 127.0.0.1:<free port> *arguments``, once it prints
    ``ready``; its standard error in ``log_dir``."""
    port = free_port()
    log = log_dir / f"{module.rpartition('.')[2]}.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", module, "--listen", f"127.0.0.1:{port}", *arguments],
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=REPO,
        )
    server = ServerProcess(module, process, f"127.0.0.1:{port}", log)
    try:
        _wait_line(server, 60)
    except BaseException:
        server.stop()
        raise
    return server


def chosen(names: str, known: Iterable[str]) -> tuple[str, ...]:
    """The names a comma-separated option lists (in any case) among ``known``; a ValueError
    naming the valid ones when it lists none or an unknown one."""
    known = tuple(known)
    picked = tuple(name.strip().lower() for name in names.split(",") if name.strip())
    unknown = [name for name in picked if name not in known]
    if not picked or unknown:
        raise ValueError(f"{', '.join(unknown) or 'none'}; choose among {', '.join(known)}")
    return picked


def print_report(report: dict[str, object], out: Path | None) -> None:
    """A measurement script's result: printed as JSON and, with ``--out``, written there too."""
    text = json.dumps(report, indent=2)
    print(text)  # noqa: T201 (the measurement is the output)
    if out:
        out.write_text(text + "\n")
