"""One session driven alternately from the TypeScript client and the Python client.

TypeScript admits prompt A; Python records the reply and admits prompt B on the in-history
route; TypeScript compacts (PlanCompaction, then Compact); Python reconciles B's admission.
After every step both clients inspect the session and must see the same thing, byte for byte
in proto JSON: derived request, effective prompt, system-prompt history, token breakdown,
series state and ledger. At the end both read the same event log.
"""

from __future__ import annotations

import json
import select
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from promptadmission import AdmissionClient, assistant_message, user_message
from promptadmission.v1 import admission_service_pb2 as pb
from promptadmission.v1 import session_pb2

_M = TypeVar("_M", bound=Message)

ROUTE = session_pb2.Route(provider="deepseek", model="deepseek-flash", context_window=131072)
TOOLS = [
    session_pb2.Tool(
        name="search",
        description="Search the code base.",
        parameters_json='{"properties":{"query":{"type":"string"}},"type":"object"}',
    )
]
PROMPT_A = "You are a coding agent. Answer briefly."
PROMPT_B = f"{PROMPT_A}\n\n## Plan mode\nDo not edit files; write a plan first."
WIRE = session_pb2.WIRE_FORMAT_OPENAI_CHAT
# How long one driver call may take: the client's own deadline (10 s, retries included) and
# node's start, with room for a loaded machine. A driver that does not answer by then fails
# the test (with what the driver printed) instead of blocking the run (issue 21: a
# `make citus-test` once hung here for 12+ minutes after a failure).
DRIVER_ANSWER_SECONDS = 60.0
QUESTION = "Explain the build system of this repository in detail. " * 12
FOLLOW_UP = "Now list every target of the Makefile and what it depends on. " * 12


