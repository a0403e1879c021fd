"""Tokenizers loaded before serving (``PAS_TOKENIZER_PRELOAD``, tokenizers.preload,
api/workers.py): which families and the setting. Workers forked from a parent that loaded them:
``tests/api/test_tokenizers_preload.py``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from admission_service import tokenizers
from admission_service.api.workers import preload_families
from admission_service.config import ConfigError, Settings
from admission_service.tokenizers import catalog_families, preload


@pytest.mark.parametrize(
    ("raw", "families"),
    [
        ("", None),
        ("none", ()),
        ("openai", ("openai",)),
        ("OpenAI, deepseek anthropic,openai", ("openai", "deepseek", "anthropic")),
    ],
)
def test_the_preload_setting(raw: str, families: tuple[str, ...] | None) -> None:
    assert Settings.from_env({"PAS_TOKENIZER_PRELOAD": raw}).tokenizer_preload == families


def test_an_unknown_family_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="PAS_TOKENIZER_PRELOAD"):
        Settings.from_env({"PAS_TOKENIZER_PRELOAD": "openai,mistral"})


def test_by_default_the_catalogs_families_are_preloaded(tmp_path: Path) -> None:
    assert preload_families(Settings()) == ("deepseek",)  # the built-in catalog
    catalog = tmp_path / "models.yaml"
    catalog.write_text(
        "models:\n"
        "  - {id: gpt-x, provider: openai}\n"
        "  - {id: any-provider}\n"
        "  - {id: mistral-x, provider: mistral}\n"
        "  - {id: claude-x, provider: anthropic}\n"
        "  - {id: gpt-y, provider: openai}\n"
    )
    assert preload_families(Settings(model_catalog=catalog)) == ("openai", "anthropic")
    assert preload_families(Settings(model_catalog=catalog, tokenizer_preload=())) == ()
    assert catalog_families(["deepseek", None, "other"]) == ("deepseek",)


def test_preload_loads_each_family_once_and_skips_the_heuristics(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    loads: list[str] = []

    def loader() -> tuple[Callable[[str], int], None]:
        loads.append("fake")
        return len, None  # a count function and no batch API

    monkeypatch.setattr(tokenizers, "_loaded", {})
    monkeypatch.setitem(tokenizers._FAMILIES, "fake", ("fake-bpe", loader))
    with caplog.at_level(logging.INFO, logger=tokenizers.__name__):
        assert preload(["fake", "mistral", "fake"]) == ["fake-bpe", "fake-bpe"]
    assert loads == ["fake"]
    assert tokenizers.counter_for("fake").count("four") == 4
    assert "tokenizer fake-bpe for fake loaded" in caplog.text


async def test_a_family_loaded_on_its_first_request_asks_to_be_preloaded(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Its load holds the GIL, so the worker's other calls wait whether or not it runs in a
    thread: the operator is told which family to preload, once."""

    def loader() -> tuple[Callable[[str], int], None]:
        return len, None

    monkeypatch.setattr(tokenizers, "_loaded", {})
    monkeypatch.setitem(tokenizers._FAMILIES, "fake", ("fake-bpe", loader))
    with caplog.at_level(logging.WARNING, logger=tokenizers.__name__):
        await tokenizers.load_off_the_loop("fake")
        await tokenizers.load_off_the_loop("fake")
        await tokenizers.load_off_the_loop("mistral")  # the heuristic: nothing to load
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "fake-bpe for fake was not preloaded" in warnings[0]
    assert "add fake to PAS_TOKENIZER_PRELOAD" in warnings[0]
