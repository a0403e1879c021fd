"""Shared fixtures.

The database fixtures are lazy: only tests that ask for them start or touch PostgreSQL.
``DATABASE_URL`` (any database on a server where the user may CREATE DATABASE) selects the
server; without it one embedded server is started for the run in a temporary directory. With
``PAS_TEST_CITUS=1`` (``make citus-test``) the server is the coordinator of a local Citus
cluster started for the run (``tests/citus/cluster.py``), and every test database is a
distributed one: created on every node, the schema sharded by session by the migrations. Each
run works in its own ``pas_test_<random>`` databases, built by the real Alembic migrations and
dropped at the end.
"""

from __future__ import annotations

import os

# Before gRPC is imported: grpcio 1.81+ restarts its poller thread in a forked child, which
# crashes (SIGSEGV, "epoll_wait error: Bad file descriptor") once subprocess closes the child's
# descriptors before exec (grpc/grpc#43055, open). A test process holds live grpc.aio channels
# while it starts processes, and a fork that changes user (the embedded PostgreSQL, as root)
# cannot use vfork, so 44 % of such children died (tests/integration/test_fork_under_grpc.py).
# The service needs no fork support: its parent forks the workers before any gRPC exists.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import logging
import secrets
import shutil
import signal
import tempfile
import traceback
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import FrameType

import pytest
import pytest_timeout  # type: ignore[import-untyped]
from admission_service.api import error_status as error_mapping
from admission_service.api.error_status import UNKNOWN_REASON
from admission_service.storage.embedded import start_embedded_postgres
from admission_service.storage.engine import (
    create_engine,
    normalise_database_url,
    run_migrations,
)
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import pool, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from tests.citus.cluster import CitusCluster

CITUS_VARIABLE = "PAS_TEST_CITUS"


TESTS = Path(__file__).parent
# The fast layer (`make unit`): pure tests and tests on the in-memory fake, never PostgreSQL.
UNIT = TESTS / "unit"
# Run alone after the parallel run (`make test`): their latency and resource bounds compare
# figures taken inside the test, which a neighbouring worker's load would skew.
SERIAL = (TESTS / "reliability",)


# How long the teardown after a failed test may take (servers stopped, databases dropped).
AFTER_FAILURE_SECONDS = 300.0


@pytest.hookimpl(trylast=True)
def pytest_exception_interact(node: pytest.Item | pytest.Collector) -> None:
    """pytest-timeout stops a test's timer when it fails (for a debugger): the teardown after a
    failure was unguarded, and `make citus-test` hung there for 12+ minutes (issue 21). Without
    a debugger the timer is armed again: a teardown that hangs dumps every thread's stack and
    ends the run."""
    if isinstance(node, pytest.Item) and not node.config.getoption("usepdb"):
        settings = pytest_timeout.Settings(AFTER_FAILURE_SECONDS, "thread", False, False)
        node.config.hook.pytest_timeout_set_timer(item=node, settings=settings)


# A test still running at this share of its timeout fails where it stands (below).
HANG_REPORT_SHARE = 0.9


class Hung(Exception):
    """A test still running at ``HANG_REPORT_SHARE`` of its timeout, raised where it was."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A hung test fails with where it hung. pytest-timeout's end (its thread method) takes an
    xdist worker down, and the stacks it prints go to the worker's channel, lost with it; CI
    then shows a crashed worker and no cause (stops 29 and 30). A SIGALRM at 90 % of the
    timeout raises ``Hung`` in the main thread, where the test runs: a blocking call returns
    EINTR, Python runs the handler, and the failure's traceback ends at the call that hung.
    A thread stuck in C code that never returns to Python misses it, and pytest-timeout still
    ends that one."""
    # pytest-timeout's own resolution of the marker, --timeout and the ini value.
    timeout = pytest_timeout._get_item_settings(item).timeout
    if not timeout:
        return (yield)
    limit = timeout * HANG_REPORT_SHARE

    def hung(signum: int, frame: FrameType | None) -> None:
        innermost = traceback.extract_stack(frame)[-6:]
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in innermost[::-1])
        raise Hung(f"still running after {limit:g}s, at {where}")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks ``database`` every test that reaches a PostgreSQL test database through the
    fixtures (``make test-db`` runs exactly those on a second server) and refuses one under
    ``tests/unit``; marks ``serial`` the tests that must not share the machine with others."""
    for item in items:
        if "postgres_server_url" in getattr(item, "fixturenames", ()):
            if item.path.is_relative_to(UNIT):
                raise pytest.UsageError(
                    f"{item.nodeid} uses PostgreSQL: tests/unit is the fast layer (pure and "
                    "fake-storage tests); move it to tests/integration or tests/api"
                )
            item.add_marker(pytest.mark.database)
        if any(item.path.is_relative_to(folder) for folder in SERIAL):
            item.add_marker(pytest.mark.serial)


class _UnknownErrorReasons(logging.Handler):
    """Collects the reasons the error interceptor sent that are not ErrorReason values."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        reason = getattr(record, UNKNOWN_REASON, None)
        if reason is not None:
            self.reasons.append(reason)


