"""The model catalog as the service loads it (``catalog/``): the built-in file shipped as package
data, a deployment's replacement, and every way a catalog file is refused. The server's refusal
to start on one: ``tests/api/test_catalog.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
from admission_service.catalog.loader import load_catalog
from admission_service.domain.errors import InvalidModelInfo


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
