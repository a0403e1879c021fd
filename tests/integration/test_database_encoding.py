"""A database that is not UTF-8 is refused at start with an error naming its encoding (it
would hand text back as bytes: a TypeError deep in a call, before this check)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from admission_service.storage.engine import libpq_url
from sqlalchemy.engine import make_url

from tests.conftest import TestDatabases


@pytest.fixture
def sql_ascii_database(test_databases: TestDatabases) -> Iterator[str]:
    name = f"pas_test_ascii_{secrets.token_hex(4)}"
    admin = libpq_url(test_databases.server_url)
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' TEMPLATE template0")
    yield make_url(admin).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE {name} WITH (FORCE)")


def tables(url: str) -> list[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return [row[0] for row in rows]


@pytest.mark.parametrize("command", ["migrate", "serve"])
def test_a_sql_ascii_database_is_refused_at_start(command: str, sql_ascii_database: str) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PAS_")},
        "DATABASE_URL": sql_ascii_database,
        "PAS_LISTEN": "127.0.0.1:0",
    }
    cli = Path(sys.executable).parent / "admission-service"
    # A process with a time limit: a `serve` that did not refuse would serve on.
    done = subprocess.run(
        [str(cli), command], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "configuration error" in done.stderr and "encoded SQL_ASCII" in done.stderr
    assert "UTF8" in done.stderr and "Traceback" not in done.stderr
    assert tables(sql_ascii_database) == []  # nothing was created
