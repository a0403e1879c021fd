"""Database URL, engine and migrations: the only place that knows how to reach PostgreSQL."""

from __future__ import annotations

import multiprocessing
import os
import select
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from sqlalchemy import event, exc
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from admission_service.storage.embedded import start_embedded_postgres

if TYPE_CHECKING:
    from alembic.config import Config

DRIVER = "postgresql+psycopg"
DEFAULT_DATA_DIR = Path(".data/postgres")
# The Alembic scripts: migrations/ at the repository's top level, shipped in the wheel as the
# package admission_service.migrations (pyproject.toml maps the folder), so an installed wheel
# migrates as a source checkout does. Found through the package, in either case.
MIGRATIONS_DIR = Path(str(resources.files("admission_service.migrations")))
# The last migration's revision. A serving process whose database is already there never
# imports Alembic, which, with a run of the scripts, is about 13 MiB of every worker's memory
# (S6's budget). A new migration updates it; tests/integration/test_migrations.py checks it is
# Alembic's head.
LATEST_MIGRATION = "0011"


class DatabaseEncodingError(RuntimeError):
    """The database is not UTF-8: the service's text (identifiers, JSON) would not round-trip."""


def require_utf8(connection: psycopg.Connection[object] | psycopg.AsyncConnection[object]) -> None:
    """Refuse a connection to a database whose encoding is not UTF8 (``SQL_ASCII`` would hand
    text back as bytes). The server reports its encoding when the connection starts: no query."""
    encoding = connection.info.parameter_status("server_encoding")
    if encoding != "UTF8":
        raise DatabaseEncodingError(
            f"the database {connection.info.dbname!r} is encoded {encoding}; the service needs "
            "a UTF8 database (CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0)"
        )


