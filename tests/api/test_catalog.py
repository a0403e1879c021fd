"""A server refuses to start on an invalid model catalog (the catalog files on their own:
``tests/unit/test_catalog_files.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from admission_service.api.server import load_configured_catalog
from admission_service.config import ConfigError, Settings

from tests.api.support import StartApi


def test_the_server_refuses_to_start_with_an_invalid_catalog(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - id: m\n    system_prompt_update: sometimes\n")
    with pytest.raises(ConfigError) as caught:
        load_configured_catalog(Settings(model_catalog=path))
    message = str(caught.value)
    assert str(path) in message
    assert "models[0].system_prompt_update" in message


async def test_start_server_checks_the_catalog_first(start_api: StartApi, tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - id: m\n    system_prompt_update: replace\n")
    with pytest.raises(ConfigError, match="invalid model catalog"):
        await start_api(model_catalog=path)
