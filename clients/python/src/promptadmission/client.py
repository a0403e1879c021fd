"""Thin clients over the generated ``AdmissionService`` stubs: ``AdmissionClient`` (asyncio,
``grpc.aio``) and ``SyncAdmissionClient`` (blocking), with the same methods and behaviour.

What they add to the stubs:

- a default deadline per call (``timeout``, seconds; it covers every retry of the call);
- retries of ``UNAVAILABLE`` and of ``ABORTED`` from a lost race, with exponential backoff and
  the *same* request: a mutating call without a ``request_id`` gets a fresh UUID4 one before
  the first attempt, so a retry of a call that committed but lost its response returns the
  stored response instead of committing twice (``REVISION_MISMATCH`` and
  ``STALE_COMPACTION_PLAN`` are not retried: they fail the same way until the caller re-reads);
- ``authorization: Bearer <token>`` metadata when a token is given;
- ``x-pas-session: <session_id>`` metadata on a call about one session, so that a balancer with
  session affinity (the compose nginx, docs/SCALING.md) sends a session's calls to the replica
  whose session cache knows it (a hint: any replica answers any call);
- ``AdmissionError`` (code, ErrorInfo reason and metadata, field violations) instead of
  ``grpc.RpcError``;
- ``admit_streamed`` and ``reconcile_streamed``: Admit and Reconcile for responses of any size
  (StreamAdmit, StreamReconcile), their chunks reassembled and checked against their SHA-256
  (``promptadmission.streaming``), retried like the unary calls (a retry replays the stored
  response by its ``request_id``);
- ``max_receive_message_bytes`` and ``max_send_message_bytes``: the channel's message limits
  (gRPC's defaults: 4 MiB received, unlimited sent).

The caller's request messages are never modified; a generated ``request_id`` goes on a copy.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar, cast, overload

import grpc
import grpc.aio
from google.protobuf.message import Message

from promptadmission.errors import AdmissionError
from promptadmission.streaming import reassemble
from promptadmission.trajectory import Trajectory
from promptadmission.v1 import admission_service_pb2 as pb
from promptadmission.v1 import admission_service_pb2_grpc as pb_grpc
from promptadmission.v1 import session_pb2

__all__ = [
    "DEFAULT_TARGET",
    "DEFAULT_TIMEOUT",
    "AdmissionClient",
    "RetryPolicy",
    "SyncAdmissionClient",
    "with_request_id",
]

DEFAULT_TARGET = "127.0.0.1:50051"
DEFAULT_TIMEOUT = 10.0
_EVENTS_PAGE_SIZE = 1000
_TRAJECTORY_PAGE_SIZE = 1000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a retryable failure is retried.

    ``max_attempts`` counts the first attempt (1 disables retries). The wait before retry *n*
    (0-based) is drawn from ``[cap / 2, cap]`` with ``cap = min(max_backoff, initial_backoff *
    multiplier ** n)``; no retry starts once the call's deadline would pass during the wait.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ValueError("backoffs must not be negative and multiplier must be >= 1")

    def backoff(self, retry: int) -> float:
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier**retry)
        return random.uniform(cap / 2, cap)


# The requests of the mutating RPCs: the ones with a request_id.
_M = TypeVar(
    "_M",
    pb.CreateSessionRequest,
    pb.DeleteSessionRequest,
    pb.AdmitRequest,
    pb.ReconcileRequest,
    pb.RecordRequest,
    pb.CompactRequest,
)


def with_request_id(request: _M) -> _M:
    """``request`` itself when it has a ``request_id``, else a copy with a fresh UUID4 one."""
    if request.request_id:
        return request
    copy = type(request)()
    copy.CopyFrom(request)
    copy.request_id = str(uuid.uuid4())
    return copy


class _Settings:
    """What both flavours share: deadline, retry policy and call metadata."""

    def __init__(
        self,
        token: str | None,
        timeout: float | None,
        retry: RetryPolicy,
        metadata: Sequence[tuple[str, str]],
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be positive (or None for no deadline)")
        self.timeout = timeout
        self.retry = retry
        call_metadata = [(key.lower(), value) for key, value in metadata]
        if token:
            call_metadata.append(("authorization", f"Bearer {token}"))
        self.metadata: tuple[tuple[str, str], ...] = tuple(call_metadata)


SESSION_HEADER = "x-pas-session"


def session_affinity(request: Message) -> tuple[tuple[str, str], ...]:
    """The metadata naming the session a request is about, if it is about one (a streamed
    call's, StreamAdmitRequest's, is its wrapped request's)."""
    inner = getattr(request, "request", None)
    session_id = getattr(inner if isinstance(inner, Message) else request, "session_id", "")
    return ((SESSION_HEADER, session_id),) if isinstance(session_id, str) and session_id else ()


class _Attempts:
    """The call strategy of both flavours, without I/O: the request (a mutating one with its
    ``request_id``), each attempt's timeout within the call's deadline and metadata, and after
    a failure either the wait before the next attempt or the ``AdmissionError`` to raise."""

    def __init__(
        self,
        client: _Client[Any],
        rpc: _Rpc[Any, Any] | _Streamed[Any, Any],
        request: Any,
        timeout: float | None,
    ) -> None:
        settings = client._settings
        budget = settings.timeout if timeout is None else timeout
        self._deadline = None if budget is None else time.monotonic() + budget
        self._retry = settings.retry
        self._stub_method = getattr(client.stub, rpc.stub_method)
        self._request = rpc.prepare(request)
        self._metadata = settings.metadata + session_affinity(self._request)
        self._attempt = 0
        # A streamed RPC's chunks to its response; None: a unary RPC.
        self.assemble = rpc.assemble if isinstance(rpc, _Streamed) else None

    def call(self) -> Any:
        """Starts the next attempt: the stub's response (an awaitable of it on grpc.aio; for a
        streamed RPC, an iterator of its chunks, asynchronous on grpc.aio)."""
        self._attempt += 1
        timeout = None
        if self._deadline is not None:
            timeout = max(self._deadline - time.monotonic(), 0.001)
        return self._stub_method(self._request, timeout=timeout, metadata=self._metadata)

    def wait_after(self, exc: grpc.RpcError) -> float:
        """Seconds to wait before the next attempt; raises the typed error when it is final."""
        error = AdmissionError.from_rpc_error(exc)
        if error.retryable and self._attempt < self._retry.max_attempts:
            wait = self._retry.backoff(self._attempt - 1)
            if self._deadline is None or time.monotonic() + wait < self._deadline:
                return wait
        raise error from exc


_Req = TypeVar("_Req", bound=Message)
_Resp = TypeVar("_Resp", bound=Message)
_Channel = TypeVar("_Channel", grpc.Channel, grpc.aio.Channel)
_ReqIn = TypeVar("_ReqIn", bound=Message, contravariant=True)
_RespOut = TypeVar("_RespOut", bound=Message, covariant=True)


class _AsyncCall(Protocol[_ReqIn, _RespOut]):
    def __call__(
        self, request: _ReqIn | None = None, /, *, timeout: float | None = None
    ) -> Awaitable[_RespOut]: ...


class _SyncCall(Protocol[_ReqIn, _RespOut]):
    def __call__(
        self, request: _ReqIn | None = None, /, *, timeout: float | None = None
    ) -> _RespOut: ...


@dataclass(frozen=True, slots=True)
class _Rpc(Generic[_Req, _Resp]):
    """One RPC as a client method: ``client.admit(request, timeout=...)`` on either flavour,
    awaitable on ``AdmissionClient``. ``request`` may be omitted (the empty request: the
    service names the required fields); a mutating RPC's request gets a ``request_id``."""

    stub_method: str
    request_type: type[_Req]
    response_type: type[_Resp]
    mutating: bool = False

    def prepare(self, request: _Req | None) -> _Req:
        request = self.request_type() if request is None else request
        return cast("_Req", with_request_id(cast("Any", request))) if self.mutating else request

    @overload
    def __get__(self, client: None, owner: type[Any]) -> _Rpc[_Req, _Resp]: ...
    @overload
    def __get__(self, client: AdmissionClient, owner: type[Any]) -> _AsyncCall[_Req, _Resp]: ...
    @overload
    def __get__(self, client: SyncAdmissionClient, owner: type[Any]) -> _SyncCall[_Req, _Resp]: ...

    def __get__(self, client: _Client[Any] | None, owner: type[Any]) -> Any:
        return self if client is None else functools.partial(client._call, self)


@dataclass(frozen=True, slots=True)
class _Streamed(Generic[_Req, _Resp]):
    """A server-streaming RPC (StreamAdmit, StreamReconcile) as a client method that takes and
    returns what its unary twin does: ``client.admit_streamed(admit_request)`` returns the
    ``AdmitResponse``, its chunks reassembled and verified."""

    stub_method: str
    request_type: type[_Req]
    wrapper_type: type[Message]
    response_type: type[_Resp]

    def prepare(self, request: _Req | None) -> Message:
        request = self.request_type() if request is None else request
        # The digest in the last chunk: the service hashes while it sends (``reassemble``).
        return self.wrapper_type(
            request=with_request_id(cast("Any", request)), sha256_in_last_chunk=True
        )

    def assemble(self, chunks: Sequence[Any]) -> _Resp:
        return reassemble(chunks, self.response_type)

    @overload
    def __get__(self, client: None, owner: type[Any]) -> _Streamed[_Req, _Resp]: ...
    @overload
    def __get__(self, client: AdmissionClient, owner: type[Any]) -> _AsyncCall[_Req, _Resp]: ...
    @overload
    def __get__(self, client: SyncAdmissionClient, owner: type[Any]) -> _SyncCall[_Req, _Resp]: ...

    def __get__(self, client: _Client[Any] | None, owner: type[Any]) -> Any:
        return self if client is None else functools.partial(client._call, self)


class _Client(Generic[_Channel]):
    """The constructor and the methods both flavours share; ``_open`` and ``_run`` are the
    flavour's own (a grpc or grpc.aio channel; the attempts of a call run blocking or awaited).

    Adding an RPC is one line here, with the generated request and response types."""

    create_session = _Rpc("CreateSession", pb.CreateSessionRequest, pb.CreateSessionResponse, True)
    get_session = _Rpc("GetSession", pb.GetSessionRequest, pb.GetSessionResponse)
    list_sessions = _Rpc("ListSessions", pb.ListSessionsRequest, pb.ListSessionsResponse)
    delete_session = _Rpc("DeleteSession", pb.DeleteSessionRequest, pb.DeleteSessionResponse, True)
    admit = _Rpc("Admit", pb.AdmitRequest, pb.AdmitResponse, True)
    reconcile = _Rpc("Reconcile", pb.ReconcileRequest, pb.ReconcileResponse, True)
    record = _Rpc("Record", pb.RecordRequest, pb.RecordResponse, True)
    plan_compaction = _Rpc("PlanCompaction", pb.PlanCompactionRequest, pb.PlanCompactionResponse)
    compact = _Rpc("Compact", pb.CompactRequest, pb.CompactResponse, True)
    inspect = _Rpc("Inspect", pb.InspectRequest, pb.InspectResponse)
    list_events = _Rpc("ListEvents", pb.ListEventsRequest, pb.ListEventsResponse)
    list_trajectory = _Rpc("ListTrajectory", pb.ListTrajectoryRequest, pb.ListTrajectoryResponse)
    admit_streamed = _Streamed(
        "StreamAdmit", pb.AdmitRequest, pb.StreamAdmitRequest, pb.AdmitResponse
    )
    reconcile_streamed = _Streamed(
        "StreamReconcile", pb.ReconcileRequest, pb.StreamReconcileRequest, pb.ReconcileResponse
    )

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        channel: _Channel | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        options: Sequence[tuple[str, str | int]] = (),
        max_receive_message_bytes: int | None = None,
        max_send_message_bytes: int | None = None,
    ) -> None:
        self._settings = _Settings(token, timeout, retry or RetryPolicy(), metadata)
        self._owns_channel = channel is None
        channel_options = list(options)
        if max_receive_message_bytes is not None:
            channel_options.append(("grpc.max_receive_message_length", max_receive_message_bytes))
        if max_send_message_bytes is not None:
            channel_options.append(("grpc.max_send_message_length", max_send_message_bytes))
        self.channel: _Channel = (
            self._open(target, credentials, channel_options) if channel is None else channel
        )
        self.stub = pb_grpc.AdmissionServiceStub(self.channel)

    def _open(
        self,
        target: str,
        credentials: grpc.ChannelCredentials | None,
        options: list[tuple[str, str | int]],
    ) -> _Channel:
        raise NotImplementedError

    def _call(
        self,
        rpc: _Rpc[Any, Any] | _Streamed[Any, Any],
        request: Any = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        return self._run(_Attempts(self, rpc, request, timeout))

    def _run(self, attempts: _Attempts) -> Any:
        """The attempts' calls and waits, blocking or awaitable."""
        raise NotImplementedError


class _EventPages:
    """The requests that read a whole event log, page by page, and what they returned."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.events: list[session_pb2.Event] = []
        self._token: str | None = ""

    def next_request(self) -> pb.ListEventsRequest | None:
        if self._token is None:
            return None
        return pb.ListEventsRequest(
            session_id=self.session_id, page_size=_EVENTS_PAGE_SIZE, page_token=self._token
        )

    def add(self, page: pb.ListEventsResponse) -> None:
        self.events.extend(page.events)
        self._token = page.next_page_token or None


class _TrajectoryPages:
    """The requests that read a whole trajectory, page by page, and what they returned."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.trajectory = Trajectory()
        self._token: str | None = ""

    def next_request(self) -> pb.ListTrajectoryRequest | None:
        if self._token is None:
            return None
        return pb.ListTrajectoryRequest(
            session_id=self.session_id, page_size=_TRAJECTORY_PAGE_SIZE, page_token=self._token
        )

    def add(self, page: pb.ListTrajectoryResponse) -> None:
        self.trajectory.add(page)
        self._token = page.next_page_token or None


class AdmissionClient(_Client[grpc.aio.Channel]):
    """Asyncio client of ``promptadmission.v1.AdmissionService``.

    ``AdmissionClient("127.0.0.1:50051", token=...)`` opens a plaintext channel (pass
    ``credentials`` for TLS, or an existing ``channel``, which the client then does not close).
    Use it as ``async with AdmissionClient(...) as client:`` or call ``close()``. Every method
    takes the request message and an optional ``timeout`` overriding the default deadline.
    """

    def _open(
        self,
        target: str,
        credentials: grpc.ChannelCredentials | None,
        options: list[tuple[str, str | int]],
    ) -> grpc.aio.Channel:
        if credentials is None:
            return grpc.aio.insecure_channel(target, options=options)
        return grpc.aio.secure_channel(target, credentials, options=options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_channel:
            await self.channel.close(None)

    async def _run(self, attempts: _Attempts) -> Any:
        while True:
            try:
                if attempts.assemble is None:
                    return await attempts.call()
                return attempts.assemble([chunk async for chunk in attempts.call()])
            except grpc.aio.AioRpcError as exc:
                await asyncio.sleep(attempts.wait_after(exc))

    async def all_events(
        self, session_id: str, *, timeout: float | None = None
    ) -> list[session_pb2.Event]:
        """The session's whole event log in seq order (every ``ListEvents`` page; each page
        call gets its own deadline)."""
        pages = _EventPages(session_id)
        while (request := pages.next_request()) is not None:
            pages.add(await self.list_events(request, timeout=timeout))
        return pages.events

    async def all_trajectory(self, session_id: str, *, timeout: float | None = None) -> Trajectory:
        """The session's whole trajectory: every ``ListTrajectory`` page's entries, each
        distinct prompt and tool set once (each page call gets its own deadline)."""
        pages = _TrajectoryPages(session_id)
        while (request := pages.next_request()) is not None:
            pages.add(await self.list_trajectory(request, timeout=timeout))
        return pages.trajectory


class SyncAdmissionClient(_Client[grpc.Channel]):
    """Blocking client of ``promptadmission.v1.AdmissionService``; the same constructor and
    methods as ``AdmissionClient`` (use it as a context manager or call ``close()``)."""

    def _open(
        self,
        target: str,
        credentials: grpc.ChannelCredentials | None,
        options: list[tuple[str, str | int]],
    ) -> grpc.Channel:
        if credentials is None:
            return grpc.insecure_channel(target, options=options)
        return grpc.secure_channel(target, credentials, options=options)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_channel:
            self.channel.close()

    def _run(self, attempts: _Attempts) -> Any:
        while True:
            try:
                if attempts.assemble is None:
                    return attempts.call()
                return attempts.assemble(list(attempts.call()))
            except grpc.RpcError as exc:
                time.sleep(attempts.wait_after(exc))

    def all_events(
        self, session_id: str, *, timeout: float | None = None
    ) -> list[session_pb2.Event]:
        """The session's whole event log in seq order (every ``ListEvents`` page; each page
        call gets its own deadline)."""
        pages = _EventPages(session_id)
        while (request := pages.next_request()) is not None:
            pages.add(self.list_events(request, timeout=timeout))
        return pages.events

    def all_trajectory(self, session_id: str, *, timeout: float | None = None) -> Trajectory:
        """The session's whole trajectory: every ``ListTrajectory`` page's entries, each
        distinct prompt and tool set once (each page call gets its own deadline)."""
        pages = _TrajectoryPages(session_id)
        while (request := pages.next_request()) is not None:
            pages.add(self.list_trajectory(request, timeout=timeout))
        return pages.trajectory
