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

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message_factory import GetMessageClass
from promptadmission.v1 import admission_service_pb2 as api

from admission_service.api import convert
from admission_service.api.tenancy import TenantResolver
from admission_service.app.commands import Idempotency
from admission_service.app.machinery import Reply
from admission_service.app.service import AdmissionApp

Context = grpc.aio.ServicerContext[Any, Any]
Command = TypeVar("Command")
SERVICE = api.DESCRIPTOR.services_by_name["AdmissionService"]

# A mutating use case: (tenant, command, idempotency) -> its reply (result and response bytes).
UseCase = Callable[[str, Command, Idempotency | None], Awaitable[Reply[Any]]]


class AdmissionServicer:
    def __init__(self, app: AdmissionApp, tenants: TenantResolver) -> None:
        self._app = app
        self._tenants = tenants

    async def CreateSession(
        self, request: api.CreateSessionRequest, context: Context
    ) -> convert.EncodedResponse:
        command = request.session_id
        return await self._write(
            context, request, "CreateSession", self._app.create_session, command
        )

    async def GetSession(
        self, request: api.GetSessionRequest, context: Context
    ) -> api.GetSessionResponse:
        tenant = await self._tenants.tenant(context)
        info = await self._app.get_session(tenant, request.session_id)
        return convert.get_session_response(info)

    async def ListSessions(
        self, request: api.ListSessionsRequest, context: Context
    ) -> api.ListSessionsResponse:
        tenant = await self._tenants.tenant(context)
        page = await self._app.list_sessions(tenant, request.page_size, request.page_token)
        return convert.list_sessions_response(page)

    async def DeleteSession(
        self, request: api.DeleteSessionRequest, context: Context
    ) -> convert.EncodedResponse:
        revision = convert.delete_expected_revision(request)

        async def delete(tenant: str, session_id: str, key: Idempotency | None) -> Reply[None]:
            return await self._app.delete_session(tenant, session_id, revision, key)

        command = request.session_id
        return await self._write(context, request, "DeleteSession", delete, command)

    async def Admit(self, request: api.AdmitRequest, context: Context) -> convert.EncodedResponse:
        command = convert.admit_command(request)
        return await self._write(context, request, "Admit", self._app.admit, command)

    async def Reconcile(
        self, request: api.ReconcileRequest, context: Context
    ) -> convert.EncodedResponse:
        command = convert.reconcile_command(request)
        return await self._write(context, request, "Reconcile", self._app.reconcile, command)

    async def Record(self, request: api.RecordRequest, context: Context) -> convert.EncodedResponse:
        command = convert.record_command(request)
        return await self._write(context, request, "Record", self._app.record, command)

    async def PlanCompaction(
        self, request: api.PlanCompactionRequest, context: Context
    ) -> api.PlanCompactionResponse:
        tenant = await self._tenants.tenant(context)
        result = await self._app.plan_compaction(tenant, convert.plan_compaction_command(request))
        return convert.plan_compaction_response(result)

    async def Compact(
        self, request: api.CompactRequest, context: Context
    ) -> convert.EncodedResponse:
        command = convert.compact_command(request)
        return await self._write(context, request, "Compact", self._app.compact, command)

    async def Inspect(self, request: api.InspectRequest, context: Context) -> api.InspectResponse:
        tenant = await self._tenants.tenant(context)
        result = await self._app.inspect(
            tenant,
            request.session_id,
            convert.wire_format_from_proto(request.wire_format),
            convert.selection_from_proto(request),
        )
        return convert.inspect_response(result)

    async def ListEvents(
        self, request: api.ListEventsRequest, context: Context
    ) -> api.ListEventsResponse:
        tenant = await self._tenants.tenant(context)
        page = await self._app.list_events(
            tenant, request.session_id, request.page_size, request.page_token
        )
        return convert.list_events_response(page)

    async def ListTrajectory(
        self, request: api.ListTrajectoryRequest, context: Context
    ) -> api.ListTrajectoryResponse:
        tenant = await self._tenants.tenant(context)
        page = await self._app.list_trajectory(
            tenant, request.session_id, request.page_size, request.page_token
        )
        return convert.list_trajectory_response(page)

    async def _write(
        self,
        context: Context,
        request: Any,  # a mutating request: every one has a request_id
        method: str,
        use_case: UseCase[Command],
        command: Command,
    ) -> convert.EncodedResponse:
        """A mutation: the use case returns its result and the response bytes it stored (or
        replayed), sent as they are."""
        tenant = await self._tenants.tenant(context)
        key = convert.idempotency_of(request.request_id, request)
        return convert.encoded_response(method, await use_case(tenant, command, key))


def _as_is(response: convert.EncodedResponse) -> bytes:
    return response.data


def add_to_server(servicer: AdmissionServicer, server: grpc.aio.Server) -> None:
    """Register every ``AdmissionService`` method of ``servicer`` on ``server``: a mutation's
    response bytes pass through unchanged, a read's message is serialized by gRPC."""
    handlers = {
        method.name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method.name),
            request_deserializer=GetMessageClass(method.input_type).FromString,
            response_serializer=(
                _as_is
                if method.name in convert.WRITES
                else GetMessageClass(method.output_type).SerializeToString
            ),
        )
        for method in SERVICE.methods
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),)
    )
    # As the generated add_AdmissionServiceServicer_to_server does (the type stubs lack it).
    server.add_registered_method_handlers(SERVICE.full_name, handlers)  # type: ignore[attr-defined]
