"""The gRPC edge maps storage's classification of a database failure (``storage/failures.py``),
never the database's own codes: the error mapping imports neither the driver nor SQLAlchemy."""

from __future__ import annotations

from pathlib import Path

from admission_service.api import error_status

from tests.imports import imported_packages

DATABASE_PACKAGES = {"psycopg", "sqlalchemy", "asyncpg"}


def test_the_error_mapping_knows_no_database_driver() -> None:
    imported = imported_packages(Path(error_status.__file__))
    assert not imported & DATABASE_PACKAGES, imported & DATABASE_PACKAGES
