"""The Python client against the real server: typed errors, same-request_id retries (faults are
injected by a client interceptor beneath the client, around real calls), deadlines and the
bearer token, in both the asyncio and the blocking flavour."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, cast

import grpc
import grpc.aio
import pytest
from promptadmission import (
    ERROR_DOMAIN,
    AdmissionClient,
    AdmissionError,
    FieldViolation,
    Reason,
    RetryPolicy,
    SyncAdmissionClient,
    assistant_message,
    user_message,
    with_request_id,
)
from promptadmission.v1 import admission_service_pb2 as pb
from promptadmission.v1 import session_pb2

if TYPE_CHECKING:  # generic only in grpc-stubs
    _AioInterceptor = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
    _SyncInterceptor = grpc.UnaryUnaryClientInterceptor[Any, Any]
else:
    _AioInterceptor = grpc.aio.UnaryUnaryClientInterceptor
    _SyncInterceptor = grpc.UnaryUnaryClientInterceptor

Action = Literal["pass", "lose", "fail"]
FAST_RETRY = RetryPolicy(initial_backoff=0.001, max_backoff=0.01)
LOST_ONCE: Callable[[int], Action] = lambda attempt: "lose" if attempt == 1 else "pass"  # noqa: E731


def admit_request(session_id: str) -> pb.AdmitRequest:
    return pb.AdmitRequest(
        session_id=session_id,
        turn=1,
        step=1,
        rendered_prompt="You are terse.",
        route=session_pb2.Route(provider="deepseek", model="deepseek-flash"),
        users=[user_message("Hello")],
    )


def new_session_id() -> str:
    return f"py-{uuid.uuid4()}"


class _InjectedUnavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "injected: connection refused"

    def trailing_metadata(self) -> Any:
        return ()


def _aio_unavailable() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details="injected: response lost",
        debug_error_string=None,
    )


class _Recorder:
    """Records each attempt's request_id and metadata; ``plan(attempt)`` says whether to let it
    through, fail it before it is sent, or send it and then lose the response."""

    def __init__(self, plan: Callable[[int], Action]) -> None:
        self.plan = plan
        self.request_ids: list[str] = []
        self.metadata: list[dict[str, Any]] = []

    def attempt(self, details: Any, request: Any) -> Action:
        self.request_ids.append(getattr(request, "request_id", ""))
        self.metadata.append(dict(details.metadata or ()))
        return self.plan(len(self.request_ids))


class AsyncFaults(_Recorder, _AioInterceptor):
    async def intercept_unary_unary(
        self,
        continuation: Callable[[Any, Any], Awaitable[Any]],
        client_call_details: Any,
        request: Any,
    ) -> Any:
        action = self.attempt(client_call_details, request)
        if action == "fail":
            raise _aio_unavailable()
        call = await continuation(client_call_details, request)
        if action == "lose":
            await call
            raise _aio_unavailable()
        return call


class SyncFaults(_Recorder, _SyncInterceptor):
    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], client_call_details: Any, request: Any
    ) -> Any:
        action = self.attempt(client_call_details, request)
        if action == "fail":
            raise _InjectedUnavailable()
        outcome = continuation(client_call_details, request)
        if action == "lose":
            outcome.result()
            raise _InjectedUnavailable()
        return outcome


def faulty_channel(target: str, faults: AsyncFaults) -> grpc.aio.Channel:
    # grpc-stubs types aio interceptors as a placeholder that must be cast.
    return grpc.aio.insecure_channel(target, interceptors=[cast(Any, faults)])


@pytest.fixture
def sync_client(server_target: str) -> Iterator[SyncAdmissionClient]:
    with SyncAdmissionClient(server_target) as client:
        yield client


async def test_admits_and_inspects_with_the_catalog_capability(server_target: str) -> None:
    session_id = new_session_id()
    async with AdmissionClient(server_target) as client:
        created = await client.create_session(pb.CreateSessionRequest(session_id=session_id))
        admitted = await client.admit(admit_request(session_id))
        view = await client.inspect(pb.InspectRequest(session_id=session_id))

    assert created.session.session_id == session_id
    assert admitted.system_prompt_update == session_pb2.SYSTEM_PROMPT_UPDATE_IN_HISTORY
    assert admitted.capability_source == session_pb2.CAPABILITY_SOURCE_CATALOG
    assert view.effective_prompt.text == "You are terse."
    assert view.revision == admitted.revision


def test_the_blocking_client_lists_the_trajectory(sync_client: SyncAdmissionClient) -> None:
    session_id = new_session_id()
    sync_client.create_session(pb.CreateSessionRequest(session_id=session_id))
    sync_client.admit(admit_request(session_id))
    trajectory = sync_client.all_trajectory(session_id)
    (entry,) = trajectory.entries
    # By reference: the entry names the prompt, the trajectory holds its text once.
    assert entry.effective_prompt.text == "" and entry.header.prompt.system_prompt == ""
    assert trajectory.system_prompt(entry.header.prompt) == "You are terse."
    assert trajectory.effective_prompt(entry) == "You are terse."
    assert list(trajectory.system_prompts.values()) == ["You are terse."]
    assert trajectory.resolved(entry).header.prompt.system_prompt == "You are terse."


async def test_errors_carry_the_error_info_reason_and_field_violations(
    server_target: str,
) -> None:
    session_id = new_session_id()
    async with AdmissionClient(server_target) as client:
        with pytest.raises(AdmissionError) as missing:
            await client.get_session(pb.GetSessionRequest(session_id=session_id))
        await client.create_session(pb.CreateSessionRequest(session_id=session_id))
        request = admit_request(session_id)
        request.ClearField("route")
        with pytest.raises(AdmissionError) as invalid:
            await client.admit(request)

    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    assert missing.value.reason == Reason.SESSION_NOT_FOUND
    assert missing.value.domain == ERROR_DOMAIN
    assert missing.value.metadata == {"session_id": session_id}
    assert not missing.value.retryable
    assert invalid.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert invalid.value.reason == Reason.INVALID_FIELD
    assert invalid.value.field_violations == (FieldViolation("route", "is required"),)


async def test_a_lost_response_is_retried_with_the_same_request_id_and_commits_once(
    server_target: str,
) -> None:
    session_id = new_session_id()
    faults = AsyncFaults(LOST_ONCE)
    request = admit_request(session_id)
    async with AdmissionClient(server_target) as client:
        await client.create_session(pb.CreateSessionRequest(session_id=session_id))
        channel = faulty_channel(server_target, faults)
        async with AdmissionClient(channel=channel, retry=FAST_RETRY) as faulty:
            admitted = await faulty.admit(request)
        await channel.close(None)
        events = await client.all_events(session_id)

    assert len(faults.request_ids) == 2
    assert faults.request_ids[0] == faults.request_ids[1]
    assert uuid.UUID(faults.request_ids[0]).version == 4
    assert request.request_id == "", "the caller's request is untouched"
    assert [event.admission_id for event in events] == [admitted.admission_id] * 4


async def test_a_revision_mismatch_is_not_retried(server_target: str) -> None:
    session_id = new_session_id()
    faults = AsyncFaults(lambda attempt: "pass")
    request = admit_request(session_id)
    request.expected_revision = 999
    channel = faulty_channel(server_target, faults)
    async with AdmissionClient(channel=channel, retry=FAST_RETRY) as client:
        await client.create_session(pb.CreateSessionRequest(session_id=session_id))
        with pytest.raises(AdmissionError) as aborted:
            await client.admit(request)
    await channel.close(None)

    assert aborted.value.code == grpc.StatusCode.ABORTED
    assert aborted.value.reason == Reason.REVISION_MISMATCH
    assert not aborted.value.retryable
    assert len(faults.request_ids) == 2  # CreateSession, then one Admit


async def test_retries_give_up_at_the_deadline_and_send_the_bearer_token(
    server_target: str,
) -> None:
    faults = AsyncFaults(lambda attempt: "fail")
    channel = faulty_channel(server_target, faults)
    retry = RetryPolicy(max_attempts=100, initial_backoff=0.02, max_backoff=0.05)
    started = time.monotonic()
    async with AdmissionClient(channel=channel, token="s3cret", timeout=0.3, retry=retry) as client:
        with pytest.raises(AdmissionError) as unavailable:
            await client.list_sessions()
    await channel.close(None)

    assert unavailable.value.code == grpc.StatusCode.UNAVAILABLE
    assert 1 < len(faults.request_ids) < 100
    assert time.monotonic() - started < 1.0
    assert all(m.get("authorization") == "Bearer s3cret" for m in faults.metadata)
    assert all("x-pas-session" not in m for m in faults.metadata)  # about no one session


def test_the_blocking_client_retries_a_lost_response_with_the_same_request_id(
    server_target: str, sync_client: SyncAdmissionClient
) -> None:
    session_id = new_session_id()
    sync_client.create_session(pb.CreateSessionRequest(session_id=session_id))
    faults = SyncFaults(LOST_ONCE)
    channel = grpc.insecure_channel(server_target)
    with SyncAdmissionClient(
        channel=grpc.intercept_channel(channel, faults), token="t", retry=FAST_RETRY
    ) as faulty:
        admitted = faulty.admit(with_request_id(admit_request(session_id)))
    channel.close()

    assert len(faults.request_ids) == 2
    assert faults.request_ids[0] == faults.request_ids[1] != ""
    assert all(m.get("authorization") == "Bearer t" for m in faults.metadata)
    # The session it is about, for a balancer's affinity (docs/SCALING.md).
    assert all(m.get("x-pas-session") == session_id for m in faults.metadata)
    events = sync_client.all_events(session_id)
    assert [event.admission_id for event in events] == [admitted.admission_id] * 4


def test_the_blocking_client_raises_typed_errors(sync_client: SyncAdmissionClient) -> None:
    with pytest.raises(AdmissionError) as missing:
        sync_client.inspect(pb.InspectRequest(session_id=new_session_id()))

    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    assert missing.value.reason == Reason.SESSION_NOT_FOUND
    # the service's message leads with the reason; str() does not repeat it
    assert str(missing.value).startswith("NOT_FOUND: SESSION_NOT_FOUND: session ")


def test_nothing_listening_is_unavailable_without_a_reason() -> None:
    retry = RetryPolicy(max_attempts=2, initial_backoff=0.001, max_backoff=0.001)
    with (
        SyncAdmissionClient("127.0.0.1:1", timeout=2.0, retry=retry) as client,
        pytest.raises(AdmissionError) as unavailable,
    ):
        client.list_sessions()

    assert unavailable.value.code == grpc.StatusCode.UNAVAILABLE
    assert unavailable.value.reason == ""
    assert unavailable.value.retryable


def test_with_request_id_fills_a_copy_and_keeps_a_given_one() -> None:
    request = admit_request("s")
    filled = with_request_id(request)
    kept = with_request_id(filled)

    assert request.request_id == ""
    assert filled is not request
    assert uuid.UUID(filled.request_id).version == 4
    assert kept is filled


def test_retry_policy_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=0.3, multiplier=2.0)

    assert 0.05 <= policy.backoff(0) <= 0.1
    assert 0.1 <= policy.backoff(1) <= 0.2
    assert 0.15 <= policy.backoff(5) <= 0.3
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


async def test_one_call_per_step_records_the_output_and_admits_the_next_step(
    server_target: str,
) -> None:
    session_id = new_session_id()
    async with AdmissionClient(server_target) as client:
        await client.create_session(pb.CreateSessionRequest(session_id=session_id))
        step = await client.admit(admit_request(session_id))
        for number in range(2, 4):
            request = admit_request(session_id)
            request.step = number
            request.users[0].CopyFrom(user_message(f"and step {number}?"))
            request.previous_output.CopyFrom(
                pb.StepOutput(
                    admission_id=step.admission_id,
                    assistant=assistant_message(f"answer {number - 1}"),
                    usage=session_pb2.Usage(input_tokens=10, output_tokens=3),
                )
            )
            step = await client.admit(request)
            assert step.recorded.assistant_seq < step.user_seqs[0]
        inspected = await client.inspect(pb.InspectRequest(session_id=session_id))
    texts = [m.content[0].text.text for m in inspected.request.messages]
    assert texts == [
        "You are terse.",
        "Hello",
        "answer 1",
        "and step 2?",
        "answer 2",
        "and step 3?",
    ]
