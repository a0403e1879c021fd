"""Least privilege: the role the replicas connect as gets data privileges only.

The migrate job connects as the schema's owner and, after upgrading it, grants the configured
role (``PAS_DB_APP_ROLE``) what the service's queries need: reading and writing rows of the
service's tables, reading ``alembic_version``. No CREATE, ALTER, DROP or TRUNCATE: a replica
cannot change the schema, and a migration applied later is granted by the next ``migrate``.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from admission_service.storage.engine import libpq_url

# Alembic's own table: the service may read the schema's version, never write it.
VERSION_TABLE = "alembic_version"


class UnknownRole(LookupError):
    """The role to grant to does not exist (the migrate job grants, it does not create)."""


def grant_data_privileges(url: str, role: str) -> list[str]:
    """Grant ``role`` the data privileges on every table of the current schema; the tables."""
    with psycopg.connect(libpq_url(url), autocommit=False) as connection:
        exists = connection.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
        if exists.fetchone() is None:
            raise UnknownRole(
                f"PAS_DB_APP_ROLE: the role {role!r} does not exist; create it first "
                f"(CREATE ROLE … LOGIN PASSWORD …), then run migrate again"
            )
        schema_row = connection.execute("SELECT current_schema()").fetchone()
        assert schema_row is not None
        schema = schema_row[0]
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename",
                (schema,),
            )
        ]
        grantee = sql.Identifier(role)
        connection.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), grantee)
        )
        for table in tables:
            name = sql.Identifier(schema, table)
            privileges = "SELECT" if table == VERSION_TABLE else "SELECT, INSERT, UPDATE, DELETE"
            connection.execute(
                sql.SQL("GRANT {} ON TABLE {} TO {}").format(sql.SQL(privileges), name, grantee)
            )
        connection.execute(
            sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {} TO {}").format(
                sql.Identifier(schema), grantee
            )
        )
        connection.commit()
    return tables
