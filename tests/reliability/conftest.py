"""Fixtures of the reliability suite (``docs/RELIABILITY.md``).

* ``profile``: the scenario sizes (``PAS_RELIABILITY_PROFILE``, ``PAS_RELIABILITY_<FIELD>``).
* ``fresh_database``: a new migrated database on the run's server, dropped after the test.
* ``services``: starts ``admission-service serve`` children (``ServiceProcess``) and stops
  them after the test.
* ``own_postgres``: an embedded PostgreSQL of the test's own, to stop and start (never the
  shared server).
* ``figures``: a scenario's reported figures, shown at the end of the run and appended to
  ``$PAS_RELIABILITY_REPORT`` when set.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from admission_service.storage.engine import normalise_database_url

from tests.conftest import TestDatabases

from .process import ServiceProcess
from .profile import Profile, load_profile
from .stats import COLLECTED, Figures


@pytest.fixture(scope="session")
def profile() -> Profile:
    return load_profile()


@pytest.fixture
def figures(profile: Profile, request: pytest.FixtureRequest) -> Callable[[str], Figures]:
    def make(scenario: str) -> Figures:
        return Figures(scenario, profile.name)

    return make


@pytest.fixture
def fresh_database(test_databases: TestDatabases) -> Iterator[str]:
    url = test_databases.create()
    yield url
    test_databases.drop(url)


class StartService(Protocol):
    async def __call__(self, database_url: str, **settings: Any) -> ServiceProcess: ...


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[StartService]:
    started: list[ServiceProcess] = []

    async def start(database_url: str, **settings: Any) -> ServiceProcess:
        service = ServiceProcess(database_url, tmp_path / f"service-{len(started)}.log", **settings)
        started.append(service)
        await service.start()
        return service

    yield start
    for service in started:
        await service.stop()


class OwnPostgres:
    """An embedded PostgreSQL of the test's own (never the shared server), run by a helper
    process (``pg_holder``), to stop and start again on the same port and data."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port: int | None = None
        self._url = ""
        self._holder: asyncio.subprocess.Process | None = None

    def url(self) -> str:
        return normalise_database_url(self._url)

    async def start(self) -> None:
        command = [sys.executable, "-m", "tests.reliability.pg_holder", str(self.data_dir)]
        if self.port is not None:
            command.append(str(self.port))
        self._holder = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert self._holder.stdout is not None
        line = await asyncio.wait_for(self._holder.stdout.readline(), 120)
        if not line:
            raise RuntimeError("the embedded PostgreSQL did not start")
        port, self._url = line.decode().split()
        self.port = int(port)

    async def stop(self) -> None:
        """A fast shutdown: open connections are terminated."""
        holder, self._holder = self._holder, None
        if holder is None:
            return
        assert holder.stdin is not None
        holder.stdin.close()
        await asyncio.wait_for(holder.wait(), 60)


@pytest.fixture
async def own_postgres() -> AsyncIterator[OwnPostgres]:
    # Not under pytest's basetemp: under root the server runs as another OS user.
    data_dir = Path(tempfile.mkdtemp(prefix="pas-reliability-postgres-"))
    server = OwnPostgres(data_dir)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not COLLECTED:
        return
    terminalreporter.section("reliability figures")
    for record in sorted(COLLECTED, key=lambda r: str(r["scenario"])):
        values = {k: v for k, v in record.items() if k not in ("scenario", "profile")}
        terminalreporter.write_line(f"{record['scenario']} [{record['profile']}]: {values}")


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """The random seed of the scenario (``PAS_RELIABILITY_SEED`` to replay one)."""
    raw = os.environ.get("PAS_RELIABILITY_SEED", "").strip()
    value = int(raw) if raw else random.randrange(2**32)
    request.node.user_properties.append(("seed", value))
    return value
