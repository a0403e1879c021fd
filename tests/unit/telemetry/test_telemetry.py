"""The telemetry's pure parts: the admission decision a metric counts (read from the commits), the
JSON and text log formats, and each trace exporter built without touching the network. Over a
real channel: ``tests/api/test_telemetry.py``."""

from __future__ import annotations

import json
import logging
from typing import TypeAlias

import pytest
from admission_service.telemetry.logs import JsonFormatter, TextFormatter
from admission_service.telemetry.metrics import admission_decision
from admission_service.telemetry.tracing import tracer_provider_for
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

Op: TypeAlias = pb.CommitOperation.ValueType


def commits(*ops: tuple[Op, str]) -> list[pb.SystemCommit]:
    return [pb.SystemCommit(operation=op, text=text) for op, text in ops]


APPEND, REPLACE = pb.COMMIT_OPERATION_APPEND, pb.COMMIT_OPERATION_REPLACE


@pytest.mark.parametrize(
    ("ops", "location", "decision"),
    [
        ([], pb.PROMPT_LOCATION_HEAD, "no-op"),
        ([(APPEND, "A")], pb.PROMPT_LOCATION_HEAD, "append"),
        ([(APPEND, "")], pb.PROMPT_LOCATION_NONE, "append"),  # an empty first head
        ([(REPLACE, ""), (REPLACE, "B")], pb.PROMPT_LOCATION_HEAD, "consolidate"),
        ([(REPLACE, ""), (REPLACE, "")], pb.PROMPT_LOCATION_HEAD, "consolidate"),  # head kept
        ([(REPLACE, ""), (REPLACE, "")], pb.PROMPT_LOCATION_NONE, "clear"),
    ],
)
def test_the_decision_comes_from_the_commits(
    ops: list[tuple[Op, str]], location: pb.PromptLocation.ValueType, decision: str
) -> None:
    response = api.AdmitResponse(
        commits=commits(*ops), effective_prompt=pb.EffectivePrompt(location=location)
    )
    assert admission_decision(response) == decision


def test_json_and_text_lines_carry_fields_and_exceptions() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom %s", ("now",), None)
    record.fields = {"grpc_code": "INTERNAL"}
    record.request_id = "r1"
    try:
        raise ValueError("inner")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "boom now"
    assert (entry["request_id"], entry["grpc_code"]) == ("r1", "INTERNAL")
    assert "ValueError: inner" in entry["exception"]
    assert entry["time"].endswith("+00:00")
    text = TextFormatter().format(record)
    assert text.splitlines()[0].endswith("boom now [request_id=r1 grpc_code=INTERNAL]")


@pytest.mark.parametrize("exporter", ["console", "otlp"])
def test_each_exporter_builds_a_provider_without_touching_the_network(exporter: str) -> None:
    provider = tracer_provider_for(exporter)
    assert provider is not None
    if exporter == "console":
        with provider.get_tracer("t").start_as_current_span("a-span"):
            pass
    provider.shutdown()  # flushes; the OTLP exporter has nothing to send, so it connects nowhere
    assert tracer_provider_for("none") is None
