"""The ``AdmissionService`` servicer: a thin translator between the wire and the use cases.

Each method resolves the call's tenant, converts the request to a command, awaits the use case,
and converts the result to the response. No SQL, no business rules, no ``try``: errors are the
``ErrorInterceptor``'s business. Mutating use cases return the encoded response (what they store
for ``request_id`` replays), which is parsed back here.
"""

from __future__ import annotations

from typing import Any

import grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from admission_service.api import convert
from admission_service.api.tenancy import TenantResolver
from admission_service.app.service import AdmissionApp

Context = grpc.aio.ServicerContext[Any, Any]


class AdmissionServicer(api_grpc.AdmissionServiceServicer):
    def __init__(self, app: AdmissionApp, tenants: TenantResolver) -> None:
        self._app = app
        self._tenants = tenants

    async def CreateSession(
        self, request: api.CreateSessionRequest, context: Context
    ) -> api.CreateSessionResponse:
        tenant = await self._tenants.tenant(context)
        data = await self._app.create_session(
            tenant,
            request.session_id,
            convert.idempotency_of(request.request_id, request),
            convert.encode_create_session,
        )
        return api.CreateSessionResponse.FromString(data)

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
        tenant = await self._tenants.tenant(context)
        data = await self._app.delete_session(
            tenant,
            request.session_id,
            convert.delete_expected_revision(request),
            convert.idempotency_of(request.request_id, request),
            convert.encode_delete_session,
        )
        return api.DeleteSessionResponse.FromString(data)

    async def Admit(self, request: api.AdmitRequest, context: Context) -> api.AdmitResponse:
        tenant = await self._tenants.tenant(context)
        data = await self._app.admit(
            tenant,
            convert.admit_command(request),
            convert.idempotency_of(request.request_id, request),
            convert.encode_admit,
        )
        return api.AdmitResponse.FromString(data)

    async def Reconcile(
        self, request: api.ReconcileRequest, context: Context
    ) -> api.ReconcileResponse:
        tenant = await self._tenants.tenant(context)
        data = await self._app.reconcile(
            tenant,
            convert.reconcile_command(request),
            convert.idempotency_of(request.request_id, request),
            convert.encode_reconcile,
        )
        return api.ReconcileResponse.FromString(data)

    async def Record(self, request: api.RecordRequest, context: Context) -> api.RecordResponse:
        tenant = await self._tenants.tenant(context)
        data = await self._app.record(
            tenant,
            convert.record_command(request),
            convert.idempotency_of(request.request_id, request),
            convert.encode_record,
        )
        return api.RecordResponse.FromString(data)

    async def PlanCompaction(
        self, request: api.PlanCompactionRequest, context: Context
    ) -> api.PlanCompactionResponse:
        tenant = await self._tenants.tenant(context)
        result = await self._app.plan_compaction(tenant, convert.plan_compaction_command(request))
        return convert.plan_compaction_response(result)

    async def Compact(self, request: api.CompactRequest, context: Context) -> api.CompactResponse:
        tenant = await self._tenants.tenant(context)
        data = await self._app.compact(
            tenant,
            convert.compact_command(request),
            convert.idempotency_of(request.request_id, request),
            convert.encode_compact,
        )
        return api.CompactResponse.FromString(data)

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
