"""Authenticate before anything reads a request body (issue 13).

``AuthenticateFirst`` takes over the request deserialization of one service's methods (the
``AdmissionService``): gRPC hands their handlers the raw bytes, and the handler first resolves
the caller's tenant (``TenantResolver``: an unauthenticated call is refused with
UNAUTHENTICATED here, its bytes never parsed nor diagnosed), then parses them
(``parse_request``: large requests on a worker thread, a malformed one INVALID_ARGUMENT naming
the field). It sits inside the error interceptor, which maps what it raises. Other services
(health, reflection) pass through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass

from admission_service.api.malformed import parse_request
from admission_service.api.tenancy import TenantResolver
from admission_service.api.unary import Behavior, Continuation, wrap_unary


@dataclass(slots=True)
class RawRequest:
    """What the handler receives: the bytes, and the message once authenticated and parsed
    (outer interceptors read it after the call: ``parsed_request``)."""

    data: bytes
    message: Any = None


def parsed_request(request: Any) -> Any:
    """The request message a handler saw (None if it was refused before parsing)."""
    return request.message if isinstance(request, RawRequest) else request


def _raw_bytes(deserializer: Any) -> Any:
    return RawRequest  # no parsing in gRPC's deserialization: the handler decides when


class AuthenticateFirst(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(self, service: ServiceDescriptor, tenants: TenantResolver) -> None:
        self._prefix = f"/{service.full_name}/"
        self._request_classes = {
            method.name: GetMessageClass(method.input_type) for method in service.methods
        }
        self._tenants = tenants

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any]:
        if not handler_call_details.method.startswith(self._prefix):
            return await continuation(handler_call_details)
        return await wrap_unary(
            continuation, handler_call_details, self._wrap, deserializer=_raw_bytes
        )

    def _wrap(self, behavior: Behavior, method: str) -> Behavior:
        request_class = self._request_classes[method.removeprefix(self._prefix)]

        async def authenticated(
            raw: RawRequest, context: grpc.aio.ServicerContext[Any, Any]
        ) -> Any:
            await self._tenants.tenant(context)  # raises Unauthenticated: nothing parsed yet
            raw.message = await parse_request(request_class, raw.data)
            return await behavior(raw.message, context)

        return authenticated
