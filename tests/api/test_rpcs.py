"""Every RPC through the real server and channel: one session's life, end to end."""

from __future__ import annotations

import json

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import (
    REPLACE_ROUTE,
    admit_request,
    create_session,
    new_session_id,
    rich_error,
)

ODD_TEXT = "nul\x00 astral \U0001f600"
READ_TOOL = pb.Tool(name="read", description="Read a file.", parameters_json='{"type":"object"}')


async def test_session_lifecycle(stub: api_grpc.AdmissionServiceAsyncStub) -> None:
    session_id = new_session_id()
    created = await stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
    assert created.session.session_id == session_id
    assert created.session.event_count == 0
    assert created.session.create_time.seconds > 0

    got = await stub.GetSession(api.GetSessionRequest(session_id=session_id))
    assert got.session == created.session

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
    assert rich_error(caught.value).reason == "SESSION_ALREADY_EXISTS"

    generated = await stub.CreateSession(api.CreateSessionRequest())
    assert generated.session.session_id

    await stub.DeleteSession(api.DeleteSessionRequest(session_id=session_id))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetSession(api.GetSessionRequest(session_id=session_id))
    assert rich_error(caught.value).reason == "SESSION_NOT_FOUND"


async def test_list_sessions_pages(stub: api_grpc.AdmissionServiceAsyncStub) -> None:
    for _ in range(3):
        await create_session(stub)
    seen: list[str] = []
    token = ""
    while True:
        page = await stub.ListSessions(api.ListSessionsRequest(page_size=2, page_token=token))
        assert len(page.sessions) <= 2
        seen += [s.session_id for s in page.sessions]
        token = page.next_page_token
        if not token:
            break
    assert len(seen) == len(set(seen)) >= 3


async def test_a_session_from_admission_to_compaction(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)

    # Turn 1: the first prompt reserves the head; the built-in catalog knows deepseek-flash.
    first = await stub.Admit(
        admit_request(session_id, "prompt A", "hello " + ODD_TEXT, turn=1, tools=[READ_TOOL])
    )
    assert first.admission_id
    assert [(c.operation, c.seq, c.text) for c in first.commits] == [
        (pb.COMMIT_OPERATION_APPEND, 0, "prompt A")
    ]
    assert list(first.user_seqs) == [1]
    assert first.header.reason == pb.HEADER_REASON_INITIAL
    assert first.context.context.system_prompt_update == pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY
    assert first.system_prompt_update == pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY
    assert first.capability_source == pb.CAPABILITY_SOURCE_CATALOG
    assert first.tool_update == pb.TOOL_UPDATE_REPLACE
    assert [m.role for m in first.request.messages] == [
        pb.MESSAGE_ROLE_SYSTEM,
        pb.MESSAGE_ROLE_USER,
    ]
    assert first.request.messages[1].content[0].text.text == "hello " + ODD_TEXT
    assert first.request.wire_format == pb.WIRE_FORMAT_NEUTRAL and not first.request.body_json
    assert first.effective_prompt.location == pb.PROMPT_LOCATION_HEAD
    assert first.forecast.divergence_reason == pb.DIVERGENCE_REASON_FIRST_REQUEST

    recorded = await stub.Record(
        api.RecordRequest(
            session_id=session_id,
            admission_id=first.admission_id,
            assistant=pb.Message(
                role=pb.MESSAGE_ROLE_ASSISTANT,
                content=[
                    pb.ContentBlock(text=pb.TextBlock(text="reading")),
                    pb.ContentBlock(
                        tool_call=pb.ToolCallBlock(call_id="c1", name="read", arguments_json="{}")
                    ),
                ],
            ),
            tool_results=[
                pb.ToolResult(
                    call_id="c1", content=[pb.ContentBlock(text=pb.TextBlock(text="file"))]
                )
            ],
            usage=pb.Usage(input_tokens=100, output_tokens=10, cache_read_tokens=0),
        )
    )
    assert recorded.HasField("assistant_seq")
    assert (recorded.assistant_seq, list(recorded.tool_result_seqs)) == (4, [5])

    # Turn 2: a changed prompt on an in-history route is appended after the history.
    second = await stub.Admit(
        admit_request(
            session_id,
            "prompt B",
            "next",
            turn=2,
            tools=[READ_TOOL],
            wire_format=pb.WIRE_FORMAT_OPENAI_CHAT,
            content=pb.REQUEST_CONTENT_BOTH,  # the body, and the messages the retry compares
            expected_revision=recorded.revision,
        )
    )
    assert [(c.operation, c.text) for c in second.commits] == [
        (pb.COMMIT_OPERATION_APPEND, "prompt B")
    ]
    assert second.effective_prompt.location == pb.PROMPT_LOCATION_IN_HISTORY
    assert not second.HasField("header")
    body = json.loads(second.request.body_json)
    assert [m["role"] for m in body["messages"]].count("system") == 2
    assert second.forecast.reused_messages > 0

    # A retry of turn 2 on the same route changes nothing.
    before = (await stub.GetSession(api.GetSessionRequest(session_id=session_id))).session
    retry = await stub.Reconcile(
        api.ReconcileRequest(
            session_id=session_id,
            admission_id=second.admission_id,
            route=second_route(),
        )
    )
    assert retry.attempt == 1
    assert list(retry.commits) == []
    assert not retry.HasField("header") and not retry.HasField("context")
    assert [m.SerializeToString() for m in retry.request.messages] == [
        m.SerializeToString() for m in second.request.messages
    ]

    inspected = await stub.Inspect(api.InspectRequest(session_id=session_id))
    assert inspected.revision == inspected.session.revision == retry.revision
    assert inspected.session.event_count == before.event_count  # the retry logged no event
    assert [(n.text, n.update, n.turn) for n in inspected.system_nodes] == [
        ("prompt A", False, 1),
        ("prompt B", True, 2),
    ]
    assert inspected.effective_prompt.text == "prompt B"
    assert inspected.breakdown.total_tokens == (
        inspected.breakdown.system_tokens
        + inspected.breakdown.tools_tokens
        + inspected.breakdown.message_tokens
    )
    assert inspected.breakdown.tools_tokens > 0
    assert [(e.admission_id, e.attempt) for e in inspected.ledger] == [
        (first.admission_id, 0),
        (second.admission_id, 0),
        (second.admission_id, 1),
    ]
    assert inspected.ledger[0].observed.input_tokens == 100
    assert not inspected.ledger[1].HasField("observed")
    assert inspected.series.last_header.header.tools[0].name == "read"

    events = await all_events(stub, session_id)
    assert [e.seq for e in events] == list(range(inspected.session.event_count))

    # Compact everything after the head: the in-history prompt is folded into the head.
    plan = await stub.PlanCompaction(
        api.PlanCompactionRequest(session_id=session_id, retain_tokens=0)
    )
    assert plan.summarization_input[0].role == pb.MESSAGE_ROLE_SYSTEM
    assert plan.shadowed_tokens > 0
    compacted = await stub.Compact(
        api.CompactRequest(session_id=session_id, plan_token=plan.plan_token, summary="s")
    )
    assert list(compacted.shadowed_seqs) == list(plan.shadowed_seqs)
    assert compacted.effective_prompt.text == "prompt B"
    assert compacted.effective_prompt.location == pb.PROMPT_LOCATION_HEAD

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Compact(
            api.CompactRequest(session_id=session_id, plan_token=plan.plan_token, summary="s")
        )
    assert rich_error(caught.value).reason == "STALE_COMPACTION_PLAN"


