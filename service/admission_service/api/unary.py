"""The one way our server interceptors wrap a unary-unary handler.

The interceptors (authentication, errors, telemetry) replace a handler's behaviour and keep
everything else. The ``AdmissionService``'s server-streaming methods (StreamAdmit,
StreamReconcile) are coroutines that write their chunks with ``context.write`` and return the
response they sent, so they are wrapped the same way, as ``unary_stream`` handlers; other
streaming handlers (health Watch, reflection) pass through untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

Behavior = Callable[[Any, Any], Any]
# A string: grpc's classes are generic only to type checkers.
# The service whose server-streaming methods are coroutines the interceptors wrap.
STREAMED_PREFIX = "/promptadmission.v1.AdmissionService/"
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable["grpc.RpcMethodHandler[Any, Any]"]]


async def wrap_unary(
    continuation: Continuation,
    details: grpc.HandlerCallDetails,
    wrap: Callable[[Behavior, str], Behavior],
    *,
    deserializer: Callable[[Any], Any] | None = None,
) -> grpc.RpcMethodHandler[Any, Any]:
    """The handler for ``details`` with its unary behaviour replaced by ``wrap(behaviour,
    method)`` (and its request deserializer by ``deserializer(original)`` when given)."""
    handler = await continuation(details)
    if handler is None:
        return handler
    streamed: Behavior | None = None
    if details.method.startswith(STREAMED_PREFIX):
        streamed = handler.unary_stream
    if handler.unary_unary is None and streamed is None:
        return handler
    request_deserializer = handler.request_deserializer
    if deserializer is not None:
        request_deserializer = deserializer(request_deserializer)
    if streamed is not None:
        return grpc.unary_stream_rpc_method_handler(
            wrap(streamed, details.method),
            request_deserializer=request_deserializer,
            response_serializer=handler.response_serializer,
        )
    assert handler.unary_unary is not None
    return grpc.unary_unary_rpc_method_handler(
        wrap(handler.unary_unary, details.method),
        request_deserializer=request_deserializer,
        response_serializer=handler.response_serializer,
    )
