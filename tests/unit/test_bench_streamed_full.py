"""bench/streamed_full.py's choice of wire formats (``--formats``), checked before any service
starts: a name in any case, an unknown or missing one refused with the valid choices."""

from __future__ import annotations

import pytest

from bench.streamed_full import chosen_formats, main


def test_formats_are_named_in_any_case() -> None:
    assert chosen_formats("NEUTRAL, openai_Chat") == ("neutral", "openai_chat")


@pytest.mark.parametrize("names", ["neutral,bogus", " , "])
def test_an_unknown_or_missing_format_is_refused_with_the_choices(
    names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--formats", names])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--formats:" in error
    assert "choose among neutral, openai_chat, openai_responses, anthropic_messages" in error
