"""The Python client reproduces the golden system-prompt-in-history event log exactly.

``UPDATE_SNAPSHOTS=1`` rewrites the golden file from this run instead of comparing (review the
diff before committing it); a missing golden file is a failure, never silently created.
"""

from __future__ import annotations

import json
import os
import uuid

from promptadmission import AdmissionClient

from tests.clients.snapshot import SNAPSHOT_PATH, canonical_json, run_snapshot_scenario


async def test_the_python_client_reproduces_the_golden_events(server_target: str) -> None:
    async with AdmissionClient(server_target) as client:
        golden = await run_snapshot_scenario(client, f"snapshot-py-{uuid.uuid4()}")
    actual = canonical_json(golden)

    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT_PATH.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT_PATH.write_text(actual, encoding="utf-8")
        return
    assert SNAPSHOT_PATH.exists(), (
        f"{SNAPSHOT_PATH} is missing; create it deliberately with UPDATE_SNAPSHOTS=1"
    )
    assert actual == SNAPSHOT_PATH.read_text(encoding="utf-8"), (
        "the event log differs from the golden file; if the change is intended, rerun with "
        "UPDATE_SNAPSHOTS=1 and review the diff"
    )


def test_the_golden_file_pins_the_in_history_append() -> None:
    """What the golden file must show, whoever regenerates it: the appended system/message, the
    untouched node 0, a single request/header, and request/context carrying the mode."""
    events = json.loads(SNAPSHOT_PATH.read_text(encoding="utf-8"))["events"]
    systems = [event for event in events if event["kind"] == "EVENT_KIND_SYSTEM_MESSAGE"]
    headers = [event for event in events if event["kind"] == "EVENT_KIND_REQUEST_HEADER"]
    contexts = [event for event in events if event["kind"] == "EVENT_KIND_REQUEST_CONTEXT"]

    assert [event["seq"] for event in systems] == ["0", "6"]
    assert all(event["surfaceOp"] == {"append": {}} for event in systems)
    assert not any("replace" in event.get("surfaceOp", {}) for event in events)
    tool_result = next(event for event in events if event["kind"] == "EVENT_KIND_TOOL_RESULT")
    assert int(tool_result["seq"]) < int(systems[1]["seq"])
    assert len(headers) == 1
    assert headers[0]["header"]["reason"] == "HEADER_REASON_INITIAL"
    assert [event["context"]["systemPromptUpdate"] for event in contexts] == [
        "SYSTEM_PROMPT_UPDATE_IN_HISTORY"
    ]
