"""The ``AdmissionService`` servicer: a thin translator between the wire and the use cases.

Each method resolves the call's tenant, converts the request to a command, awaits the use case,
and converts the result to the response. No SQL, no business rules, no ``try``: errors are the
``ErrorInterceptor``'s business. Mutating use cases return their result and the response bytes
they stored for ``request_id`` replays (``_write``: every mutation's one path); those bytes —
a derived request's stored frames spliced in, or a replayed response — go to gRPC as they are
(``convert.EncodedResponse``, registered with a pass-through serializer by ``add_to_server``):
never parsed and encoded again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message_factory import GetMessageClass
from promptadmission.v1 import admission_service_pb2 as api

from admission_service.api import convert
from admission_service.api.malformed import parsed_large_request
from admission_service.api.streaming import StreamSender
from admission_service.api.tenancy import TenantResolver
from admission_service.app import handlers
from admission_service.app.commands import Idempotency
from admission_service.app.deps import Deps
from admission_service.app.replay import encoding_size
from admission_service.app.unit_of_work import Reply
from admission_service.domain.errors import fields_under
from admission_service.off_loop import off_the_loop_if_large

Context = grpc.aio.ServicerContext[Any, Any]
Command = TypeVar("Command")
Paged = TypeVar("Paged")
SERVICE = api.DESCRIPTOR.services_by_name["AdmissionService"]

# A mutating use case's handler: (deps, tenant, command, idempotency) -> its reply (result and
# response bytes).
UseCase = Callable[[Deps, str, Command, Idempotency | None], Awaitable[Reply[Any]]]
# A paged read of one session: (deps, tenant, session_id, page_size, page_token) -> the page.
PageRead = Callable[[Deps, str, str, int, str], Awaitable[Paged]]


class AdmissionServicer:
    def __init__(self, deps: Deps, tenants: TenantResolver, streams: StreamSender) -> None:
        self._deps = deps
        self._tenants = tenants
        self._streams = streams

    async def CreateSession(
        self, request: api.CreateSessionRequest, context: Context
    ) -> convert.EncodedResponse:
        return await self._write(
            context, request, "CreateSession", _session_id, handlers.create_session
        )

    async def GetSession(
        self, request: api.GetSessionRequest, context: Context
    ) -> api.GetSessionResponse:
        tenant = await self._tenants.tenant(context)
        info = await handlers.get_session(self._deps, tenant, request.session_id)
        return convert.get_session_response(info)

    async def ListSessions(
        self, request: api.ListSessionsRequest, context: Context
    ) -> api.ListSessionsResponse:
        tenant = await self._tenants.tenant(context)
        page = await handlers.list_sessions(
            self._deps, tenant, request.page_size, request.page_token
        )
        return convert.list_sessions_response(page)

    async def DeleteSession(
        self, request: api.DeleteSessionRequest, context: Context
    ) -> convert.EncodedResponse:
        revision = convert.delete_expected_revision(request)

        async def delete(
            deps: Deps, tenant: str, session_id: str, key: Idempotency | None
        ) -> Reply[None]:
            return await handlers.delete_session(deps, tenant, session_id, revision, key)

        return await self._write(context, request, "DeleteSession", _session_id, delete)

    async def Admit(self, request: api.AdmitRequest, context: Context) -> convert.EncodedResponse:
        return await self._write(context, request, "Admit", convert.admit_command, handlers.admit)

    async def Reconcile(
        self, request: api.ReconcileRequest, context: Context
    ) -> convert.EncodedResponse:
        return await self._write(
            context, request, "Reconcile", convert.reconcile_command, handlers.reconcile
        )

    async def StreamAdmit(
        self, request: api.StreamAdmitRequest, context: Context
    ) -> convert.EncodedResponse:
        """Admit, its response sent in chunks (``_stream``)."""
        with fields_under("request"):
            response = await self._write(
                context, request.request, "Admit", _streamed(convert.admit_command), handlers.admit
            )
        await self._stream(context, response, request.sha256_in_last_chunk)
        return response

    async def StreamReconcile(
        self, request: api.StreamReconcileRequest, context: Context
    ) -> convert.EncodedResponse:
        """Reconcile, its response sent in chunks (``_stream``)."""
        with fields_under("request"):
            response = await self._write(
                context,
                request.request,
                "Reconcile",
                _streamed(convert.reconcile_command),
                handlers.reconcile,
            )
        await self._stream(context, response, request.sha256_in_last_chunk)
        return response

    async def Record(self, request: api.RecordRequest, context: Context) -> convert.EncodedResponse:
        return await self._write(
            context, request, "Record", convert.record_command, handlers.record
        )

    async def PlanCompaction(
        self, request: api.PlanCompactionRequest, context: Context
    ) -> api.PlanCompactionResponse:
        tenant = await self._tenants.tenant(context)
        result = await handlers.plan_compaction(
            self._deps, tenant, convert.plan_compaction_command(request)
        )
        return convert.plan_compaction_response(result)

    async def Compact(
        self, request: api.CompactRequest, context: Context
    ) -> convert.EncodedResponse:
        return await self._write(
            context, request, "Compact", convert.compact_command, handlers.compact
        )

    async def Inspect(self, request: api.InspectRequest, context: Context) -> api.InspectResponse:
        tenant = await self._tenants.tenant(context)
        result = await handlers.inspect(
            self._deps,
            tenant,
            request.session_id,
            convert.wire_format_from_proto(request.wire_format),
            convert.selection_from_proto(request),
            convert.delivery_from_proto(request),
        )
        return convert.inspect_response(result)

    async def ListEvents(
        self, request: api.ListEventsRequest, context: Context
    ) -> api.ListEventsResponse:
        page = await self._session_page(context, request, handlers.list_events)
        return convert.list_events_response(page)

    async def ListTrajectory(
        self, request: api.ListTrajectoryRequest, context: Context
    ) -> api.ListTrajectoryResponse:
        page = await self._session_page(context, request, handlers.list_trajectory)
        return convert.list_trajectory_response(page)

    async def _session_page(
        self,
        context: Context,
        request: api.ListEventsRequest | api.ListTrajectoryRequest,
        read: PageRead[Paged],
    ) -> Paged:
        """A page of one session's rows (ListEvents, ListTrajectory)."""
        tenant = await self._tenants.tenant(context)
        return await read(
            self._deps, tenant, request.session_id, request.page_size, request.page_token
        )

    async def _stream(
        self, context: Context, response: convert.EncodedResponse, sha256_last: bool
    ) -> None:
        """Send a committed response in chunks (``StreamSender.send``, api/streaming.py) with
        the SHA-256 of the whole in the first chunk, or in the last when the caller asked
        (``sha256_last``: hashed while the chunks are sent).
        A caller that stops reading, or a worker already sending its budget, ends the stream
        with UNAVAILABLE; the call stays committed and a retry replays it."""
        await self._streams.send(context, response.data, sha256_last, response.sha256)

    async def _write(
        self,
        context: Context,
        request: Any,  # a mutating request: every one has a request_id
        method: str,
        to_command: Callable[[Any], Command],
        use_case: UseCase[Command],
    ) -> convert.EncodedResponse:
        """A mutation: the request converted to its command and its request_id's digest (its
        shape checked before the tenant is resolved); the use case returns its result and the
        response bytes it stored (or replayed), sent as they are."""
        if parsed_large_request():
            # A request parsed on a worker thread for its size is converted there too: its
            # texts become str and its encoding is hashed for the request_id (15 MiB: ~5 ms of
            # conversion, ~40 ms of encoding, ~10 ms of SHA-256) off the event loop.
            command, key = await asyncio.to_thread(_command_and_key, to_command, request)
        else:
            command, key = _command_and_key(to_command, request)
        tenant = await self._tenants.tenant(context)
        reply = await use_case(self._deps, tenant, command, key)
        # A large response not encoded by the use case (no request_id) is encoded on a thread.
        work = encoding_size(reply.result) if reply.encoded is None else 0
        return await off_the_loop_if_large(work, lambda: convert.encoded_response(method, reply))


