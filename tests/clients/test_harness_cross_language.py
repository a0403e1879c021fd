"""Both kits give the same bytes for the same random provider responses: hypothesis draws the
property tests' responses (valid for the official SDKs' types), the Python kit converts the
SDK's object, the TypeScript kit (through ``dist/test/kitDriver.js``) the same JSON as a
harness's SDK would hand it over, and the two StepOutputs must be byte-identical."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic.types import Message
from hypothesis import example, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from promptadmission.kit import model_output
from promptadmission.v1 import admission_service_pb2 as api

from tests.clients.conftest import TYPESCRIPT
from tests.clients.test_harness_properties import chat_completions, messages, responses

SDK_TYPES: dict[str, Any] = {
    "chat.completion": ChatCompletion,
    "response": Response,
    "message": Message,
}


class KitDriver:
    def __init__(self, node: str) -> None:
        self.process = subprocess.Popen(
            [node, str(TYPESCRIPT / "dist/test/kitDriver.js")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def convert(self, response: dict[str, Any]) -> bytes:
        assert self.process.stdin is not None and self.process.stdout is not None
        line = json.dumps({"response": response, "provider": "anthropic"}, ensure_ascii=False)
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        assert answer["ok"], answer
        return base64.b64decode(answer["output"])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def kit(node_driver: list[str]) -> Iterator[KitDriver]:
    driver = KitDriver(node_driver[0])
    yield driver
    driver.close()


# What hypothesis once found: an object whose keys JavaScript reorders (array indices first).
REORDERED_KEYS = {
    "id": "msg_p",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [
        {"type": "tool_use", "id": "toolu_0_0", "name": "0", "input": {"": None, "0": None}}
    ],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_input_tokens": None,
        "cache_creation_input_tokens": None,
    },
}


@settings(max_examples=150, deadline=None)
@given(st.one_of(chat_completions(), responses(), messages()))
@example(REORDERED_KEYS)
def test_both_kits_give_the_same_step_output_bytes(kit: KitDriver, raw: dict[str, Any]) -> None:
    sdk_type = SDK_TYPES[raw.get("object") or raw["type"]]
    output = model_output(sdk_type.model_validate(raw))
    python = api.StepOutput(assistant=output.assistant, usage=output.usage).SerializeToString()
    assert kit.convert(raw) == python
