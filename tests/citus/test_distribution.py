"""The migrations shard the schema by session on a Citus coordinator (``storage/distribution.py``).

* every session-scoped table of ``tables.py`` ends up hash-distributed on ``session_id`` in one
  co-location group, with shards on both workers, and nothing else in the schema stays a plain
  coordinator table (fails when a new migration's table is left undistributed);
* a later migration runs on an already distributed schema, data included (``ALTER TABLE`` and a
  correlated backfill ``UPDATE``), and a table it adds is distributed by the same run;
* a new session-scoped table is picked up from the metadata, nothing listed by hand.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from admission_service.domain import messages
from admission_service.storage import distribution
from admission_service.storage.engine import (
    alembic_config,
    libpq_url,
    migrate_to_latest,
    run_migrations,
)
from admission_service.storage.tables import Base
from alembic import command
from sqlalchemy import (
    Column,
    ForeignKeyConstraint,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    pool,
    text,
)
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.schema import CreateTable

from tests import stored_0004
from tests.citus.cluster import CitusCluster
from tests.conftest import TestDatabases

SESSION_SCOPED = {t.name for t in Base.metadata.sorted_tables if distribution.session_scoped(t)}
# The session-scoped tables later revisions created (0009: the chunked frames).
CREATED_AFTER_0001 = {"frame_chunks", "admission_inputs"}


def citus_tables(url: str) -> dict[str, tuple[str, str, int]]:
    """Citus's tables: name -> (type, distribution column, co-location id)."""
    with psycopg.connect(libpq_url(url)) as connection:
        rows = connection.execute(
            "SELECT table_name::text, citus_table_type, distribution_column, colocation_id"
            " FROM citus_tables"
        ).fetchall()
    return {name: (kind, column, colocation) for name, kind, column, colocation in rows}


def plain_tables(url: str) -> set[str]:
    """Tables of the schema that Citus does not manage (they live on the coordinator only)."""
    with psycopg.connect(libpq_url(url)) as connection:
        rows = connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            " AND NOT EXISTS (SELECT 1 FROM pg_dist_partition"
            " WHERE logicalrelid = format('%I', tablename)::regclass)"
        ).fetchall()
    return {name for (name,) in rows}


@pytest.fixture
def empty_citus_database(cluster: CitusCluster, test_databases: TestDatabases) -> Iterator[str]:
    url = test_databases.create(migrate=False)
    yield url
    test_databases.drop(url)


def test_every_session_scoped_table_is_distributed_by_session_and_colocated(
    cluster: CitusCluster, database_url: str
) -> None:
    tables = citus_tables(database_url)
    assert SESSION_SCOPED, "the schema has no session-scoped table?"
    for name in SESSION_SCOPED:
        assert name in tables, f"{name} was left a local table on the coordinator"
        kind, column, _ = tables[name]
        assert (kind, column) == ("distributed", "session_id"), f"{name}: {tables[name]}"
    assert len({tables[name][2] for name in SESSION_SCOPED}) == 1, "not one co-location group"
    # Only Alembic's own bookkeeping stays on the coordinator.
    assert plain_tables(database_url) == {"alembic_version"}


def test_shards_are_spread_over_both_workers(cluster: CitusCluster, database_url: str) -> None:
    database = database_url.rsplit("/", 1)[1]
    with cluster.connect(database) as connection:
        rows = connection.execute(
            "SELECT nodeport, count(*) FROM citus_shards WHERE table_name = 'sessions'::regclass"
            " GROUP BY nodeport"
        ).fetchall()
    shards = dict(rows)
    assert set(shards) == {worker.port for worker in cluster.workers}, shards
    assert min(shards.values()) >= max(shards.values()) // 2, f"unbalanced: {shards}"


def test_a_later_migration_runs_on_the_distributed_schema_with_data(
    empty_citus_database: str,
) -> None:
    """0001 distributes; rows go into the shards; 0002 then alters the distributed tables and
    backfills them (a per-row UPDATE and a correlated UPDATE joining two co-located tables);
    0011 copies the admissions' inputs into a new table, distributed with its rows."""
    run_migrations(empty_citus_database, "0001")
    assert set(citus_tables(empty_citus_database)) == SESSION_SCOPED - CREATED_AFTER_0001
    message = stored_0004.encode_message(
        messages.Message(messages.Role.USER, (messages.Text("hi"),))
    )
    with psycopg.connect(libpq_url(empty_citus_database)) as connection:
        connection.execute("INSERT INTO sessions (tenant_id, session_id) VALUES ('t', 's')")
        connection.execute(
            "INSERT INTO events (tenant_id, session_id, seq, kind, turn, step, surface_op,"
            " payload) VALUES ('t', 's', 0, 'user/message', 0, 0, 'append', '\\x7b7d')"
        )
        connection.execute(
            "INSERT INTO surface_nodes (tenant_id, session_id, seq, position, is_system, message,"
            " tokens, turn, step) VALUES ('t', 's', 0, 0, false, %s, 7, 0, 0)",
            (message,),
        )
        for admission_id in ("a1", "a2"):  # the same prompt and tools twice
            connection.execute(
                "INSERT INTO admissions (tenant_id, session_id, admission_id, turn, step,"
                " rendered_prompt, tools) VALUES ('t', 's', %s, 0, 0, 'be brief', '[]')",
                (admission_id,),
            )
    run_migrations(empty_citus_database)
    with psycopg.connect(libpq_url(empty_citus_database)) as connection:
        row = connection.execute(
            "SELECT s.surface_tokens, n.message_pb IS NOT NULL FROM sessions s"
            " JOIN surface_nodes n USING (tenant_id, session_id)"
            " WHERE s.tenant_id = 't' AND s.session_id = 's'"
        ).fetchone()
    assert row == (7, True)
    with psycopg.connect(libpq_url(empty_citus_database)) as connection:
        inputs = connection.execute(
            "SELECT a.admission_id, p.body, t.body FROM admissions a"
            " JOIN admission_inputs p ON p.tenant_id = a.tenant_id"
            " AND p.session_id = a.session_id AND p.digest = a.prompt_digest"
            " JOIN admission_inputs t ON t.tenant_id = a.tenant_id"
            " AND t.session_id = a.session_id AND t.digest = a.tools_digest"
            " WHERE a.tenant_id = 't' AND a.session_id = 's' ORDER BY 1"
        ).fetchall()
        (bodies,) = connection.execute("SELECT count(*) FROM admission_inputs").fetchone() or (0,)
    assert inputs == [("a1", b"be brief", b"[]"), ("a2", b"be brief", b"[]")]
    assert bodies == 2
    assert plain_tables(empty_citus_database) == {"alembic_version"}
    # A table a later revision created is distributed by the run that creates it.
    assert set(citus_tables(empty_citus_database)) >= SESSION_SCOPED


