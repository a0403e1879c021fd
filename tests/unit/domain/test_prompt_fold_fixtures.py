"""The shared prompt-fold fixtures are what the service's fold produces (so the two clients'
tests, which read them, check the clients against the service)."""

from __future__ import annotations

from tests.prompt_fold_fixtures import FIXTURE, render


def test_the_committed_fixtures_are_the_service_folds_states() -> None:
    assert FIXTURE.read_text(encoding="utf-8") == render(), (
        "stale: regenerate with `.venv/bin/python -m tests.prompt_fold_fixtures`"
    )