def _command_and_key(
    to_command: Callable[[Any], Command], request: Any
) -> tuple[Command, Idempotency | None]:
    return to_command(request), convert.idempotency_of(request.request_id, request)


def _streamed(to_command: Callable[..., Command]) -> Callable[[Any], Command]:
    def streamed(request: Any) -> Command:
        return to_command(request, streamed=True)

    return streamed


def _session_id(request: api.CreateSessionRequest | api.DeleteSessionRequest) -> str:
    return request.session_id


def _as_is(response: convert.EncodedResponse) -> bytes:
    return response.data


def _encoded(chunk: bytes) -> bytes:
    return chunk


def add_to_server(servicer: AdmissionServicer, server: grpc.aio.Server) -> None:
    """Register every ``AdmissionService`` method of ``servicer`` on ``server``: a mutation's
    response bytes pass through unchanged, a read's message is serialized by gRPC. A streamed
    method (StreamAdmit, StreamReconcile) is a coroutine that writes its chunks itself, so the
    interceptors wrap it as they wrap a unary one (``api/unary.py``)."""
    handlers = {}
    for method in SERVICE.methods:
        behavior = getattr(servicer, method.name)
        deserializer = GetMessageClass(method.input_type).FromString
        serializer = GetMessageClass(method.output_type).SerializeToString
        if method.server_streaming:  # its chunks written encoded (``streaming.encoded_chunk``)
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                behavior, request_deserializer=deserializer, response_serializer=_encoded
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                behavior,
                request_deserializer=deserializer,
                response_serializer=_as_is if method.name in convert.WRITES else serializer,
            )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),)
    )
    # As the generated add_AdmissionServiceServicer_to_server does (the type stubs lack it).
    server.add_registered_method_handlers(SERVICE.full_name, handlers)  # type: ignore[attr-defined]
