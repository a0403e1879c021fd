"""Load and validate the model catalog at start (SPEC §2 "Capability")."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

from admission_service.domain.catalog import Catalog, parse_catalog
from admission_service.domain.errors import InvalidModelInfo

BUILTIN_NAME = "models.yaml"


def builtin_catalog_text() -> str:
    return (
        resources.files("admission_service.catalog")
        .joinpath(BUILTIN_NAME)
        .read_text(encoding="utf-8")
    )


def load_catalog(path: Path | None = None) -> Catalog:
    """The catalog in ``path``, or the built-in one when None.

    Raises ``InvalidModelInfo`` when the file cannot be read, is not YAML, or declares a
    capability the service does not know; the service then refuses to start.
    """
    if path is None:
        text, source = builtin_catalog_text(), f"built-in {BUILTIN_NAME}"
    else:
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidModelInfo(source, f"cannot read the model catalog: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidModelInfo(source, f"the model catalog is not valid YAML: {exc}") from exc
    return parse_catalog(data)
