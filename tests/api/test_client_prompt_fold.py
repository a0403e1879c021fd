"""The Python client's windowed prompt fold on real sessions, checked
against the server's own Inspect and ListTrajectory."""

from __future__ import annotations

from typing import Any

from promptadmission import Trajectory
from promptadmission.prompt_fold import (
    fold_system_prompt,
)
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import REPLACE_ROUTE, admit_request, create_session


async def list_events(stub: api_grpc.AdmissionServiceAsyncStub, session_id: str) -> list[pb.Event]:
    events: list[pb.Event] = []
    token = ""
    while True:
        page = await stub.ListEvents(
            api.ListEventsRequest(session_id=session_id, page_size=3, page_token=token)
        )
        events.extend(page.events)
        token = page.next_page_token
        if not token:
            return events


async def test_the_client_fold_agrees_with_inspect_and_the_trajectory(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    steps: list[tuple[str, dict[str, Any]]] = [
        ("A", {}),
        ("B", {}),
        ("C", {}),
        ("C plan", {"starts_request_series": True}),
        ("D", {"route": REPLACE_ROUTE}),
        ("E", {}),
        ("", {}),
        ("F", {}),
    ]
    for step, (prompt, fields) in enumerate(steps, start=1):
        await stub.Admit(admit_request(session_id, prompt, f"u{step}", turn=1, step=step, **fields))
    plan = await stub.PlanCompaction(
        api.PlanCompactionRequest(session_id=session_id, retain_tokens=0)
    )
    await stub.Compact(
        api.CompactRequest(session_id=session_id, plan_token=plan.plan_token, summary="s")
    )
    await stub.Admit(admit_request(session_id, "F", "after compaction", turn=2, step=1))

    events = await list_events(stub, session_id)
    inspect = await stub.Inspect(api.InspectRequest(session_id=session_id))
    pages = Trajectory()
    pages.add(await stub.ListTrajectory(api.ListTrajectoryRequest(session_id=session_id)))
    trajectory = [pages.resolved(entry) for entry in pages.entries]

    state = fold_system_prompt(events)
    assert state is not None and not state.uncertain and state.effective is not None
    assert state.effective.text == inspect.effective_prompt.text
    assert [(i.node.seq, i.node.text, i.node.update) for i in state.nodes] == [
        (n.seq, n.text, n.update) for n in inspect.system_nodes
    ]
    # At each request's log position the client's fold shows the prompt the server reports.
    for entry in trajectory:
        at = fold_system_prompt(e for e in events if e.seq < entry.log_seq)
        assert at is not None and at.effective is not None
        assert (at.effective.seq, at.effective.text, at.effective.update) == (
            entry.effective_prompt.seq,
            entry.effective_prompt.text,
            entry.effective_prompt.update,
        )
    # A window that starts later shows the same prompt, or none while it is uncertain.
    for start in range(len(events)):
        window = fold_system_prompt(events[start:])
        if window is not None and window.effective is not None and window.effective.text:
            assert window.effective.text == inspect.effective_prompt.text
