"""The gRPC edge maps storage's classification of a database failure (``storage/failures.py``),
never the database's own codes: the error mapping imports neither the driver nor SQLAlchemy."""

from __future__ import annotations

import ast
from pathlib import Path

from admission_service.api import errors

DATABASE_PACKAGES = {"psycopg", "sqlalchemy", "asyncpg"}


def test_the_error_mapping_knows_no_database_driver() -> None:
    tree = ast.parse(Path(errors.__file__).read_text(encoding="utf-8"))
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
        )
    }
    assert not imported & DATABASE_PACKAGES, imported & DATABASE_PACKAGES