def second_route() -> pb.Route:
    return pb.Route(provider="deepseek", model="deepseek-flash", context_window=128_000)


async def test_a_route_the_catalog_does_not_know_rewrites_the_head(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    await stub.Admit(admit_request(session_id, "one", "hi", route=REPLACE_ROUTE))
    second = await stub.Admit(admit_request(session_id, "two", "again", route=REPLACE_ROUTE))
    assert second.capability_source == pb.CAPABILITY_SOURCE_DEFAULT
    assert second.system_prompt_update == pb.SYSTEM_PROMPT_UPDATE_REPLACE
    assert [(c.operation, c.replaced_seq, c.text) for c in second.commits] == [
        (pb.COMMIT_OPERATION_REPLACE, 0, "two")
    ]


async def test_a_repeated_request_id_replays_the_stored_response(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    request = admit_request(session_id, "p", "hi", request_id="r-1")
    first = await stub.Admit(request)
    again = await stub.Admit(request)
    assert again.SerializeToString(deterministic=True) == first.SerializeToString(
        deterministic=True
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Admit(admit_request(session_id, "p", "changed", request_id="r-1"))
    assert rich_error(caught.value).reason == "REQUEST_ID_REUSED"


async def test_validate_only_commits_nothing(stub: api_grpc.AdmissionServiceAsyncStub) -> None:
    session_id = await create_session(stub)
    preview = await stub.Admit(admit_request(session_id, "p", "hi", validate_only=True))
    assert preview.admission_id == ""
    assert [c.text for c in preview.commits] == ["p"]
    session = (await stub.GetSession(api.GetSessionRequest(session_id=session_id))).session
    assert session.event_count == 0


async def test_a_stale_expected_revision_is_aborted(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Admit(admit_request(session_id, "p", "hi", expected_revision=999))
    error = rich_error(caught.value)
    assert (error.code, error.reason) == (grpc.StatusCode.ABORTED, "REVISION_MISMATCH")


async def all_events(stub: api_grpc.AdmissionServiceAsyncStub, session_id: str) -> list[pb.Event]:
    events: list[pb.Event] = []
    token = ""
    while True:
        page = await stub.ListEvents(
            api.ListEventsRequest(session_id=session_id, page_size=2, page_token=token)
        )
        assert len(page.events) <= 2
        events += page.events
        token = page.next_page_token
        if not token:
            return events
