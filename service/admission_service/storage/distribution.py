"""The schema on a distributed PostgreSQL (Citus): every session-scoped table sharded by session.

Run by the migrations (``migrations/env.py``) after ``alembic upgrade``, in the same
transaction, and a no-op unless the database has the ``citus`` extension (so on a plain
PostgreSQL nothing changes). On a Citus coordinator it makes every session-scoped table of
``tables.py`` a hash-distributed table on ``session_id``, co-located with ``sessions``, so all
rows of one session live in one shard group on one worker and every transaction the service
runs (one session) is routed to that worker whole. It looks only at tables not distributed
yet, so a later migration's new table is distributed by the same run that creates it, and
running it again changes nothing.

A table is *session-scoped* when it has a ``session_id`` column (the schema tests check that
its keys then lead with ``(tenant_id, session_id)``). A table without one must be declared
here as a reference table (replicated to every node; only for small, truly global data) or
distribution refuses the schema, naming the table: sharding it some other way is a decision,
not a default.

Its statements are written as every hand-written statement here is (psycopg's ``%(name)s``),
run with ``exec_driver_sql`` on the migrations' synchronous connection.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, MetaData, Table

from admission_service.storage.tables import Base

DISTRIBUTION_COLUMN = "session_id"
# The table every other session-scoped table is co-located with (same shard for one session).
ANCHOR_TABLE = "sessions"
# Global tables, replicated to every node: small, read at start, written by hand.
REFERENCE_TABLES: frozenset[str] = frozenset({"page_token_keys"})


class UndecidedTable(RuntimeError):
    """A table that is neither session-scoped nor declared a reference table."""


@dataclass(frozen=True, slots=True)
class Placement:
    """How one table is laid out on the cluster."""

    table: str
    kind: str  # "distributed" (by session, co-located with the anchor) or "reference"


def session_scoped(table: Table) -> bool:
    return DISTRIBUTION_COLUMN in table.c


def plan(metadata: MetaData = Base.metadata) -> list[Placement]:
    """Every table's placement, the anchor first and each table after those it references
    (a foreign key between distributed tables needs the referenced one distributed first)."""
    placements = []
    for table in metadata.sorted_tables:
        if session_scoped(table):
            placements.append(Placement(table.name, "distributed"))
        elif table.name in REFERENCE_TABLES:
            placements.append(Placement(table.name, "reference"))
        else:
            raise UndecidedTable(
                f"table {table.name!r} has no {DISTRIBUTION_COLUMN} column and is not a "
                "reference table: lead its key with (tenant_id, session_id), or add it to "
                "distribution.REFERENCE_TABLES if it is small and global"
            )
    placements.sort(key=lambda p: p.table != ANCHOR_TABLE)  # stable: keeps dependency order
    return placements


def citus_present(connection: Connection) -> bool:
    """Whether this database has the Citus extension (then it is the cluster's coordinator:
    the migrations run there and nowhere else)."""
    found = connection.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'citus'")
    return found.first() is not None


def distributed_tables(connection: Connection) -> dict[str, str]:
    """Citus's view of the tables it manages: name -> ``distributed`` or ``reference``."""
    result = connection.exec_driver_sql(
        "SELECT logicalrelid::regclass::text,"
        " CASE WHEN partmethod = 'n' THEN 'reference' ELSE 'distributed' END"
        " FROM pg_dist_partition"
    )
    return {name: kind for name, kind in result.tuples()}


def missing(connection: Connection, metadata: MetaData = Base.metadata) -> list[Placement]:
    """The placements ``plan`` asks for that the cluster does not have yet, among the tables
    that exist (a run to an older revision has not created the newer ones)."""
    present = distributed_tables(connection)
    existing = {
        name
        for (name,) in connection.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        )
    }
    return [p for p in plan(metadata) if p.table in existing and present.get(p.table) != p.kind]


def distribute(connection: Connection, metadata: MetaData = Base.metadata) -> list[str]:
    """Distribute what is missing (inside the caller's transaction); the tables it changed.

    Rows already in a table (a single-node deployment moving onto Citus) are copied into the
    shards by ``create_distributed_table``; the copies left in the coordinator's own table are
    then truncated, referencing tables first."""
    if not citus_present(connection):
        return []
    done = []
    for placement in missing(connection, metadata):
        if placement.kind == "reference":
            connection.exec_driver_sql(
                "SELECT create_reference_table(%(t)s)", {"t": placement.table}
            )
        else:
            connection.exec_driver_sql(
                "SELECT create_distributed_table(%(t)s, %(column)s, colocate_with => %(anchor)s)",
                {
                    "t": placement.table,
                    "column": DISTRIBUTION_COLUMN,
                    "anchor": "none" if placement.table == ANCHOR_TABLE else ANCHOR_TABLE,
                },
            )
        done.append(placement.table)
    for name in reversed(done):
        connection.exec_driver_sql(
            "SELECT truncate_local_data_after_distributing_table(%(t)s)", {"t": name}
        )
    return done
