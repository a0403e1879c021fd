"""The per-route token counters (admission_service/tokenizers.py): real tokenizers that count
with no network, and the heuristic when a tokenizer package is missing."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest
from admission_service import tokenizers
from admission_service.domain.accounting import HEURISTIC_COUNTER

# Loads every family's tokenizer in a fresh interpreter where any socket use fails and the
# Hugging Face hub is told to stay offline, then counts a sample with each.
_OFFLINE = textwrap.dedent(
    """
    import os, socket
    os.environ["HF_HUB_OFFLINE"] = "1"

    def no_network(*args, **kwargs):
        raise OSError("network access attempted")

    socket.socket.connect = no_network
    socket.socket.connect_ex = no_network
    socket.create_connection = no_network
    socket.getaddrinfo = no_network

    from admission_service.tokenizers import counter_for

    for provider in ("deepseek", "anthropic", "openai"):
        counter = counter_for(provider)
        print(provider, counter.name, counter.count("提示词准入服务 admits prompts."))
    """
)


def test_every_tokenizer_loads_and_counts_offline() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", _OFFLINE],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "unavailable" not in done.stderr, done.stderr
    counted = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
    assert {provider: name for provider, (name, _) in counted.items()} == {
        "deepseek": "deepseek-v4",
        "anthropic": "claude",
        "openai": "o200k_base",
    }
    assert all(int(count) > 0 for _, count in counted.values())


def test_a_missing_tokenizer_package_falls_back_to_the_heuristic_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tokenizers, "_loaded", {})
    monkeypatch.setitem(sys.modules, "anthropic_tokenizer", None)  # as if not installed
    with caplog.at_level(logging.WARNING, logger=tokenizers.__name__):
        first = tokenizers.counter_for("anthropic")
        again = tokenizers.counter_for("anthropic")
    assert first is again is HEURISTIC_COUNTER
    assert first.name == "heuristic"
    warnings = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(warnings) == 1
    assert (
        "claude" in warnings[0].getMessage() and "ModuleNotFoundError" in warnings[0].getMessage()
    )


def test_an_unknown_provider_gets_the_heuristic() -> None:
    assert tokenizers.counter_for("mistral") is HEURISTIC_COUNTER
    assert tokenizers.counter_for("") is HEURISTIC_COUNTER


@pytest.mark.parametrize("provider", tokenizers.TOKENIZER_FAMILIES)
def test_counting_many_gives_each_texts_own_count(provider: str) -> None:
    counter = tokenizers.counter_for(provider)
    assert isinstance(counter, tokenizers.LoadedCounter)
    texts = ["", "hello world", "你好世界" * 50, "def f(x):\n    return x * 2\n" * 200]
    assert counter.count_many(texts) == [counter.count(text) for text in texts]


async def test_large_texts_are_counted_ahead_and_the_counter_stays_its_base() -> None:
    base = tokenizers.counter_for("deepseek")
    large = "the quick brown fox " * (tokenizers.OFF_LOOP_CHARS // 10)
    counter = await tokenizers.counter_off_the_loop("deepseek", ["small", large])
    assert isinstance(counter, tokenizers.Precounted)
    assert counter._counts == {large: base.count(large)}  # only the large text, counted ahead
    assert counter.count("small") == base.count("small")
    # Equal to and hashed as its base: prices remembered per counter are shared.
    assert counter == base and hash(counter) == hash(base) and counter.name == base.name
    assert await tokenizers.counter_off_the_loop("deepseek", ["small"]) is base


async def test_a_large_text_sent_again_is_not_counted_again() -> None:
    """A harness's large system prompt, sent with every Admit, is counted once per worker."""
    recent = tokenizers.LARGE_COUNTS
    prompt = "You are a careful agent. " * (tokenizers.OFF_LOOP_CHARS // 20)
    first = await tokenizers.counter_off_the_loop("deepseek", [prompt])
    hits = recent.hits
    again = await tokenizers.counter_off_the_loop("deepseek", [prompt])
    assert recent.hits == hits + 1
    expected = tokenizers.counter_for("deepseek").count(prompt)
    assert first.count(prompt) == again.count(prompt) == expected
    # Another tokenizer's count of the same text is its own.
    other = await tokenizers.counter_off_the_loop("openai", [prompt])
    assert other.count(prompt) == tokenizers.counter_for("openai").count(prompt)
