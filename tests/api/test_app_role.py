"""Least privilege: ``migrate`` with ``PAS_DB_APP_ROLE`` grants that role data privileges only,
and a server connected as that role serves every call (the replicas of docker-compose.yml)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest
from admission_service.cli import main
from admission_service.storage.engine import libpq_url
from promptadmission.v1 import admission_service_pb2 as api
from sqlalchemy.engine import make_url

from tests.api.support import admit_request, create_session, start_client
from tests.conftest import TestDatabases

# The role's password: the embedded server authenticates by password (scram), not trust.
ROLE_PASSWORD = secrets.token_hex(16)


@pytest.fixture
def app_role(test_databases: TestDatabases) -> Iterator[str]:
    """A new login role (roles belong to the whole server: dropped after the test)."""
    role = f"pas_app_{secrets.token_hex(4)}"
    admin = libpq_url(test_databases.server_url)
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{ROLE_PASSWORD}'")
    yield role
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"DROP ROLE {role}")


@pytest.fixture
def owned_database(test_databases: TestDatabases, app_role: str) -> Iterator[str]:
    """An empty database, dropped before its grants' role is (so nothing of the role remains)."""
    url = test_databases.create(migrate=False)
    yield url
    test_databases.drop(url)


def as_role(url: str, role: str) -> str:
    replica = make_url(url).set(username=role, password=ROLE_PASSWORD)
    return replica.render_as_string(hide_password=False)


async def test_a_server_connected_as_the_granted_role_serves_but_cannot_change_the_schema(
    owned_database: str, app_role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", owned_database)
    monkeypatch.setenv("PAS_DB_APP_ROLE", app_role)
    assert main(["migrate"]) == 0

    replica_url = as_role(owned_database, app_role)
    client = await start_client(replica_url)
    try:
        session_id = await create_session(client.stub)
        admitted = await client.stub.Admit(admit_request(session_id, "Be brief.", "hello"))
        listed = await client.stub.ListSessions(api.ListSessionsRequest())
        assert session_id in {s.session_id for s in listed.sessions}
        await client.stub.DeleteSession(api.DeleteSessionRequest(session_id=session_id))
        assert admitted.admission_id
    finally:
        await client.close()

    denied = [
        "CREATE TABLE intruder (id int)",
        "DROP TABLE sessions",
        "ALTER TABLE sessions ADD COLUMN intruder int",
        "TRUNCATE sessions",
        "UPDATE alembic_version SET version_num = version_num",
    ]
    with psycopg.connect(libpq_url(replica_url), autocommit=True) as connection:
        for statement in denied:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connection.execute(statement)
        assert connection.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)


def test_migrate_names_a_missing_role(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", empty_database_url)
    monkeypatch.setenv("PAS_DB_APP_ROLE", "no_such_role_here")
    assert main(["migrate"]) == 2
    assert "'no_such_role_here' does not exist" in capsys.readouterr().err
