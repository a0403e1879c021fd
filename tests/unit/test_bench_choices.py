"""The benches' comma-separated choices (bench/infra.py ``chosen``: streamed_full's
``--formats``, large_content's ``--cases``), checked before any service starts: a name in any
case, an unknown or missing one refused with the valid choices."""

from __future__ import annotations

import pytest

from bench import large_content, streamed_full
from bench.infra import chosen
from tests.clients.large_sessions import WIRE_NAMES


def test_names_are_chosen_in_any_case() -> None:
    assert chosen("NEUTRAL, openai_Chat", WIRE_NAMES.values()) == (
        "neutral",
        "openai_chat",
    )


@pytest.mark.parametrize("names", ["neutral,bogus", " , "])
def test_an_unknown_or_missing_format_is_refused_with_the_choices(
    names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        streamed_full.main(["--formats", names])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--formats:" in error
    assert "choose among neutral, openai_chat, openai_responses, anthropic_messages" in error


def test_an_unknown_case_is_refused_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        large_content.main(["--cases", "admitted,stalled"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--cases: stalled; choose among refused, admitted, committed" in error
