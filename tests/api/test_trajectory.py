"""ListTrajectory over the real server: the prompt each request saw, its change, the config."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from promptadmission import Trajectory
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb
from promptadmission.v1 import trajectory_pb2 as tpb

from bench.trajectory_pages import big_tools
from tests.api.support import (
    IN_HISTORY_ROUTE,
    ApiClient,
    admit_request,
    async_stub,
    create_session,
    rich_error,
)
from tests.reliability.process import CHANNEL_OPTIONS, SERVICE_BIN, ServiceProcess

READ = pb.Tool(name="read", description="Read a file", parameters_json='{"type":"object"}')
WRITE = pb.Tool(name="write", description="Write a file", parameters_json='{"type":"object"}')


async def pages(
    stub: api_grpc.AdmissionServiceAsyncStub, session_id: str, page_size: int = 0
) -> list[api.ListTrajectoryResponse]:
    """Every page of the session's trajectory, as the service answered it."""
    answered: list[api.ListTrajectoryResponse] = []
    token = ""
    while True:
        page = await stub.ListTrajectory(
            api.ListTrajectoryRequest(session_id=session_id, page_size=page_size, page_token=token)
        )
        answered.append(page)
        if not (token := page.next_page_token):
            return answered


async def trajectory(
    stub: api_grpc.AdmissionServiceAsyncStub, session_id: str, page_size: int = 0
) -> list[tpb.TrajectoryEntry]:
    """Every entry, with the texts and tool sets the pages name by version filled in."""
    whole = Trajectory()
    for page in await pages(stub, session_id, page_size):
        whole.add(page)
    return [whole.resolved(entry) for entry in whole.entries]


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


# ---- by reference, bounded in bytes (issue 21 item 3) ---------------------------------------

MIB = 1 << 20
PAGE_BUDGET = 2 * MIB  # the default max_trajectory_page_bytes
RSS_GROWTH_BOUND = 64 * MIB


async def inspect_trajectory_cli(target: str, session_id: str) -> str:
    """``admission-service inspect SESSION_ID --trajectory``, the installed command, as an
    operator runs it (a default gRPC client: 4 MiB receive limit)."""
    done = await asyncio.create_subprocess_exec(
        str(SERVICE_BIN),
        "inspect",
        session_id,
        "--trajectory",
        "--target",
        target,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(done.communicate(), 300)
    assert done.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.slow
async def test_a_large_prompt_and_tool_set_stored_once_are_carried_once_per_page(
    database_url: str, tmp_path: Path
) -> None:
    # Stored once, 200 tiny steps: every entry used to repeat the 512 KiB prompt and the 1 MiB
    # of tools (page_size 200: 421 MB in one response, server RSS +1.96 GiB; the default page
    # 106 MB, refused by default clients and by the CLI).
    service = ServiceProcess(database_url, tmp_path / "serve.log")  # default PAS_WORKERS
    await service.start()
    try:
        prompt, tools = "p" * (512 * 1024), big_tools(MIB)
        async with grpc.aio.insecure_channel(service.target, options=CHANNEL_OPTIONS) as channel:
            stub = async_stub(channel)
            session_id = await create_session(stub)
            for step in range(1, 201):
                await admit(stub, session_id, prompt, step, tools=tools)

            before = peak = service.rss()
            reading = asyncio.create_task(pages(stub, session_id, page_size=200))
            while not reading.done():
                peak = max(peak, service.rss())
                await asyncio.sleep(0.01)
            answered = reading.result()
            peak = max(peak, service.rss())
        async with grpc.aio.insecure_channel(service.target) as default:  # 4 MiB receive limit
            default_pages = await pages(async_stub(default), session_id)
        printed = await inspect_trajectory_cli(service.target, session_id)
    finally:
        await service.stop()

    sizes = [page.ByteSize() for page in answered]
    assert all(size < PAGE_BUDGET for size in sizes), sizes
    assert sum(len(page.entries) for page in answered) == 200
    assert peak - before < RSS_GROWTH_BOUND, (before, peak)
    # Each page carries the prompt and the tool set once; every entry names them.
    whole = Trajectory()
    for page in answered:
        assert [p.text for p in page.system_prompts] == [prompt]
        assert [list(t.tools) for t in page.tool_sets] == [tools]
        whole.add(page)
    assert [e.request_index for e in whole.entries] == list(range(200))
    for entry in whole.entries:
        assert whole.effective_prompt(entry) == prompt
        assert whole.tools(entry.header.prompt) == tools
    assert sum(len(page.entries) for page in default_pages) == 200
    assert all(page.ByteSize() < PAGE_BUDGET for page in default_pages)
    assert printed.rstrip().endswith("(200 requests)")
    assert printed.count("\nrequest ") == 200


async def test_a_32_kb_prompt_changed_60_times_pages_within_the_budget_and_prints(
    api: ApiClient,
) -> None:
    # 32 KB x 60 changes: each entry names its prompt and the previous one; the CLI printed
    # nothing before (a 3.9 MB page of 50 entries, over the default 4 MiB with the rest).
    stub = api.stub
    session_id = await create_session(stub)
    prompts = [f"prompt {step}\n" + "c" * 32_000 for step in range(60)]
    for step, prompt in enumerate(prompts, start=1):
        await admit(stub, session_id, prompt, step)

    answered = await pages(stub, session_id)
    assert all(page.ByteSize() < PAGE_BUDGET for page in answered)
    entries = await trajectory(stub, session_id)
    assert [e.effective_prompt.text for e in entries] == prompts
    assert [e.change.previous.system_prompt for e in entries[1:]] == prompts[:-1]
    # A page carries a prompt once, however many entries name it (as effective or previous).
    for page in answered:
        ids = [p.id for p in page.system_prompts]
        assert len(ids) == len(set(ids))

    printed = await inspect_trajectory_cli(api.server.target, session_id)
    assert printed.rstrip().endswith("(60 requests)")
    assert "  prompt  seq" in printed and '"prompt 59\\ncccc' in printed


@pytest.mark.slow
async def test_a_long_session_pages_through_grpc_and_the_cli(api: ApiClient) -> None:
    # 2 600 steps, the prompt changing every 100: every page within the budget and the page
    # size, all of it reachable by the default page size and by the CLI.
    stub = api.stub
    session_id = await create_session(stub)
    steps = 2600
    for step in range(1, steps + 1):
        await admit(stub, session_id, f"prompt {step // 100}", step)

    answered = await pages(stub, session_id)
    assert all(len(page.entries) <= 50 and page.ByteSize() < PAGE_BUDGET for page in answered)
    whole = Trajectory()
    for page in answered:
        whole.add(page)
    assert [e.request_index for e in whole.entries] == list(range(steps))
    assert len(whole.system_prompts) == steps // 100 + 1
    assert [whole.effective_prompt(e) for e in whole.entries[::100]] == [
        f"prompt {(1 + 100 * i) // 100}" for i in range(steps // 100)
    ]
    printed = await inspect_trajectory_cli(api.server.target, session_id)
    assert printed.rstrip().endswith(f"({steps} requests)")
