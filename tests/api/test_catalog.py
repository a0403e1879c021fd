"""The model catalog: the built-in file, a deployment's replacement, and refusing bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from admission_service.api.server import load_configured_catalog
from admission_service.catalog.loader import load_catalog
from admission_service.config import ConfigError, Settings
from admission_service.domain.errors import InvalidModelInfo

from tests.api.support import StartApi


def test_the_built_in_catalog_declares_exactly_deepseek_flash() -> None:
    catalog = load_catalog()
    assert list(catalog.models) == ["deepseek-flash"]
    info = catalog.models["deepseek-flash"]
    assert info.provider == "deepseek"
    assert info.system_prompt_in_history
    assert not info.tool_update
    assert info.inputs == ("text", "image")


def test_the_built_in_catalog_ships_as_package_data() -> None:
    import admission_service.catalog

    assert (Path(admission_service.catalog.__file__).parent / "models.yaml").is_file()


def test_a_deployment_catalog_replaces_the_built_in(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n"
        "  - id: house-model\n"
        "    system_prompt_update: in-history\n"
        "    tool_update: in-history\n"
    )
    catalog = load_catalog(path)
    assert list(catalog.models) == ["house-model"]
    assert catalog.models["house-model"].tool_update


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (
            "models:\n  - id: m\n    system_prompt_update: sometimes\n",
            "models[0].system_prompt_update",
        ),
        ("models:\n  - id: m\n    tool_update: yes\n", "models[0].tool_update"),
        ("models:\n  - id: m\n    input: [audio]\n", "models[0].input"),
        ("models: {}\n", "models"),
    ],
)
def test_an_invalid_catalog_is_refused(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(text)
    with pytest.raises(InvalidModelInfo) as caught:
        load_catalog(path)
    assert caught.value.field == field
    assert caught.value.reason == "INVALID_MODEL_INFO"


def test_unreadable_and_malformed_catalogs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidModelInfo, match="cannot read"):
        load_catalog(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("models: [\n")
    with pytest.raises(InvalidModelInfo, match="not valid YAML"):
        load_catalog(broken)


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