def test_a_new_session_scoped_table_is_distributed_from_the_metadata(
    empty_citus_database: str,
) -> None:
    """What a later migration adding a table gets: created (with its foreign key to the
    distributed ``sessions``) and distributed in one transaction, found through the metadata.
    Rows it already holds are moved into the shards (the coordinator keeps no copy)."""
    run_migrations(empty_citus_database)
    metadata = MetaData()
    for table in Base.metadata.sorted_tables:
        table.to_metadata(metadata)
    quotas = Table(
        "session_quotas",
        metadata,
        Column("tenant_id", Text, nullable=False),
        Column("session_id", Text, nullable=False),
        Column("bytes_used", Text),
        PrimaryKeyConstraint("tenant_id", "session_id"),
        ForeignKeyConstraint(
            ["tenant_id", "session_id"],
            ["sessions.tenant_id", "sessions.session_id"],
            ondelete="CASCADE",
        ),
    )
    engine = create_sync_engine(empty_citus_database, poolclass=pool.NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(CreateTable(quotas))
            connection.execute(
                text("INSERT INTO sessions (tenant_id, session_id) VALUES ('t', 's')")
            )
            connection.execute(text("INSERT INTO session_quotas VALUES ('t', 's', 'x')"))
            assert distribution.distribute(connection, metadata) == ["session_quotas"]
            assert distribution.missing(connection, metadata) == []
    finally:
        engine.dispose()
    tables = citus_tables(empty_citus_database)
    assert tables["session_quotas"][:2] == ("distributed", "session_id")
    assert tables["session_quotas"][2] == tables["sessions"][2]
    with psycopg.connect(libpq_url(empty_citus_database)) as connection:
        row = connection.execute(
            "SELECT (SELECT count(*) FROM session_quotas),"
            " pg_relation_size('session_quotas')"  # the coordinator's own (shell) table
        ).fetchone()
    assert row == (1, 0)


def test_0011_downgrades_on_the_distributed_schema_with_data(empty_citus_database: str) -> None:
    """0011's downgrade on Citus: each admission's inputs back in its row (an UPDATE joining
    two co-located distributed tables), ``admission_inputs`` dropped; upgrading again stores
    them once more."""
    url = empty_citus_database
    run_migrations(url)
    with psycopg.connect(libpq_url(url)) as connection:
        connection.execute("INSERT INTO sessions (tenant_id, session_id) VALUES ('t', 's')")
        connection.execute(
            "INSERT INTO admission_inputs (tenant_id, session_id, digest, body) VALUES"
            " ('t', 's', sha256('be brief'), 'be brief'), ('t', 's', sha256('[]'), '[]')"
        )
        for admission_id in ("a1", "a2"):
            connection.execute(
                "INSERT INTO admissions (tenant_id, session_id, admission_id, turn, step,"
                " prompt_digest, tools_digest)"
                " VALUES ('t', 's', %s, 0, 0, sha256('be brief'), sha256('[]'))",
                (admission_id,),
            )
    command.downgrade(alembic_config(url), "0010")
    with psycopg.connect(libpq_url(url)) as connection:
        restored = connection.execute(
            "SELECT admission_id, rendered_prompt, tools FROM admissions ORDER BY 1"
        ).fetchall()
    assert restored == [("a1", b"be brief", b"[]"), ("a2", b"be brief", b"[]")]
    assert "admission_inputs" not in citus_tables(url)
    run_migrations(url)
    assert citus_tables(url)["admission_inputs"][0] == "distributed"
    with psycopg.connect(libpq_url(url)) as connection:
        (bodies,) = connection.execute("SELECT count(*) FROM admission_inputs").fetchone() or (0,)
    assert bodies == 2


def test_a_serving_start_distributes_a_current_schema_moved_onto_citus(
    empty_citus_database: str,
) -> None:
    """A database already at the latest migration when it gains Citus (a single-node
    deployment moving on) is distributed by the next start with ``PAS_MIGRATE_ON_START``,
    as by ``admission-service migrate``: on a coordinator a start always runs the migrations,
    whose every run distributes what is not distributed yet."""
    url = empty_citus_database
    run_migrations(url)
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute(
            "SELECT undistribute_table('sessions', cascade_via_foreign_keys => true)"
        )
    assert "sessions" not in citus_tables(url)
    migrate_to_latest(url)
    assert citus_tables(url)["sessions"][0] == "distributed"
    assert citus_tables(url)["frame_chunks"][0] == "distributed"
