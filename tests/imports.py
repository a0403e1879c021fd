"""What a source file imports, for the tests that keep a layer's dependencies in bounds."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_packages(path: Path) -> set[str]:
    """The top-level packages ``path`` imports (``''`` for a relative ``from . import``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
        )
    }
