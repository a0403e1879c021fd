"""The outermost interceptor: request id, call log line, RPC metrics and the server span.

For every unary call it

* takes the request id from the ``x-request-id`` metadata (a new one when absent or not a
  plausible id), makes it the call's log context and echoes it in the response headers;
* opens a server span (child of a W3C ``traceparent`` the caller sent) when tracing is on;
* counts the call and its status code, times it, and logs one line when it ends — the method,
  code, duration and peer, never the request or response, unless ``log_payloads`` asks for them
  (at DEBUG);
* feeds successful responses to the admission metrics.

It sits outside ``ErrorInterceptor``, so it sees the status that interceptor chose.

What does not depend on the call is done once per method (its names, log level and metric
children), and what the caller does not wait for — the status count, the latency histogram, the
admission metrics, the span's end and the log line — runs after the handler has returned,
scheduled on the event loop (``loop.call_soon``, in the call's context so the line keeps its
request id and tenant), so gRPC sends the response first (``bench/telemetry_cost.py`` measures
it).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from admission_service.api.authentication import parsed_request
from admission_service.api.convert import EncodedResponse
from admission_service.api.unary import Behavior, Continuation, wrap_unary
from admission_service.telemetry import context as call_context
from admission_service.telemetry.metrics import Metrics

_log = logging.getLogger("admission_service.calls")
_propagator = TraceContextTextMapPropagator()
# Calls logged at INFO; health checks and reflection are logged at DEBUG (probes are frequent).
LOGGED_SERVICES = frozenset({"promptadmission.v1.AdmissionService"})


def _split(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").rpartition("/")
    return service, name


def _request_id(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == call_context.REQUEST_ID_HEADER and isinstance(value, str):
            if call_context.valid_request_id(value):
                return value
            break
    return call_context.new_request_id()


def _message(response: Any, *, whole: bool) -> Any:
    """A mutation's response bytes (``EncodedResponse``) as a message: whole, parsed, or the
    summary metrics read (built from the use case's result, no parse)."""
    if isinstance(response, EncodedResponse):
        return response.message() if whole else response.summary()
    return response


def _payload(message: Any) -> Any:
    if isinstance(message, Message):
        return MessageToDict(message, preserving_proto_field_name=True)
    return repr(message)


class _Method:
    """What the telemetry of one method needs on every call, made once."""

    def __init__(self, metrics: Metrics, method: str) -> None:
        self.service, self.name = _split(method)
        self.level = logging.INFO if self.service in LOGGED_SERVICES else logging.DEBUG
        self.started, self.latency, self._handled = metrics.rpc_children(self.service, self.name)
        self._by_code: dict[grpc.StatusCode, Any] = {}

    def handled(self, code: grpc.StatusCode) -> Any:
        counter = self._by_code.get(code)
        if counter is None:
            counter = self._by_code[code] = self._handled(code.name)
        return counter


class TelemetryInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(
        self,
        metrics: Metrics,
        tracer: trace.Tracer | None = None,
        *,
        log_payloads: bool = False,
    ) -> None:
        self._metrics = metrics
        self._tracer = tracer
        self._log_payloads = log_payloads
        # Only methods with a handler reach _wrap: as many entries as the server has methods.
        self._methods: dict[str, _Method] = {}

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any]:
        return await wrap_unary(continuation, handler_call_details, self._wrap)

    def _wrap(self, behavior: Behavior, method: str) -> Behavior:
        known = self._methods.get(method)
        if known is None:
            known = self._methods[method] = _Method(self._metrics, method)
        this = known

        async def observed(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            metadata = context.invocation_metadata()
            request_id = _request_id(metadata)
            call_context.request_id.set(request_id)
            call_context.tenant.set(None)
            this.started.inc()
            span = self._start_span(this.service, this.name, metadata, request_id)
            # Read while the call is alive: after a cancelled stream ends, gRPC may have freed
            # the call before ``_finish`` runs, and reading its peer then crashed the process
            # (a segmentation fault in CI, a caller cancelling mid-write).
            peer = context.peer() if _log.isEnabledFor(this.level) else ""
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            response = None
            try:
                await context.send_initial_metadata(((call_context.REQUEST_ID_HEADER, request_id),))
                with _current(span):
                    response = behavior(request, context)
                    if inspect.isawaitable(response):
                        response = await response
                return response
            except grpc.aio.AbortError:
                code = _code_of(context, grpc.StatusCode.UNKNOWN)
                raise
            except asyncio.CancelledError:
                expired = context.time_remaining() is not None and context.time_remaining() <= 0
                code = grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED
                raise
            except BaseException:
                code = grpc.StatusCode.UNKNOWN
                raise
            finally:
                # After the response: the caller waits for none of this.
                asyncio.get_running_loop().call_soon(
                    self._finish,
                    this,
                    request,
                    response,
                    code,
                    time.perf_counter() - started,
                    span,
                    peer,
                )
                # Not kept by this frame past the call: an aborted call's traceback keeps it
                # in a cycle gRPC makes (error_status.guarded).
                del request

        return observed

    def _finish(
        self,
        method: _Method,
        request: Any,
        response: Any,
        code: grpc.StatusCode,
        seconds: float,
        span: trace.Span | None,
        peer: str,
    ) -> None:
        """The call's metrics, span end and log line, once its response is on its way (the call
        itself may be gone: nothing here reads its context)."""
        method.handled(code).inc()
        method.latency.observe(seconds)
        if code is grpc.StatusCode.OK:
            self._metrics.observe_response(parsed_request(request), _message(response, whole=False))
        if self._log_payloads:
            if code is grpc.StatusCode.OK:
                payload = _payload(_message(response, whole=True))
                _log.debug("response payload", extra={"fields": {"response": payload}})
            if parsed_request(request) is not None:
                # After the call: the body is parsed only once the caller is authenticated.
                payload = _payload(parsed_request(request))
                _log.debug("request payload", extra={"fields": {"request": payload}})
        if span is not None:
            span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code is not grpc.StatusCode.OK:
                span.set_status(Status(StatusCode.ERROR, code.name))
            span.end()
        if _log.isEnabledFor(method.level):
            _log_call(method.level, method.service, method.name, code, seconds, peer)

    def _start_span(
        self, service: str, name: str, metadata: Any, request_id: str
    ) -> trace.Span | None:
        if self._tracer is None:
            return None
        carrier = {key: value for key, value in metadata or () if isinstance(value, str)}
        span = self._tracer.start_span(
            f"{service}/{name}",
            context=_propagator.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={
                "rpc.system": "grpc",
                "rpc.service": service,
                "rpc.method": name,
                "pas.request_id": request_id,
            },
        )
        return span


def _current(span: trace.Span | None) -> contextlib.AbstractContextManager[Any]:
    """Make ``span`` current, so the handler's database spans are its children."""
    if span is None:
        return contextlib.nullcontext()
    return trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def _log_call(
    level: int,
    service: str,
    name: str,
    code: grpc.StatusCode,
    seconds: float,
    peer: str,
) -> None:
    _log.log(
        level,
        "%s %s %.1fms",
        name,
        code.name,
        seconds * 1000,
        extra={
            "fields": {
                "grpc_service": service,
                "grpc_method": name,
                "grpc_code": code.name,
                "duration_ms": round(seconds * 1000, 3),
                "peer": peer,
            }
        },
    )


def _code_of(context: grpc.aio.ServicerContext[Any, Any], default: grpc.StatusCode) -> Any:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    for candidate in grpc.StatusCode:
        if candidate.value[0] == code:
            return candidate
    return default