def normalise_database_url(url: str) -> str:
    """``postgresql://`` / ``postgres://`` / ``postgresql+psycopg://`` -> ``postgresql+psycopg://``.

    The psycopg 3 dialect serves both the sync (migrations) and async (service) engines.
    """
    parsed = make_url(url)
    if parsed.drivername not in ("postgres", "postgresql", DRIVER, "postgresql+psycopg_async"):
        raise ValueError(
            f"unsupported database URL scheme {parsed.drivername!r}; use postgresql://"
        )
    return parsed.set(drivername=DRIVER).render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """The same URL as plain ``postgresql://``, for psycopg or psql directly."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def resolve_database_url(env: Mapping[str, str] | None = None) -> str:
    """``DATABASE_URL`` when set; else an embedded server kept in ``PAS_DATA_DIR``
    (default ``./.data/postgres``; port ``PAS_EMBEDDED_PG_PORT`` or a free one), started now
    and stopped when the process exits."""
    env = os.environ if env is None else env
    url = env.get("DATABASE_URL", "").strip()
    if url:
        return normalise_database_url(url)
    port = env.get("PAS_EMBEDDED_PG_PORT", "").strip()
    server = start_embedded_postgres(
        Path(env.get("PAS_DATA_DIR") or DEFAULT_DATA_DIR), port=int(port) if port else None
    )
    return normalise_database_url(server.url())


def create_engine(
    url: str,
    *,
    pool_size: int = 10,
    max_overflow: int = 10,
    pool_timeout: float = 10.0,
    pool_recycle: float = 1800.0,
    connect_timeout: int = 5,
    application_name: str = "admission-service",
    prepared_statements: bool = False,
) -> AsyncEngine:
    """The service's async engine, safe behind a transaction-mode pooler (PgBouncer & co).

    A pooler hands each transaction to any server connection, so nothing may outlive a
    transaction: psycopg's automatic server-side prepared statements are off
    (``prepare_threshold=None``) unless ``prepared_statements`` (``PAS_DB_PREPARED_STATEMENTS``:
    a direct connection, or a pooler that tracks them), and the service uses no session-level
    state (SET, advisory locks, LISTEN). A connection the pooler or server closed is dropped
    when it leaves the pool (``closed_by_server``, no round trip; the pool hands out another).

    ``connect_timeout`` (seconds, libpq's) bounds every new connection: while the database
    accepts TCP but does not answer, or its host drops packets, a call fails with UNAVAILABLE
    in seconds instead of hanging until the caller's deadline.
    """
    engine = create_async_engine(
        normalise_database_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=pool_timeout,
        pool_recycle=pool_recycle,
        # Errors must never carry prompt or message text into logs (SPEC §9).
        hide_parameters=True,
        connect_args={
            "prepare_threshold": 5 if prepared_statements else None,
            "application_name": application_name,
            "connect_timeout": connect_timeout,
        },
    )

    @event.listens_for(engine.sync_engine, "connect")
    def refuse_non_utf8(dbapi_connection: object, _record: object) -> None:
        require_utf8(dbapi_connection.driver_connection)  # type: ignore[attr-defined]

    @event.listens_for(engine.sync_engine, "checkout")
    def drop_closed(dbapi_connection: object, _record: object, _proxy: object) -> None:
        if closed_by_server(dbapi_connection.driver_connection):  # type: ignore[attr-defined]
            raise exc.DisconnectionError("the server closed this pooled connection")

    return engine


def closed_by_server(connection: psycopg.AsyncConnection[object]) -> bool:
    """Whether a pooled (idle) connection is gone: closed here, or its socket readable. An idle
    connection's server says nothing until asked, unless it is ending the connection (a
    terminated backend, a restart, a pooler's idle timeout sends its error and closes). A check
    of the socket, without a round trip: the pessimistic ``SELECT 1`` (``pool_pre_ping``) cost
    a round trip per call. A silently dropped network is caught by neither; the first statement
    then fails as before, when its socket times out."""
    if connection.closed or connection.broken:
        return True
    try:
        readable, _, _ = select.select([connection.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    return bool(readable)


def alembic_config(url: str) -> Config:
    """An Alembic config built in code for ``url`` (``migrations/env.py`` reads it from
    ``config.attributes``, so no URL escaping rules of the ini format apply)."""
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise RuntimeError(f"migrations not found at {MIGRATIONS_DIR}")
    from alembic.config import Config

    config = Config()
    # The ini format interpolates "%": a path holding one must not be read as a reference.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.attributes["database_url"] = normalise_database_url(url)
    return config


def run_migrations(url: str, revision: str = "head") -> None:
    """``alembic upgrade <revision>``. Synchronous: from async code, run it in a thread.
    A database that is not UTF8 is refused first (``DatabaseEncodingError``)."""
    from alembic import command

    with psycopg.connect(libpq_url(url), connect_timeout=10) as connection:
        require_utf8(connection)
    command.upgrade(alembic_config(url), revision)


def migrate_to_latest(url: str) -> None:
    """What a serving process runs at start (``PAS_MIGRATE_ON_START``): nothing when the
    database is at ``LATEST_MIGRATION`` on plain PostgreSQL; else (behind, or a Citus
    coordinator, where every run also distributes the tables not distributed yet:
    ``storage/distribution.py``) ``run_migrations`` in a process of its own (spawned, so it
    shares nothing with this one, gRPC included), which the serving process waits for, its
    exception raised here. Either way this process never holds Alembic. A database that is
    not UTF8 is refused first (``DatabaseEncodingError``). Synchronous."""
    if _at_latest_without_citus(url):
        return
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as migrating:
        migrating.submit(run_migrations, url).result()


def _at_latest_without_citus(url: str) -> bool:
    """Whether a UTF8 database is at ``LATEST_MIGRATION`` and has no ``citus`` extension."""
    with psycopg.connect(libpq_url(url), connect_timeout=10) as connection:
        require_utf8(connection)
        try:
            found = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        except psycopg.errors.UndefinedTable:
            return False
        citus = connection.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'")
        return found is not None and found[0] == LATEST_MIGRATION and citus.fetchone() is None
