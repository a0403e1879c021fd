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
- ``AdmissionError`` (code, ErrorInfo reason and metadata, field violations) instead of
  ``grpc.RpcError``.

The caller's request messages are never modified; a generated ``request_id`` goes on a copy.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar, cast

import grpc
import grpc.aio

from promptadmission.errors import AdmissionError
from promptadmission.v1 import admission_service_pb2 as pb
from promptadmission.v1 import admission_service_pb2_grpc as pb_grpc
from promptadmission.v1 import session_pb2

if TYPE_CHECKING:
    from promptadmission.v1.admission_service_pb2_grpc import AdmissionServiceAsyncStub

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

    def deadline(self, timeout: float | None) -> float | None:
        budget = self.timeout if timeout is None else timeout
        return None if budget is None else time.monotonic() + budget

    def next_wait(
        self, error: AdmissionError, attempt: int, deadline: float | None
    ) -> float | None:
        """Seconds to wait before another attempt, or None when ``error`` is final."""
        if not error.retryable or attempt >= self.retry.max_attempts:
            return None
        wait = self.retry.backoff(attempt - 1)
        if deadline is not None and time.monotonic() + wait >= deadline:
            return None
        return wait


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.001)


_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


class AdmissionClient:
    """Asyncio client of ``promptadmission.v1.AdmissionService``.

    ``AdmissionClient("127.0.0.1:50051", token=...)`` opens a plaintext channel (pass
    ``credentials`` for TLS, or an existing ``channel``, which the client then does not close).
    Use it as ``async with AdmissionClient(...) as client:`` or call ``close()``. Every method
    takes the request message and an optional ``timeout`` overriding the default deadline.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        channel: grpc.aio.Channel | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        options: Sequence[tuple[str, str | int]] = (),
    ) -> None:
        self._settings = _Settings(token, timeout, retry or RetryPolicy(), metadata)
        self._owns_channel = channel is None
        if channel is None:
            if credentials is None:
                channel = grpc.aio.insecure_channel(target, options=list(options))
            else:
                channel = grpc.aio.secure_channel(target, credentials, options=list(options))
        self.channel = channel
        self.stub = cast("AdmissionServiceAsyncStub", pb_grpc.AdmissionServiceStub(channel))

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

    async def _call(
        self,
        rpc: grpc.aio.UnaryUnaryMultiCallable[_Req, _Resp],
        request: _Req,
        timeout: float | None,
    ) -> _Resp:
        settings = self._settings
        deadline = settings.deadline(timeout)
        attempt = 0
        while True:
            attempt += 1
            try:
                return await rpc(request, timeout=_remaining(deadline), metadata=settings.metadata)
            except grpc.aio.AioRpcError as exc:
                error = AdmissionError.from_rpc_error(exc)
                wait = settings.next_wait(error, attempt, deadline)
                if wait is None:
                    raise error from exc
            await asyncio.sleep(wait)

    async def create_session(
        self, request: pb.CreateSessionRequest | None = None, *, timeout: float | None = None
    ) -> pb.CreateSessionResponse:
        request = with_request_id(request or pb.CreateSessionRequest())
        return await self._call(self.stub.CreateSession, request, timeout)

    async def get_session(
        self, request: pb.GetSessionRequest, *, timeout: float | None = None
    ) -> pb.GetSessionResponse:
        return await self._call(self.stub.GetSession, request, timeout)

    async def list_sessions(
        self, request: pb.ListSessionsRequest | None = None, *, timeout: float | None = None
    ) -> pb.ListSessionsResponse:
        return await self._call(
            self.stub.ListSessions, request or pb.ListSessionsRequest(), timeout
        )

    async def delete_session(
        self, request: pb.DeleteSessionRequest, *, timeout: float | None = None
    ) -> pb.DeleteSessionResponse:
        return await self._call(self.stub.DeleteSession, with_request_id(request), timeout)

    async def admit(
        self, request: pb.AdmitRequest, *, timeout: float | None = None
    ) -> pb.AdmitResponse:
        return await self._call(self.stub.Admit, with_request_id(request), timeout)

    async def reconcile(
        self, request: pb.ReconcileRequest, *, timeout: float | None = None
    ) -> pb.ReconcileResponse:
        return await self._call(self.stub.Reconcile, with_request_id(request), timeout)

    async def record(
        self, request: pb.RecordRequest, *, timeout: float | None = None
    ) -> pb.RecordResponse:
        return await self._call(self.stub.Record, with_request_id(request), timeout)

    async def plan_compaction(
        self, request: pb.PlanCompactionRequest, *, timeout: float | None = None
    ) -> pb.PlanCompactionResponse:
        return await self._call(self.stub.PlanCompaction, request, timeout)

    async def compact(
        self, request: pb.CompactRequest, *, timeout: float | None = None
    ) -> pb.CompactResponse:
        return await self._call(self.stub.Compact, with_request_id(request), timeout)

    async def inspect(
        self, request: pb.InspectRequest, *, timeout: float | None = None
    ) -> pb.InspectResponse:
        return await self._call(self.stub.Inspect, request, timeout)

    async def list_events(
        self, request: pb.ListEventsRequest, *, timeout: float | None = None
    ) -> pb.ListEventsResponse:
        return await self._call(self.stub.ListEvents, request, timeout)

    async def all_events(
        self, session_id: str, *, timeout: float | None = None
    ) -> list[session_pb2.Event]:
        """The session's whole event log in seq order (every ``ListEvents`` page; each page
        call gets its own deadline)."""
        events: list[session_pb2.Event] = []
        token = ""
        while True:
            page = await self.list_events(
                pb.ListEventsRequest(
                    session_id=session_id, page_size=_EVENTS_PAGE_SIZE, page_token=token
                ),
                timeout=timeout,
            )
            events.extend(page.events)
            token = page.next_page_token
            if not token:
                return events


class SyncAdmissionClient:
    """Blocking client of ``promptadmission.v1.AdmissionService``; the same constructor and
    methods as ``AdmissionClient`` (use it as a context manager or call ``close()``)."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        channel: grpc.Channel | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        options: Sequence[tuple[str, str | int]] = (),
    ) -> None:
        self._settings = _Settings(token, timeout, retry or RetryPolicy(), metadata)
        self._owns_channel = channel is None
        if channel is None:
            if credentials is None:
                channel = grpc.insecure_channel(target, options=list(options))
            else:
                channel = grpc.secure_channel(target, credentials, options=list(options))
        self.channel = channel
        self.stub = pb_grpc.AdmissionServiceStub(channel)

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

    def _call(
        self,
        rpc: grpc.UnaryUnaryMultiCallable[_Req, _Resp],
        request: _Req,
        timeout: float | None,
    ) -> _Resp:
        settings = self._settings
        deadline = settings.deadline(timeout)
        attempt = 0
        while True:
            attempt += 1
            try:
                return rpc(request, timeout=_remaining(deadline), metadata=settings.metadata)
            except grpc.RpcError as exc:
                error = AdmissionError.from_rpc_error(exc)
                wait = settings.next_wait(error, attempt, deadline)
                if wait is None:
                    raise error from exc
            time.sleep(wait)

    def create_session(
        self, request: pb.CreateSessionRequest | None = None, *, timeout: float | None = None
    ) -> pb.CreateSessionResponse:
        request = with_request_id(request or pb.CreateSessionRequest())
        return self._call(self.stub.CreateSession, request, timeout)

    def get_session(
        self, request: pb.GetSessionRequest, *, timeout: float | None = None
    ) -> pb.GetSessionResponse:
        return self._call(self.stub.GetSession, request, timeout)

    def list_sessions(
        self, request: pb.ListSessionsRequest | None = None, *, timeout: float | None = None
    ) -> pb.ListSessionsResponse:
        return self._call(self.stub.ListSessions, request or pb.ListSessionsRequest(), timeout)

    def delete_session(
        self, request: pb.DeleteSessionRequest, *, timeout: float | None = None
    ) -> pb.DeleteSessionResponse:
        return self._call(self.stub.DeleteSession, with_request_id(request), timeout)

    def admit(self, request: pb.AdmitRequest, *, timeout: float | None = None) -> pb.AdmitResponse:
        return self._call(self.stub.Admit, with_request_id(request), timeout)

    def reconcile(
        self, request: pb.ReconcileRequest, *, timeout: float | None = None
    ) -> pb.ReconcileResponse:
        return self._call(self.stub.Reconcile, with_request_id(request), timeout)

    def record(
        self, request: pb.RecordRequest, *, timeout: float | None = None
    ) -> pb.RecordResponse:
        return self._call(self.stub.Record, with_request_id(request), timeout)

    def plan_compaction(
        self, request: pb.PlanCompactionRequest, *, timeout: float | None = None
    ) -> pb.PlanCompactionResponse:
        return self._call(self.stub.PlanCompaction, request, timeout)

    def compact(
        self, request: pb.CompactRequest, *, timeout: float | None = None
    ) -> pb.CompactResponse:
        return self._call(self.stub.Compact, with_request_id(request), timeout)

    def inspect(
        self, request: pb.InspectRequest, *, timeout: float | None = None
    ) -> pb.InspectResponse:
        return self._call(self.stub.Inspect, request, timeout)

    def list_events(
        self, request: pb.ListEventsRequest, *, timeout: float | None = None
    ) -> pb.ListEventsResponse:
        return self._call(self.stub.ListEvents, request, timeout)

    def all_events(
        self, session_id: str, *, timeout: float | None = None
    ) -> list[session_pb2.Event]:
        """The session's whole event log in seq order (every ``ListEvents`` page; each page
        call gets its own deadline)."""
        events: list[session_pb2.Event] = []
        token = ""
        while True:
            page = self.list_events(
                pb.ListEventsRequest(
                    session_id=session_id, page_size=_EVENTS_PAGE_SIZE, page_token=token
                ),
                timeout=timeout,
            )
            events.extend(page.events)
            token = page.next_page_token
            if not token:
                return events
