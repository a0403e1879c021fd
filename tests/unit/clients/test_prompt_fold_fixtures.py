"""The Python client's windowed prompt fold on the shared fixtures (``tests/fixtures/prompt_fold``);
against real sessions: ``tests/api/test_client_prompt_fold.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import json_format
from promptadmission.prompt_fold import (
    PromptFoldState,
    inspect_system_prompt,
)
from promptadmission.v1 import session_pb2 as pb

from tests.prompt_fold_fixtures import FIXTURE, state_json

CASES: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_client_fold_matches_the_shared_fixtures(case: dict[str, Any]) -> None:
    state: PromptFoldState | None = None
    history: list[PromptFoldState | None] = []
    for event_json, expected in zip(case["events"], case["states"], strict=True):
        event = json_format.ParseDict(event_json, pb.Event())
        state = inspect_system_prompt(state, event)
        history.append(state)
        assert state_json(state) == expected
    # Earlier states are untouched by later events.
    assert [state_json(s) for s in history] == case["states"]
