"""The ``AdmissionService`` servicer: a thin translator between the wire and the use cases.

Each method resolves the call's tenant, converts the request to a command, awaits the use case,
and converts the result to the response. No SQL, no business rules, no ``try``: errors are the
``ErrorInterceptor``'s business. Mutating use cases return the encoded response (what they store
for ``request_id`` replays), which is parsed back here (``_write``: every mutation's one path).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message as ProtoMessage
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from admission_service.api import convert
from admission_service.api.tenancy import TenantResolver
from admission_service.app.commands import Idempotency
from admission_service.app.service import AdmissionApp

Context = grpc.aio.ServicerContext[Any, Any]
Command = TypeVar("Command")
Response = TypeVar("Response", bound=ProtoMessage)


# A mutating use case: (tenant, command, idempotency, encode) -> the encoded response.
UseCase = Callable[[str, Command, Idempotency | None, Callable[[Any], bytes]], Awaitable[bytes]]


# The encoder of each mutation's response (what the use case stores for request_id replays).
_ENCODERS: dict[type[ProtoMessage], Callable[[Any], bytes]] = {
    api.CreateSessionResponse: convert.encode_create_session,
    api.DeleteSessionResponse: convert.encode_delete_session,
    api.AdmitResponse: convert.encode_admit,
    api.ReconcileResponse: convert.encode_reconcile,
    api.RecordResponse: convert.encode_record,
    api.CompactResponse: convert.encode_compact,
}


class AdmissionServicer(api_grpc.AdmissionServiceServicer):
    def __init__(self, app: AdmissionApp, tenants: TenantResolver) -> None:
        self._app = app
        self._tenants = tenants

    async def CreateSession(
        self, request: api.CreateSessionRequest, context: Context
    ) -> api.CreateSessionResponse:
        command = request.session_id
        return await self._write(
            context, request, api.CreateSessionResponse, self._app.create_session, command
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
    ) -> api.DeleteSessionResponse:
        revision = convert.delete_expected_revision(request)

        async def delete(
            tenant: str, session_id: str, key: Idempotency | None, encode: Callable[[None], bytes]
        ) -> bytes:
            return await self._app.delete_session(tenant, session_id, revision, key, encode)

        command = request.session_id
        return await self._write(context, request, api.DeleteSessionResponse, delete, command)

    async def Admit(self, request: api.AdmitRequest, context: Context) -> api.AdmitResponse:
        command = convert.admit_command(request)
        return await self._write(context, request, api.AdmitResponse, self._app.admit, command)

    async def Reconcile(
        self, request: api.ReconcileRequest, context: Context
    ) -> api.ReconcileResponse:
        command = convert.reconcile_command(request)
        return await self._write(
            context, request, api.ReconcileResponse, self._app.reconcile, command
        )

    async def Record(self, request: api.RecordRequest, context: Context) -> api.RecordResponse:
        command = convert.record_command(request)
        return await self._write(context, request, api.RecordResponse, self._app.record, command)

    async def PlanCompaction(
        self, request: api.PlanCompactionRequest, context: Context
    ) -> api.PlanCompactionResponse:
        tenant = await self._tenants.tenant(context)
        result = await self._app.plan_compaction(tenant, convert.plan_compaction_command(request))
        return convert.plan_compaction_response(result)

    async def Compact(self, request: api.CompactRequest, context: Context) -> api.CompactResponse:
        command = convert.compact_command(request)
        return await self._write(context, request, api.CompactResponse, self._app.compact, command)

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
        response: type[Response],
        use_case: UseCase[Command],
        command: Command,
    ) -> Response:
        """A mutation: the use case stores and returns the encoded response (``_ENCODERS``);
        parsed here."""
        tenant = await self._tenants.tenant(context)
        key = convert.idempotency_of(request.request_id, request)
        data = await use_case(tenant, command, key, _ENCODERS[response])
        return response.FromString(data)
