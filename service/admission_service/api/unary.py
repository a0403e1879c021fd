"""The one way our server interceptors wrap a unary-unary handler.

Both interceptors (errors, telemetry) replace a handler's behaviour and keep everything else;
streaming handlers (health Watch, reflection) pass through untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

Behavior = Callable[[Any, Any], Any]
# A string: grpc's classes are generic only to type checkers.
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
    if handler is None or handler.unary_unary is None:
        return handler
    request_deserializer = handler.request_deserializer
    if deserializer is not None:
        request_deserializer = deserializer(request_deserializer)
    return grpc.unary_unary_rpc_method_handler(
        wrap(handler.unary_unary, details.method),
        request_deserializer=request_deserializer,
        response_serializer=handler.response_serializer,
    )
