"""Helpers for the API tests: starting servers, reading rich errors, building requests."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

import grpc
from admission_service.api.error_status import KNOWN_REASONS
from admission_service.api.server import RunningServer, start_server
from admission_service.app.hooks import NO_HOOKS, PhaseHooks
from admission_service.config import Settings
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

DETAILS_KEY = "grpc-status-details-bin"
ERROR_DOMAIN = "promptadmission.v1"


@dataclass(slots=True)
class ApiClient:
    """A started server and a channel to it."""

    server: RunningServer
    channel: grpc.aio.Channel
    stub: api_grpc.AdmissionServiceAsyncStub

    async def close(self) -> None:
        await self.channel.close(None)
        await self.server.stop(0)


class StartApi(Protocol):
    """The ``start_api`` fixture: ``await start_api(hooks=..., **settings_overrides)``."""

    async def __call__(self, *, hooks: PhaseHooks = NO_HOOKS, **settings: Any) -> ApiClient: ...


def api_settings(database_url: str, /, **overrides: Any) -> Settings:
    """Settings for an in-process test server: loopback, a free port, the test database
    (already migrated by the ``database_url`` fixture), a small pool."""
    base = Settings(
        listen="127.0.0.1:0",
        database_url=database_url,
        migrate_on_start=False,
        db_pool_size=4,
        db_max_overflow=4,
        shutdown_grace_seconds=5.0,
    )
    return replace(base, **overrides)


# The deadline of a test's call that sets none: a call must fail, never hang the run (issue 21).
# Far above any legit call's time on a loaded machine; a test that needs longer says so.
DEFAULT_CALL_SECONDS = 120.0


class DefaultDeadline(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    """Gives every call without a deadline ``DEFAULT_CALL_SECONDS``."""

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_deadline(details), request)


class DefaultStreamDeadline(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    """``DefaultDeadline`` for server-streaming calls (grpc.aio files an interceptor under one
    kind of call only)."""

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_deadline(details), request)


def _with_deadline(details: Any) -> Any:
    if details.timeout is None:
        return details._replace(timeout=DEFAULT_CALL_SECONDS)
    return details


class MetadataInterceptor(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    """Adds fixed metadata (for example ``authorization: Bearer …``) to every call."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = tuple(details.metadata or ()) + self._metadata
        return await continuation(details._replace(metadata=metadata), request)


