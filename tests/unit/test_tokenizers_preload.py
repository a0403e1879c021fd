"""Tokenizers loaded before serving (``PAS_TOKENIZER_PRELOAD``, tokenizers.preload,
api/workers.py): which families, the setting, and workers forked from a parent that loaded them
(sharing its pages) instead of each loading its own."""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path

import grpc
import pytest
from admission_service import tokenizers
from admission_service.api.workers import preload_families
from admission_service.config import ConfigError, Settings
from admission_service.tokenizers import LoadedCounter, catalog_families, preload
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.serve_process import serving


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

    def loader() -> LoadedCounter:
        loads.append("fake")
        return len  # type: ignore[return-value]

    monkeypatch.setattr(tokenizers, "_loaded", {})
    monkeypatch.setitem(tokenizers._FAMILIES, "fake", ("fake-bpe", loader))
    with caplog.at_level(logging.INFO, logger=tokenizers.__name__):
        assert preload(["fake", "mistral", "fake"]) == ["fake-bpe", "fake-bpe"]
    assert loads == ["fake"]
    assert tokenizers.counter_for("fake").count("four") == 4
    assert "tokenizer fake-bpe for fake loaded" in caplog.text


LOADED = re.compile(r"tokenizer (\S+) for (\S+) loaded")


@pytest.mark.slow
def test_forked_workers_use_the_tokenizer_the_parent_loaded(
    database_url: str, tmp_path: Path
) -> None:
    """``serve`` with two workers loads the catalog's tokenizer once, in the parent, and both
    workers price with it without loading it again."""
    names = set()
    with serving(
        database_url,
        tmp_path,
        PAS_WORKERS="2",
        PAS_LOG_FORMAT="text",
        PAS_MIGRATE_ON_START="false",
        PAS_TOKENIZER_PRELOAD=None,
    ) as served:
        for _ in range(6):  # own connections: the kernel spreads them over both workers
            options = [("grpc.use_local_subchannel_pool", 1)]
            with grpc.insecure_channel(served.target, options=options) as channel:
                stub = api_grpc.AdmissionServiceStub(channel)
                session_id = f"preload-{uuid.uuid4().hex}"
                stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
                route = pb.Route(provider="deepseek", model="deepseek-flash", context_window=64_000)
                admit = api.AdmitRequest(
                    session_id=session_id, turn=1, rendered_prompt="You are terse.", route=route
                )
                stub.Admit(admit, timeout=30)
                inspected = stub.Inspect(api.InspectRequest(session_id=session_id))
                names.add(inspected.breakdown.tokenizer)
        served.process.terminate()
        served.process.wait(timeout=30)
    text = served.log.read_text()
    assert names == {"deepseek-v4"}
    assert LOADED.findall(text) == [("deepseek-v4", "deepseek")], text  # once: the parent
    assert "Traceback" not in text
