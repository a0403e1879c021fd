"""The kit's converters on the shared fixtures (tests/fixtures/harness): each provider response,
built by the official SDK (its response types; streams through its own accumulator), with the
fixture's tool results made from harness values, must give the fixture's StepOutput bytes — the
same bytes the TypeScript kit must give (clients/typescript/test/kitOutputs.test.ts)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format
from promptadmission.kit import ToolImage, model_output, tool_result
from promptadmission.v1 import admission_service_pb2 as api

from tests import harness_fixtures
from tests.clients.harness_sdk import sdk_response
from tests.provider.recording import ProviderServer, provider_server

CASES = harness_fixtures.load()


@pytest.fixture(scope="module")
def server() -> Iterator[ProviderServer]:
    with provider_server() as running:
        yield running


def harness_value(entry: dict[str, Any]) -> Any:
    """The value a harness's tool returned, as the fixture describes it."""
    if "text" in entry:
        return entry["text"]
    if "json" in entry:
        return entry["json"]
    if "image" in entry:
        return ToolImage(entry["image"]["uri"], entry["image"]["media_type"])
    if "parts" in entry:
        return [
            part["text"]
            if "text" in part
            else ToolImage(part["image"]["uri"], part["image"]["media_type"])
            for part in entry["parts"]
        ]
    error = entry["error"]
    return type(error["name"], (Exception,), {})(error["message"])


def step_output(case: dict[str, Any], response: Any) -> api.StepOutput:
    output = model_output(response)
    results = [
        tool_result(entry["call_id"], harness_value(entry), is_error=entry.get("is_error", False))
        for entry in case["tool_results"]
    ]
    return api.StepOutput(
        admission_id=harness_fixtures.ADMISSION_ID,
        assistant=output.assistant,
        tool_results=results,
        usage=output.usage,
    )


def test_the_fixture_files_are_the_generators() -> None:
    assert harness_fixtures.on_disk() == harness_fixtures.rendered(), (
        "run: .venv/bin/python -m tests.harness_fixtures"
    )


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_each_response_gives_the_fixtures_step_output_bytes(
    case: dict[str, Any], server: ProviderServer
) -> None:
    got = step_output(case, sdk_response(case, server))
    expected = json_format.ParseDict(case["step_output"], api.StepOutput())
    assert json_format.MessageToDict(got) == json_format.MessageToDict(expected)
    assert got.SerializeToString() == base64.b64decode(case["step_output_base64"])


def test_every_fixture_kind_is_covered() -> None:
    kinds = {(case["wire_format"], case["provider"], "stream" in case) for case in CASES}
    assert kinds >= {
        ("openai_chat", "openai", False),
        ("openai_chat", "openai", True),
        ("openai_chat", "deepseek", False),
        ("openai_chat", "deepseek", True),
        ("openai_responses", "openai", False),
        ("openai_responses", "openai", True),
        ("anthropic_messages", "anthropic", False),
        ("anthropic_messages", "anthropic", True),
    }
    values = {key for case in CASES for entry in case["tool_results"] for key in entry}
    assert values >= {"text", "json", "image", "parts", "error", "is_error"}
