"""The embedded server: what the service runs on when ``DATABASE_URL`` is unset (SPEC §10).

These tests run whatever ``DATABASE_URL`` says, on a cluster of their own (initialised once for
the module), so that restarts and kills cannot disturb the run's shared database.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from admission_service.storage.embedded import (
    EmbeddedPostgres,
    EmbeddedPostgresError,
    start_embedded_postgres,
)
from admission_service.storage.engine import (
    libpq_url,
    normalise_database_url,
    resolve_database_url,
)


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pas-test-embedded-"))
    yield path
    start_embedded_postgres(path, durable=False).stop()  # whatever a test left running
    shutil.rmtree(path, ignore_errors=True)


def query(url: str, sql: str) -> object:
    with psycopg.connect(libpq_url(url), connect_timeout=5) as connection:
        row = connection.execute(sql).fetchone()
        assert row is not None
        return row[0]


def in_subprocess(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        status = Path(f"/proc/{pid}/stat")
        if status.exists() and status.read_text().rpartition(")")[2].split()[0] == "Z":
            return  # a zombie: dead, waiting for its (foreign) parent to reap it
        time.sleep(0.02)
    raise AssertionError(f"process {pid} still alive")


def test_without_database_url_the_embedded_server_is_used(data_dir: Path) -> None:
    url = resolve_database_url({"PAS_DATA_DIR": str(data_dir)})

    assert url.startswith("postgresql+psycopg://")
    assert query(url, "SELECT inet_server_addr()::text") == "127.0.0.1/32"
    assert query(url, "SHOW listen_addresses") == "127.0.0.1"
    server = start_embedded_postgres(data_dir)  # the same process gets the same server
    assert normalise_database_url(server.url()) == url
    server.stop()
    assert not server.running
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()


def test_database_url_wins_over_the_embedded_server(tmp_path: Path) -> None:
    env = {"DATABASE_URL": "postgresql://u:p@db.example:6432/pas", "PAS_DATA_DIR": str(tmp_path)}
    assert resolve_database_url(env) == "postgresql+psycopg://u:p@db.example:6432/pas"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p%40ss@h:5432/d", "postgresql+psycopg://u:p%40ss@h:5432/d"),
        ("postgres://u@h/d", "postgresql+psycopg://u@h/d"),
        (
            "postgresql+psycopg://u@h/d?sslmode=require",
            "postgresql+psycopg://u@h/d?sslmode=require",
        ),
    ],
)
def test_database_urls_are_normalised_to_psycopg(given: str, expected: str) -> None:
    assert normalise_database_url(given) == expected


def test_other_drivers_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        normalise_database_url("mysql://u@h/d")


def test_data_survives_a_restart_on_a_configured_port(data_dir: Path) -> None:
    with start_embedded_postgres(data_dir, durable=False) as first:
        port = first.port
        with psycopg.connect(libpq_url(first.url())) as connection:
            connection.execute("CREATE TABLE kept (v int)")
            connection.execute("INSERT INTO kept VALUES (7)")
    with start_embedded_postgres(data_dir, port=port, durable=False) as second:
        assert second.port == port
        assert query(second.url(), "SELECT sum(v) FROM kept") == 7


def test_a_stale_pid_file_does_not_block_the_next_start(data_dir: Path) -> None:
    server = start_embedded_postgres(data_dir, durable=False)
    os.kill(server.pid, signal.SIGKILL)  # a crash: postmaster.pid stays behind
    server.stop()
    pid_file = data_dir / "pgdata" / "postmaster.pid"
    assert pid_file.exists()
    # Worse: the recorded pid now belongs to an unrelated live process.
    unrelated = subprocess.Popen(["sleep", "30"])
    try:
        lines = pid_file.read_text().splitlines()
        pid_file.write_text("\n".join([str(unrelated.pid), *lines[1:]]) + "\n")

        with start_embedded_postgres(data_dir, durable=False) as restarted:
            assert query(restarted.url(), "SELECT 1") == 1
        assert unrelated.poll() is None, "the unrelated process was left alone"
    finally:
        unrelated.kill()
        unrelated.wait()


def test_a_server_orphaned_by_a_killed_run_is_replaced(data_dir: Path) -> None:
    killed = in_subprocess(
        f"""
        import os, signal
        from admission_service.storage.embedded import start_embedded_postgres
        server = start_embedded_postgres({str(data_dir)!r}, durable=False)
        print(server.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    orphan = int(killed.stdout.split()[0])
    os.kill(orphan, 0)  # still running, with nobody to stop it

    with start_embedded_postgres(data_dir, durable=False) as server:
        assert server.pid != orphan
        assert query(server.url(), "SELECT 1") == 1
        wait_gone(orphan)


def test_a_data_dir_in_use_by_another_process_is_refused(data_dir: Path) -> None:
    with start_embedded_postgres(data_dir, durable=False) as server:
        other = in_subprocess(
            f"""
            from admission_service.storage.embedded import start_embedded_postgres
            start_embedded_postgres({str(data_dir)!r})
            """
        )
        assert other.returncode != 0
        assert EmbeddedPostgresError.__name__ in other.stderr
        assert f"in use by another process (pid {os.getpid()})" in other.stderr
        assert server.running


def test_a_new_data_dir_below_a_private_directory_works() -> None:
    # A parent readable only by the caller: under root the server's own account must still
    # be able to reach its data directory.
    parent = Path(tempfile.mkdtemp(prefix="pas-test-fresh-"))
    try:
        server: EmbeddedPostgres = start_embedded_postgres(parent / "a" / "b", durable=False)
        with server:
            assert query(server.url(), "SHOW server_encoding") == "UTF8"
            assert (parent / "a" / "b" / "pgdata" / "PG_VERSION").is_file()
            assert not (parent / "a" / "b" / "pgdata.init").exists()
    finally:
        shutil.rmtree(parent, ignore_errors=True)