def as_json(message: Message) -> dict[str, Any]:
    """Proto JSON with implicit fields, as the TypeScript driver prints it."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


class TypeScriptClient:
    """The TypeScript client, driven over the line protocol of clients/typescript/test/driver.ts."""

    def __init__(self, command: list[str], base_url: str) -> None:
        self._process = subprocess.Popen(
            [*command, base_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def call_json(self, method: str, request: Message) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        line = json.dumps({"method": method, "request": json_format.MessageToDict(request)})
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()
        # The driver writes each answer as one line at once: once the pipe is readable, the
        # line follows without waiting on the server.
        readable, _, _ = select.select([self._process.stdout], [], [], DRIVER_ANSWER_SECONDS)
        if not readable:
            self._process.kill()
            pytest.fail(
                f"the TypeScript driver did not answer {method} in {DRIVER_ANSWER_SECONDS}s"
            )
        answer = self._process.stdout.readline()
        assert answer, f"the TypeScript driver exited ({self._process.poll()})"
        result: dict[str, Any] = json.loads(answer)
        assert result["ok"], f"TypeScript {method} failed: {result}"
        response: dict[str, Any] = result["response"]
        return response

    def call(self, method: str, request: Message, response_type: type[_M]) -> _M:
        return json_format.ParseDict(self.call_json(method, request), response_type())

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


@pytest.fixture
def typescript(node_driver: list[str], server_target: str) -> Iterator[TypeScriptClient]:
    client = TypeScriptClient(node_driver, f"http://{server_target}")
    yield client
    client.close()


@pytest.mark.timeout(300)
async def test_one_session_driven_alternately_from_typescript_and_python(
    typescript: TypeScriptClient, server_target: str
) -> None:
    session_id = f"xlang-{uuid.uuid4()}"
    inspect_request = pb.InspectRequest(session_id=session_id, wire_format=WIRE)

    async with AdmissionClient(server_target) as python:

        async def inspect_from_both() -> pb.InspectResponse:
            from_python = await python.inspect(inspect_request)
            from_typescript = typescript.call_json("inspect", inspect_request)
            assert from_typescript == as_json(from_python)
            return from_python

        await python.create_session(pb.CreateSessionRequest(session_id=session_id))

        # TypeScript admits prompt A (the route's capability comes from the catalog).
        first = typescript.call(
            "admit",
            pb.AdmitRequest(
                session_id=session_id,
                turn=1,
                step=1,
                rendered_prompt=PROMPT_A,
                tools=TOOLS,
                route=ROUTE,
                users=[user_message(QUESTION)],
                wire_format=WIRE,
            ),
            pb.AdmitResponse,
        )
        assert first.system_prompt_update == session_pb2.SYSTEM_PROMPT_UPDATE_IN_HISTORY
        assert [(c.operation, c.text) for c in first.commits] == [
            (session_pb2.COMMIT_OPERATION_APPEND, PROMPT_A)
        ]
        view = await inspect_from_both()
        assert as_json(view.request) == as_json(first.request)
        assert view.effective_prompt.text == PROMPT_A
        assert [node.text for node in view.system_nodes] == [PROMPT_A]

        # Python records the assistant's reply.
        await python.record(
            pb.RecordRequest(
                session_id=session_id,
                admission_id=first.admission_id,
                assistant=assistant_message("It uses make; `make test` runs everything."),
                usage=session_pb2.Usage(input_tokens=180, output_tokens=12),
            )
        )
        view = await inspect_from_both()
        assert view.request.total_messages == 3

        # Python admits prompt B on the in-history route: appended after the cached history.
        second = await python.admit(
            pb.AdmitRequest(
                session_id=session_id,
                turn=2,
                step=1,
                rendered_prompt=PROMPT_B,
                tools=TOOLS,
                route=ROUTE,
                users=[user_message(FOLLOW_UP)],
                wire_format=WIRE,
            )
        )
        assert [(c.operation, c.text) for c in second.commits] == [
            (session_pb2.COMMIT_OPERATION_APPEND, PROMPT_B)
        ]
        assert not second.starts_series
        view = await inspect_from_both()
        assert as_json(view.request) == as_json(second.request)
        assert view.effective_prompt.text == PROMPT_B
        assert view.effective_prompt.location == session_pb2.PROMPT_LOCATION_IN_HISTORY
        assert [(node.text, node.update) for node in view.system_nodes] == [
            (PROMPT_A, False),
            (PROMPT_B, True),
        ]
        breakdown_before = view.breakdown

        # TypeScript compacts everything after the head; the effective prompt survives.
        plan = typescript.call(
            "planCompaction",
            pb.PlanCompactionRequest(session_id=session_id, retain_tokens=0),
            pb.PlanCompactionResponse,
        )
        assert plan.shadowed_seqs
        compacted = typescript.call(
            "compact",
            pb.CompactRequest(
                session_id=session_id,
                plan_token=plan.plan_token,
                summary="The user asked about the build; it is make-based.",
            ),
            pb.CompactResponse,
        )
        assert compacted.effective_prompt.text == PROMPT_B
        view = await inspect_from_both()
        assert view.effective_prompt.text == PROMPT_B
        assert view.effective_prompt.location == session_pb2.PROMPT_LOCATION_HEAD
        assert [node.text for node in view.system_nodes] == [PROMPT_B]
        assert view.breakdown.message_tokens < breakdown_before.message_tokens

        # Python reconciles B's admission: the compaction made it a series start.
        retry = await python.reconcile(
            pb.ReconcileRequest(
                session_id=session_id,
                admission_id=second.admission_id,
                route=ROUTE,
                wire_format=WIRE,
            )
        )
        assert retry.starts_series
        assert retry.header.reason == session_pb2.HEADER_REASON_SERIES
        view = await inspect_from_both()
        assert as_json(view.request) == as_json(retry.request)
        assert view.effective_prompt.text == PROMPT_B
        assert view.series.last_header.reason == session_pb2.HEADER_REASON_SERIES

        # Both read the same event log.
        events = await python.all_events(session_id)
        from_typescript = typescript.call_json(
            "listEvents", pb.ListEventsRequest(session_id=session_id, page_size=1000)
        )
        assert from_typescript["events"] == [as_json(event) for event in events]
        assert from_typescript["nextPageToken"] == ""
