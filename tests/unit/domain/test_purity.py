"""The domain imports nothing outside the standard library and itself (issue 2), but for the
pure libraries named here, each with why it is pure."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import admission_service.domain as domain

DOMAIN = Path(domain.__file__).parent

# Libraries that compute and do nothing else: no I/O, no clock, no randomness, no state.
PURE_LIBRARIES = {
    # domain/json_text.py: a body's JSON text (a serializer of the values it is given).
    "orjson",
}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_domain_imports_only_the_standard_library() -> None:
    for path in sorted(DOMAIN.glob("*.py")):
        foreign = imported_roots(path) - set(sys.stdlib_module_names) - {"__future__"}
        foreign -= PURE_LIBRARIES
        foreign -= {"admission_service"}  # only ever admission_service.domain: checked below
        assert "from admission_service." not in path.read_text().replace(
            "from admission_service.domain", ""
        ), path.name
        assert not foreign, f"{path.name} imports {sorted(foreign)}"