@pytest.fixture(autouse=True)
def unknown_error_reasons() -> Iterator[list[str]]:
    """Fails any test during which the in-process server sent an error reason missing from
    proto/promptadmission/v1/error_reason.proto (a test expecting one clears the list)."""
    handler = _UnknownErrorReasons()
    logger = logging.getLogger(error_mapping.__name__)
    logger.addHandler(handler)
    try:
        yield handler.reasons
    finally:
        logger.removeHandler(handler)
    assert handler.reasons == [], (
        f"the server sent error reasons that are not ErrorReason values: {handler.reasons}; "
        "add them to proto/promptadmission/v1/error_reason.proto and run `make generate`"
    )


class TestDatabases:
    """Creates and drops uniquely named databases on one server."""

    __test__ = False  # not a test class

    def __init__(self, server_url: str, cluster: CitusCluster | None = None) -> None:
        self.server_url = server_url
        self.cluster = cluster
        self._created: list[str] = []

    def create(self, *, migrate: bool = True) -> str:
        """A new empty database (migrated to head unless ``migrate=False``); its async URL."""
        name = f"pas_test_{secrets.token_hex(6)}"
        if self.cluster is not None:
            self.cluster.create_database(name)
        else:
            self._execute(f'CREATE DATABASE "{name}"')
        self._created.append(name)
        url = make_url(self.server_url).set(database=name).render_as_string(hide_password=False)
        if migrate:
            run_migrations(url)
        return url

    def drop(self, url: str) -> None:
        name = make_url(url).database
        assert name in self._created, f"{name} was not created by this fixture"
        self._drop(name)
        self._created.remove(name)

    def drop_all(self) -> None:
        for name in list(self._created):
            self._drop(name)
        self._created.clear()

    def _drop(self, name: str) -> None:
        if self.cluster is not None:
            self.cluster.drop_database(name)
        else:
            self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _execute(self, statement: str) -> None:
        engine = create_sync_engine(
            self.server_url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT"
        )
        try:
            with engine.connect() as connection:
                connection.execute(text(statement))
        finally:
            engine.dispose()


@pytest.fixture(scope="session")
def citus_cluster() -> Iterator[CitusCluster | None]:
    """With ``PAS_TEST_CITUS=1``: a local Citus cluster for this run, torn down at its end
    (also when tests fail); otherwise None."""
    if os.environ.get(CITUS_VARIABLE, "").strip() != "1":
        yield None
        return
    with CitusCluster.start() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def postgres_server_url(citus_cluster: CitusCluster | None) -> Iterator[str]:
    """The server the test databases live on (``postgresql+psycopg://`` URL of its maintenance
    database): the Citus coordinator with ``PAS_TEST_CITUS=1``, else ``DATABASE_URL`` when
    set, else an embedded server started for this run."""
    if citus_cluster is not None:
        yield normalise_database_url(citus_cluster.url())
        return
    configured = os.environ.get("DATABASE_URL", "").strip()
    if configured:
        yield normalise_database_url(configured)
        return
    # Not under pytest's basetemp: that is private to the user, and the server may run as
    # another OS user (under root).
    data_dir = Path(tempfile.mkdtemp(prefix="pas-test-postgres-"))
    server = start_embedded_postgres(data_dir, durable=False)
    try:
        yield normalise_database_url(server.url())
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def test_databases(
    postgres_server_url: str, citus_cluster: CitusCluster | None
) -> Iterator[TestDatabases]:
    databases = TestDatabases(postgres_server_url, citus_cluster)
    try:
        yield databases
    finally:
        databases.drop_all()


@pytest.fixture(scope="session")
def database_url(test_databases: TestDatabases) -> str:
    """The run's database, migrated to head (``postgresql+psycopg://``). Shared by every test
    of the run: tests that commit must use their own tenant or session ids."""
    return test_databases.create()


@pytest.fixture
def empty_database_url(test_databases: TestDatabases) -> Iterator[str]:
    """A new database with no schema at all, dropped after the test."""
    url = test_databases.create(migrate=False)
    yield url
    test_databases.drop(url)


@pytest.fixture(scope="session")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """The service's kind of engine (``storage.engine.create_engine``) on ``database_url``."""
    engine = create_engine(database_url, pool_size=5, max_overflow=5)
    yield engine
    await engine.dispose()


@pytest.fixture
async def db_session(engine: AsyncEngine) -> AsyncIterator[AsyncSession]:
    """An ``AsyncSession`` inside an outer transaction that is rolled back after the test.

    The code under test may commit: with ``join_transaction_mode="create_savepoint"`` its
    commits and rollbacks only move a savepoint (SQLAlchemy's test-suite recipe).
    """
    async with engine.connect() as connection:
        transaction = await connection.begin()
        session = AsyncSession(
            bind=connection,
            expire_on_commit=False,
            join_transaction_mode="create_savepoint",
        )
        try:
            yield session
        finally:
            await session.close()
            await transaction.rollback()
