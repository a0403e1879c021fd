"""The keyless golden scenario shared with the TypeScript client
(clients/typescript/test/snapshot.ts must stay step-for-step identical): on an in-history replay
route, a tool call and its result, then a prompt change after the first tool call. Its typed
event log, without commit times and admission ids, is pinned in
tests/snapshots/system-prompt-in-history.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from promptadmission import AdmissionClient, assistant_message, user_message
from promptadmission.v1 import admission_service_pb2 as pb
from promptadmission.v1 import session_pb2

SNAPSHOT_PATH = Path(__file__).resolve().parents[1] / "snapshots/system-prompt-in-history.json"

SCENARIO = (
    "system-prompt-in-history: an in-history replay route; step 1 admits prompt A with one tool "
    "and a user message, then records a tool call and its result; step 2 admits prompt B (A plus "
    "a plan-mode section) and records the reply. Commit times and admission ids are left out."
)

ROUTE = session_pb2.Route(
    provider="replay",
    model="replay-in-history",
    context_window=65536,
    system_prompt_update=session_pb2.SYSTEM_PROMPT_UPDATE_IN_HISTORY,
)
TOOLS = [
    session_pb2.Tool(
        name="read_file",
        description="Read a file from the workspace.",
        parameters_json='{"properties":{"path":{"type":"string"}},"required":["path"],"type":"object"}',
    )
]
PROMPT_A = (
    "You are a careful coding agent.\n\nUse read_file before answering questions about files."
)
PROMPT_B = (
    f"{PROMPT_A}\n\n## Plan mode\nPlan before you edit: list the steps, then wait for approval."
)
# Fields that differ from run to run: times and ids the service generates.
IGNORED_FIELDS = ("commitTime", "admissionId")


async def run_snapshot_scenario(client: AdmissionClient, session_id: str) -> dict[str, Any]:
    """Runs the scenario on a new session ``session_id`` and returns its golden form."""
    await client.create_session(pb.CreateSessionRequest(session_id=session_id))
    first = await client.admit(
        pb.AdmitRequest(
            session_id=session_id,
            turn=1,
            step=1,
            rendered_prompt=PROMPT_A,
            tools=TOOLS,
            route=ROUTE,
            users=[user_message("What does README.md say?")],
        )
    )
    await client.record(
        pb.RecordRequest(
            session_id=session_id,
            admission_id=first.admission_id,
            assistant=session_pb2.Message(
                role=session_pb2.MESSAGE_ROLE_ASSISTANT,
                content=[
                    session_pb2.ContentBlock(
                        tool_call=session_pb2.ToolCallBlock(
                            call_id="call_1",
                            name="read_file",
                            arguments_json='{"path":"README.md"}',
                        )
                    )
                ],
            ),
            tool_results=[
                session_pb2.ToolResult(
                    call_id="call_1",
                    content=[
                        session_pb2.ContentBlock(
                            text=session_pb2.TextBlock(text="# Demo\nA demo project.")
                        )
                    ],
                )
            ],
        )
    )
    second = await client.admit(
        pb.AdmitRequest(
            session_id=session_id,
            turn=1,
            step=2,
            rendered_prompt=PROMPT_B,
            tools=TOOLS,
            route=ROUTE,
        )
    )
    await client.record(
        pb.RecordRequest(
            session_id=session_id,
            admission_id=second.admission_id,
            assistant=assistant_message("README.md describes a demo project."),
        )
    )
    events = await client.all_events(session_id)
    return {"scenario": SCENARIO, "events": [golden_event(event) for event in events]}


def golden_event(event: session_pb2.Event) -> dict[str, Any]:
    data = json_format.MessageToDict(event, always_print_fields_with_no_presence=True)
    for field in IGNORED_FIELDS:
        data.pop(field, None)
    return data


def canonical_json(value: Any) -> str:
    """The golden file's text (the TypeScript client writes the same bytes)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
