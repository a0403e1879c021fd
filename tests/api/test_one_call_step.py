"""One call per step (issue 14): an Admit carrying ``previous_output`` records that output and
admits the next step in one transaction, over the real server and real PostgreSQL.

The reference is the two-call loop it replaces: Record of the output, then Admit. Both are run
side by side on two sessions with the same history and must leave the same surface, log and
ledger; every guarantee of a mutation (nothing committed on refusal or cancellation, request_id
replays, expected_revision) must hold for the combined call as a whole.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import grpc
import pytest
from admission_service.api.server import RunningServer, start_server
from admission_service.app.hooks import Phase
from admission_service.config import Settings
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from .guarantees_support import (
    PausingHooks,
    admit_request,
    all_events,
    assistant,
    audit,
    error_info,
    snapshot,
    violated_fields,
)

if TYPE_CHECKING:
    Stub: TypeAlias = api_grpc.AdmissionServiceAsyncStub
USAGE = pb.Usage(input_tokens=1200, output_tokens=40, cache_read_tokens=1000)


@pytest.fixture(scope="module")
def hooks() -> PausingHooks:
    return PausingHooks()


@pytest.fixture(scope="module")
async def server(database_url: str, hooks: PausingHooks) -> AsyncIterator[RunningServer]:
    settings = Settings(listen="127.0.0.1:0", database_url=database_url, migrate_on_start=False)
    running = await start_server(settings, hooks=hooks)
    yield running
    await running.stop(0)


@pytest.fixture(scope="module")
async def stub(server: RunningServer) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield cast("Stub", api_grpc.AdmissionServiceStub(channel))


def result(call_id: str, text: str) -> pb.ToolResult:
    return pb.ToolResult(call_id=call_id, content=[pb.ContentBlock(text=pb.TextBlock(text=text))])


def output(admission_id: str, *, call: str = "c1") -> api.StepOutput:
    """The model asked for one tool call, the tool answered, the provider reported usage."""
    return api.StepOutput(
        admission_id=admission_id,
        assistant=assistant("reading the file", call),
        tool_results=[result(call, "file contents")],
        usage=USAGE,
    )


async def admitted_session(stub: Stub) -> tuple[str, str]:
    """A session whose first step is admitted and awaiting its output."""
    session_id = f"one-{uuid.uuid4().hex}"
    await stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
    first = await stub.Admit(admit_request(session_id, "A", "hello"))
    return session_id, first.admission_id


def next_step(session_id: str, **fields: Any) -> api.AdmitRequest:
    return admit_request(session_id, "A", "and now?", step=1, **fields)


def comparable(events: list[pb.Event]) -> list[bytes]:
    """The log without what differs between two sessions by construction (admission ids,
    commit times)."""
    out = []
    for event in events:
        copy = pb.Event()
        copy.CopyFrom(event)
        copy.ClearField("admission_id")
        copy.ClearField("commit_time")
        out.append(copy.SerializeToString(deterministic=True))
    return out


async def test_one_call_leaves_what_record_then_admit_leaves(stub: Stub) -> None:
    two_calls, first_a = await admitted_session(stub)
    one_call, first_b = await admitted_session(stub)

    recorded = await stub.Record(
        api.RecordRequest(
            session_id=two_calls,
            admission_id=first_a,
            assistant=assistant("reading the file", "c1"),
            tool_results=[result("c1", "file contents")],
            usage=USAGE,
        )
    )
    separate = await stub.Admit(next_step(two_calls))
    combined = await stub.Admit(next_step(one_call, previous_output=output(first_b)))

    assert combined.HasField("recorded") and not separate.HasField("recorded")
    assert combined.recorded == recorded
    assert combined.revision == separate.revision == 3
    assert combined.request == separate.request
    assert combined.forecast == separate.forecast
    assert combined.effective_prompt == separate.effective_prompt
    assert list(combined.user_seqs) == list(separate.user_seqs)
    assert comparable(await all_events(stub, one_call)) == comparable(
        await all_events(stub, two_calls)
    )
    inspected = [
        await stub.Inspect(api.InspectRequest(session_id=sid)) for sid in (two_calls, one_call)
    ]
    assert inspected[0].request == inspected[1].request
    assert [(e.attempt, e.forecast, e.observed) for e in inspected[0].ledger] == [
        (e.attempt, e.forecast, e.observed) for e in inspected[1].ledger
    ]
    # The usage landed on the admission it answers, beside that admission's forecast.
    answered = [e for e in inspected[1].ledger if e.admission_id == first_b]
    assert answered and answered[0].observed.input_tokens == USAGE.input_tokens
    await audit(stub, one_call)


async def test_the_loop_continues_with_one_call_per_step(stub: Stub) -> None:
    session_id, admission_id = await admitted_session(stub)
    for step in range(1, 6):
        response = await stub.Admit(
            admit_request(
                session_id,
                "A",
                f"step {step}",
                step=step,
                previous_output=output(admission_id, call=f"c{step}"),
            )
        )
        admission_id = response.admission_id
        assert response.recorded.assistant_seq < response.user_seqs[0]
    # The last step's output goes in with Record, as the turn ends.
    await stub.Record(
        api.RecordRequest(
            session_id=session_id, admission_id=admission_id, assistant=assistant("done")
        )
    )
    log = await audit(stub, session_id)
    assert len(log.derived_messages()) == 1 + 1 + 5 * 3 + 1  # prompt, users, outputs, answer


@pytest.mark.parametrize(
    ("bad_output", "field", "reason"),
    [
        (
            lambda aid: api.StepOutput(
                admission_id=aid, tool_results=[result("nobody-asked", "x")]
            ),
            "previous_output.tool_results[0].call_id",
            "UNKNOWN_TOOL_CALL",
        ),
        (
            lambda aid: api.StepOutput(
                admission_id=aid,
                assistant=pb.Message(
                    role=pb.MESSAGE_ROLE_USER,
                    content=[pb.ContentBlock(text=pb.TextBlock(text="x"))],
                ),
            ),
            "previous_output.assistant.role",
            "INVALID_FIELD",
        ),
        (
            lambda aid: api.StepOutput(admission_id=aid),
            "previous_output.assistant",
            "INVALID_FIELD",
        ),
        (
            lambda aid: api.StepOutput(assistant=assistant("x")),
            "previous_output.admission_id",
            "INVALID_FIELD",
        ),
    ],
)
async def test_a_refused_output_commits_nothing_and_names_the_field(
    stub: Stub, bad_output: Callable[[str], api.StepOutput], field: str, reason: str
) -> None:
    session_id, admission_id = await admitted_session(stub)
    before = await snapshot(stub, session_id)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Admit(next_step(session_id, previous_output=bad_output(admission_id)))
    assert failure.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(failure.value).reason == reason
    assert violated_fields(failure.value) == [field]
    assert await snapshot(stub, session_id) == before
    # Still serving the session: the corrected call goes through.
    await stub.Admit(next_step(session_id, previous_output=output(admission_id)))
    await audit(stub, session_id)


async def test_an_output_for_an_unknown_admission_commits_nothing(stub: Stub) -> None:
    session_id, _ = await admitted_session(stub)
    before = await snapshot(stub, session_id)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Admit(next_step(session_id, previous_output=output("no-such-admission")))
    assert failure.value.code() is grpc.StatusCode.NOT_FOUND
    assert await snapshot(stub, session_id) == before


async def test_a_refused_admission_records_no_output(stub: Stub) -> None:
    """The output is valid and written inside the transaction; the admission after it fails
    (an Anthropic Messages body cannot carry a system update right after an assistant turn):
    the output must not be committed either."""
    session_id, admission_id = await admitted_session(stub)
    before = await snapshot(stub, session_id)
    refused = admit_request(
        session_id,
        "A changed prompt",
        step=1,
        wire_format=pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
        previous_output=api.StepOutput(admission_id=admission_id, assistant=assistant("done")),
    )
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Admit(refused)
    assert failure.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert await snapshot(stub, session_id) == before


async def test_a_refused_admission_argument_records_no_output(stub: Stub) -> None:
    session_id, admission_id = await admitted_session(stub)
    before = await snapshot(stub, session_id)
    bad = next_step(session_id, previous_output=output(admission_id))
    bad.users[0].role = pb.MESSAGE_ROLE_ASSISTANT
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Admit(bad)
    assert failure.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(failure.value) == ["users[0].role"]
    assert await snapshot(stub, session_id) == before


async def test_expected_revision_applies_to_the_whole_call(stub: Stub) -> None:
    session_id, admission_id = await admitted_session(stub)
    before = await snapshot(stub, session_id)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Admit(
            next_step(session_id, previous_output=output(admission_id), expected_revision=0)
        )
    assert failure.value.code() is grpc.StatusCode.ABORTED
    assert error_info(failure.value).reason == "REVISION_MISMATCH"
    assert await snapshot(stub, session_id) == before
    ok = await stub.Admit(
        next_step(session_id, previous_output=output(admission_id), expected_revision=1)
    )
    assert (ok.recorded.revision, ok.revision) == (2, 3)


async def test_a_repeated_request_id_replays_byte_for_byte(stub: Stub) -> None:
    session_id, admission_id = await admitted_session(stub)
    request = next_step(
        session_id, previous_output=output(admission_id), request_id=str(uuid.uuid4())
    )
    first = await stub.Admit(request)
    committed = await snapshot(stub, session_id)
    again = await stub.Admit(request)
    assert again.SerializeToString(deterministic=True) == first.SerializeToString(
        deterministic=True
    )
    assert await snapshot(stub, session_id) == committed
    changed = api.AdmitRequest()
    changed.CopyFrom(request)
    changed.previous_output.usage.output_tokens += 1
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Admit(changed)
    assert error_info(failure.value).reason == "REQUEST_ID_REUSED"


async def test_validate_only_answers_and_commits_nothing(stub: Stub) -> None:
    session_id, admission_id = await admitted_session(stub)
    before = await snapshot(stub, session_id)
    answer = await stub.Admit(
        next_step(session_id, previous_output=output(admission_id), validate_only=True)
    )
    assert answer.admission_id == "" and answer.HasField("recorded")
    assert await snapshot(stub, session_id) == before
    real = await stub.Admit(next_step(session_id, previous_output=output(admission_id)))
    assert real.request == answer.request


PAUSES = [
    (Phase.LOAD, 1),
    (Phase.VALIDATE, 1),  # recording the output
    (Phase.PROJECT, 1),
    (Phase.DERIVE, 1),
    (Phase.VALIDATE, 2),  # admitting the step, after the output's writes were sent
    (Phase.PROJECT, 2),
    (Phase.DERIVE, 2),
    (Phase.COMMIT, 1),
]


@pytest.mark.parametrize(("phase", "occurrence"), PAUSES)
@pytest.mark.parametrize("how", ["cancel", "deadline"])
async def test_cancellation_at_any_phase_commits_nothing(
    stub: Stub, hooks: PausingHooks, phase: Phase, occurrence: int, how: str
) -> None:
    session_id, admission_id = await admitted_session(stub)
    before = await snapshot(stub, session_id)
    request = next_step(session_id, previous_output=output(admission_id))
    hooks.arm("Admit", phase, occurrence)
    if how == "cancel":
        call = stub.Admit(request)
        await asyncio.wait_for(hooks.reached_phase.wait(), 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    else:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await stub.Admit(request, timeout=0.5)
        assert failure.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert hooks.reached_phase.is_set()
    await asyncio.wait_for(hooks.unwound.wait(), 10)
    assert await snapshot(stub, session_id) == before
    done = await stub.Admit(request, timeout=10)
    assert done.recorded.revision == cast("int", before[0]) + 1
    await audit(stub, session_id)
