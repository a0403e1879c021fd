"""Alembic environment: the URL comes from ``-x url=...``, the config built in code by
``admission_service.storage.engine.alembic_config``, or ``DATABASE_URL``, in that order."""

from __future__ import annotations

import os
from logging.config import fileConfig

from admission_service.storage import distribution
from admission_service.storage.engine import normalise_database_url
from admission_service.storage.tables import Base
from alembic import context
from sqlalchemy import create_engine, pool, text

# Serialises replicas that migrate at start. Transaction-scoped, so it is safe behind a
# transaction-mode pooler (the request path itself takes no advisory locks).
MIGRATION_LOCK_ID = 0x5041_5300  # "PAS\0"

config = context.config
if config.config_file_name is not None:  # the CLI; in-process runs keep their logging
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = Base.metadata


def database_url() -> str:
    url = (
        context.get_x_argument(as_dictionary=True).get("url")
        or config.attributes.get("database_url")
        or os.environ.get("DATABASE_URL")
    )
    if not url:
        raise RuntimeError("no database URL: pass -x url=postgresql://... or set DATABASE_URL")
    return normalise_database_url(url)


def run_migrations_offline() -> None:
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(
        database_url(), poolclass=pool.NullPool, connect_args={"prepare_threshold": None}
    )
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                compare_server_default=True,
            )
            with context.begin_transaction():
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID}
                )
                context.run_migrations()
                # On a Citus coordinator: shard the tables this run created by session.
                distribution.distribute(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
