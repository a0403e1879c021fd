"""ListTrajectory over the real server: the prompt each request saw, its change, the config."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb
from promptadmission.v1 import trajectory_pb2 as tpb

from tests.api.support import IN_HISTORY_ROUTE, admit_request, create_session, rich_error

READ = pb.Tool(name="read", description="Read a file", parameters_json='{"type":"object"}')
WRITE = pb.Tool(name="write", description="Write a file", parameters_json='{"type":"object"}')


async def trajectory(
    stub: api_grpc.AdmissionServiceAsyncStub, session_id: str, page_size: int = 0
) -> list[tpb.TrajectoryEntry]:
    entries: list[tpb.TrajectoryEntry] = []
    token = ""
    while True:
        page = await stub.ListTrajectory(
            api.ListTrajectoryRequest(session_id=session_id, page_size=page_size, page_token=token)
        )
        entries.extend(page.entries)
        token = page.next_page_token
        if not token:
            return entries


async def admit(
    stub: api_grpc.AdmissionServiceAsyncStub,
    session_id: str,
    prompt: str,
    step: int,
    **fields: Any,
) -> str:
    response = await stub.Admit(
        admit_request(session_id, prompt, f"user {step}", turn=1, step=step, **fields)
    )
    return str(response.admission_id)


async def test_updates_a_b_c_report_b_as_the_previous_prompt_of_c(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    await admit(stub, session_id, "A", 1, tools=[READ])
    await admit(stub, session_id, "B", 2, tools=[READ])
    await admit(stub, session_id, "C", 3, tools=[READ])

    initial, b, c = await trajectory(stub, session_id)

    assert initial.change.kind == tpb.PROMPT_CHANGE_KIND_INITIAL
    assert initial.header.prompt.system_prompt == "A"
    assert not initial.header.synthetic
    assert initial.header.reason == pb.HEADER_REASON_INITIAL
    # B and C are in-history updates: no header was logged, each is a synthetic header fact.
    for entry, text, previous in ((b, "B", "A"), (c, "C", "B")):
        assert entry.header.synthetic
        assert entry.header.prompt.system_prompt == text
        assert entry.effective_prompt.text == text and entry.effective_prompt.update
        assert entry.change.kind == tpb.PROMPT_CHANGE_KIND_SYSTEM
        assert entry.change.previous.system_prompt == previous
        assert [t.name for t in entry.header.prompt.tools] == ["read"]
        assert not entry.starts_series
    assert [e.request_index for e in (initial, b, c)] == [0, 1, 2]


async def test_a_header_after_an_update_reports_only_its_own_tools_change(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    await admit(stub, session_id, "A", 1, tools=[READ])
    # On an in-history route with tool-update support, a tools change does not start a series:
    # the prompt update is appended and the change header follows it in the same step.
    route = pb.Route(
        provider="deepseek",
        model="deepseek-flash",
        tool_update=pb.TOOL_UPDATE_IN_HISTORY,
        system_prompt_update=pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY,
    )
    await admit(stub, session_id, "B", 2, tools=[READ, WRITE], route=route)

    _, second = await trajectory(stub, session_id)

    synthetic, real = second.headers
    assert synthetic.synthetic and synthetic.change.kind == tpb.PROMPT_CHANGE_KIND_SYSTEM
    assert synthetic.change.previous.system_prompt == "A"
    assert not real.synthetic and real.reason == pb.HEADER_REASON_CHANGE
    assert real.change.kind == tpb.PROMPT_CHANGE_KIND_TOOLS
    assert real.change.previous.system_prompt == "B"
    assert real.change.seq == real.seq
    # The request's own change combines both, against the previous request's state.
    assert second.change.kind == tpb.PROMPT_CHANGE_KIND_SYSTEM_AND_TOOLS
    assert second.change.previous.system_prompt == "A"
    assert second.header.seq == real.seq
    assert second.header.prompt.system_prompt == "B"


async def test_a_config_change_logs_a_change_header_without_a_series_start(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    await admit(stub, session_id, "A", 1, config={"temperature": "0.2"})
    response = await stub.Admit(
        admit_request(
            session_id, "A", "again", turn=1, step=2, config={"temperature": "0.7", "top_p": "1"}
        )
    )
    assert response.header.reason == pb.HEADER_REASON_CHANGE
    assert not response.starts_series
    assert dict(response.header.header.config) == {"temperature": "0.7", "top_p": "1"}
    # The same config again logs nothing.
    same = await stub.Admit(
        admit_request(
            session_id, "A", "more", turn=1, step=3, config={"top_p": "1", "temperature": "0.7"}
        )
    )
    assert not same.HasField("header")

    first, second, third = await trajectory(stub, session_id)
    assert dict(first.header.prompt.config) == {"temperature": "0.2"}
    assert second.header.reason == pb.HEADER_REASON_CHANGE
    assert dict(second.header.prompt.config) == {"temperature": "0.7", "top_p": "1"}
    assert not second.HasField("change")  # a config change is not a prompt change
    assert not second.starts_series
    assert third.header.seq == second.header.seq and not third.headers


async def test_a_retry_keeps_the_config_in_force(stub: api_grpc.AdmissionServiceAsyncStub) -> None:
    session_id = await create_session(stub)
    admission_id = await admit(stub, session_id, "A", 1, config={"temperature": "0.2"})
    retry = await stub.Reconcile(
        api.ReconcileRequest(
            session_id=session_id,
            admission_id=admission_id,
            route=IN_HISTORY_ROUTE,
        )
    )
    assert not retry.HasField("header")
    first, second = await trajectory(stub, session_id)
    assert (second.admission_id, second.attempt) == (admission_id, 1)
    assert dict(second.header.prompt.config) == {"temperature": "0.2"}
    assert second.log_seq == first.log_seq and not second.headers


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"": "x"}, "config"),
        ({"k\x00": "x"}, "config"),
        ({"k" * 129: "x"}, "config"),
        ({"big": "x" * 4097}, "config[big]"),
        ({f"k{i}": "v" for i in range(65)}, "config"),
    ],
)
async def test_bad_config_is_invalid_argument_naming_the_field(
    stub: api_grpc.AdmissionServiceAsyncStub, config: dict[str, str], field: str
) -> None:
    session_id = await create_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Admit(admit_request(session_id, "A", "hi", config=config))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert rich_error(caught.value).violated_fields == [field]
    session = await stub.GetSession(api.GetSessionRequest(session_id=session_id))
    assert session.session.event_count == 0


async def test_pages_carry_the_fold_across_page_boundaries(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    prompts = ["A", "B", "C", "D", "E"]
    for step, prompt in enumerate(prompts, start=1):
        await admit(stub, session_id, prompt, step)
    whole = await trajectory(stub, session_id)
    paged = await trajectory(stub, session_id, page_size=2)
    assert [e.SerializeToString() for e in paged] == [e.SerializeToString() for e in whole]
    assert [e.change.previous.system_prompt for e in whole[1:]] == prompts[:-1]
    assert [e.effective_prompt.text for e in whole] == prompts


async def test_usage_and_forecast_appear_with_each_request(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    admission_id = await admit(stub, session_id, "A", 1)
    await stub.Record(
        api.RecordRequest(
            session_id=session_id,
            admission_id=admission_id,
            usage=pb.Usage(input_tokens=10, cache_read_tokens=4),
        )
    )
    (entry,) = await trajectory(stub, session_id)
    assert entry.observed.cache_read_tokens == 4
    assert entry.forecast.divergence_reason == pb.DIVERGENCE_REASON_FIRST_REQUEST


async def test_a_foreign_or_broken_page_token_is_invalid_argument(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    other = await create_session(stub)
    for step in range(3):
        await admit(stub, session_id, "A", step)
    page = await stub.ListTrajectory(api.ListTrajectoryRequest(session_id=session_id, page_size=1))
    for target, token in ((other, page.next_page_token), (session_id, "garbage")):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListTrajectory(
                api.ListTrajectoryRequest(session_id=target, page_token=token)
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert rich_error(caught.value).violated_fields == ["page_token"]