class StreamMetadataInterceptor(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    """``MetadataInterceptor`` for server-streaming calls."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = tuple(details.metadata or ()) + self._metadata
        return await continuation(details._replace(metadata=metadata), request)


def channel_with_metadata(target: str, *metadata: tuple[str, str]) -> grpc.aio.Channel:
    """A plaintext channel to ``target`` that sends ``metadata`` with every call."""
    return grpc.aio.insecure_channel(
        target,
        interceptors=[
            MetadataInterceptor(metadata),  # type: ignore[list-item]
            StreamMetadataInterceptor(metadata),  # type: ignore[list-item]
            DefaultDeadline(),  # type: ignore[list-item]
            DefaultStreamDeadline(),  # type: ignore[list-item]
        ],
    )


def async_stub(channel: grpc.aio.Channel) -> api_grpc.AdmissionServiceAsyncStub:
    return cast("api_grpc.AdmissionServiceAsyncStub", api_grpc.AdmissionServiceStub(channel))


def connect(server: RunningServer) -> ApiClient:
    channel = grpc.aio.insecure_channel(
        server.target,
        interceptors=[DefaultDeadline(), DefaultStreamDeadline()],  # type: ignore[list-item]
    )
    return ApiClient(server, channel, async_stub(channel))


async def start_client(
    database_url: str, /, *, hooks: PhaseHooks = NO_HOOKS, **settings: Any
) -> ApiClient:
    """A server on ``database_url`` (``settings`` may override it, and any other setting)."""
    server = await start_server(api_settings(database_url, **settings), hooks=hooks)
    return connect(server)


def new_session_id() -> str:
    return f"api-{uuid.uuid4().hex}"


# ---- rich errors --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RichError:
    code: grpc.StatusCode
    message: str
    status: Any  # google.rpc.Status
    error_infos: list[Any]  # google.rpc.ErrorInfo
    bad_requests: list[Any]  # google.rpc.BadRequest

    @property
    def reason(self) -> str:
        assert len(self.error_infos) == 1, f"expected one ErrorInfo, got {self.error_infos}"
        reason: str = self.error_infos[0].reason
        return reason

    @property
    def violated_fields(self) -> list[str]:
        return [v.field for request in self.bad_requests for v in request.field_violations]


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
_NUMBER = re.compile(r"(?<![\w.\[])-?\d+(?![\w\]])")


def message_values(message: str) -> set[str]:
    """The values an error message quotes ('…') or counts (numbers outside field paths such as
    ``users[2]``): each must also be in ``ErrorInfo.metadata``, for clients that act on them."""
    quoted = set(_QUOTED.findall(message))
    rest = _QUOTED.sub("", message)
    return quoted | set(_NUMBER.findall(rest))


def rich_error(error: grpc.aio.AioRpcError) -> RichError:
    """The ``google.rpc.Status`` an error carries, checked against the call's own status."""
    raw: list[bytes] = []
    trailers: Any = error.trailing_metadata() or ()  # grpc.aio.Metadata; the stubs disagree
    for key, value in trailers:
        if key == DETAILS_KEY:
            assert isinstance(value, bytes)
            raw.append(value)
    assert len(raw) == 1, f"expected one {DETAILS_KEY} trailer, got {len(raw)}"
    status = status_pb2.Status.FromString(raw[0])
    assert status.code == error.code().value[0]
    assert status.message == error.details()
    infos, bad_requests = [], []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            assert info.domain == ERROR_DOMAIN
            infos.append(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            bad_requests.append(bad_request)
    for info in infos:
        assert info.reason in KNOWN_REASONS, f"{info.reason} is not an ErrorReason value"
        assert status.message.startswith(f"{info.reason}: "), status.message
        # a value quoted with !r shows escaped (control characters, backslashes)
        shown = {form for v in info.metadata.values() for form in (v, repr(v)[1:-1])}
        missing = message_values(status.message) - shown
        assert not missing, f"{sorted(missing)} of {status.message!r} not in {info.metadata}"
    return RichError(error.code(), error.details() or "", status, infos, bad_requests)


# ---- requests -----------------------------------------------------------------------------

IN_HISTORY_ROUTE = pb.Route(provider="deepseek", model="deepseek-flash", context_window=128_000)
REPLACE_ROUTE = pb.Route(provider="openai", model="gpt-test", context_window=128_000)


def user(text: str) -> pb.Message:
    return pb.Message(
        role=pb.MESSAGE_ROLE_USER, content=[pb.ContentBlock(text=pb.TextBlock(text=text))]
    )


def admit_request(
    session_id: str,
    prompt: str,
    *users: str,
    turn: int = 0,
    step: int = 0,
    route: pb.Route | None = IN_HISTORY_ROUTE,
    **fields: Any,
) -> api.AdmitRequest:
    return api.AdmitRequest(
        session_id=session_id,
        turn=turn,
        step=step,
        rendered_prompt=prompt,
        route=route,
        users=[user(text) for text in users],
        **fields,
    )


async def create_session(stub: api_grpc.AdmissionServiceAsyncStub) -> str:
    session_id = new_session_id()
    await stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
    return session_id


def tool_step(
    session_id: str, step: int, admission_id: str, size: int, route: pb.Route
) -> api.AdmitRequest:
    """An Admit of turn 1's ``step`` that records the previous step's tool call (``admission_id``)
    and its result of ``size`` characters (one letter, by step)."""
    call_id = f"call_{step}"
    call = pb.ToolCallBlock(call_id=call_id, name="read", arguments_json='{"path":"f"}')
    result = pb.TextBlock(text=chr(97 + step) * size)
    return api.AdmitRequest(
        session_id=session_id,
        turn=1,
        step=step,
        rendered_prompt="You read files.",
        route=route,
        previous_output=api.StepOutput(
            admission_id=admission_id,
            assistant=pb.Message(
                role=pb.MESSAGE_ROLE_ASSISTANT, content=[pb.ContentBlock(tool_call=call)]
            ),
            tool_results=[pb.ToolResult(call_id=call_id, content=[pb.ContentBlock(text=result)])],
        ),
    )


async def grown_by_tool_outputs(
    client: Any, route: pb.Route, outputs: int, size: int
) -> tuple[str, api.AdmitResponse]:
    """A new session on ``route``: a first step asking to read files, then ``outputs - 1``
    steps each answering the previous one's tool call with a result of ``size`` characters,
    each a DELTA (only its new output comes back). Its id and the last response: the next
    ``tool_step`` (the ``outputs``-th result) makes its FULL request ``outputs * size``
    characters of results. ``client``: a ``promptadmission.AdmissionClient``."""
    session_id = (await client.create_session()).session.session_id
    step = await client.admit(
        api.AdmitRequest(
            session_id=session_id,
            turn=1,
            step=0,
            rendered_prompt="You read files.",
            route=route,
            users=[
                pb.Message(
                    role=pb.MESSAGE_ROLE_USER,
                    content=[pb.ContentBlock(text=pb.TextBlock(text="Read the files."))],
                )
            ],
        )
    )
    for number in range(1, outputs):
        request = tool_step(session_id, number, step.admission_id, size, route)
        request.view = pb.REQUEST_VIEW_DELTA
        request.held_prefix.CopyFrom(
            pb.HeldPrefix(message_count=step.request.total_messages, digest=step.request.digest)
        )
        step = await client.admit(request)
    return session_id, step
