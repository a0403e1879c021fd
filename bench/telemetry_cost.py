"""``python -m bench.telemetry_cost``: what the telemetry interceptor costs per call, in process.

Runs the server's real interceptor chain (``TelemetryInterceptor`` → ``ErrorInterceptor`` →
``AuthenticateFirst``, as ``api/server.py`` builds it) around a handler that returns a
ready-made one-call-step ``AdmitResponse`` at once, with a stand-in for gRPC's servicer context,
``--calls`` times per variant, and prints microseconds per call, each as (until the call
returns, in all: with the work it left for the event loop to run after the response):

* ``intercept``: resolving the handler (what gRPC does per call: every interceptor's
  ``intercept_service``);
* ``telemetry``: the telemetry wrapper alone around the bare handler (request id, metrics,
  the call's log line, no span);
* ``chain``: both, the whole per-call interceptor cost;
* with the call log at INFO into ``/dev/null`` (the default ``PAS_LOG_LEVEL``) and at WARNING
  (the benchmark's), and with tracing to an in-memory exporter.

No network and no database: it isolates the per-call work that does not depend on the call.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import grpc
from admission_service.api.authentication import AuthenticateFirst
from admission_service.api.error_status import ErrorInterceptor
from admission_service.api.telemetry import TelemetryInterceptor
from admission_service.telemetry.logs import configure_logging
from admission_service.telemetry.metrics import Metrics
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

METHOD = "/promptadmission.v1.AdmissionService/Admit"


class _Context:
    """The parts of ``grpc.aio.ServicerContext`` the interceptors use."""

    def __init__(self) -> None:
        self._metadata = (("x-request-id", "bench-0123456789"), ("user-agent", "bench"))

    def invocation_metadata(self) -> Any:
        return self._metadata

    async def send_initial_metadata(self, metadata: Any) -> None:
        return None

    def time_remaining(self) -> float | None:
        return None

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def code(self) -> Any:
        return None

    def set_trailing_metadata(self, metadata: Any) -> None:
        return None


class _Tenants:
    async def tenant(self, context: Any) -> str:
        return "default"


class _Details:
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


def _response() -> api.AdmitResponse:
    response = api.AdmitResponse(admission_id="a" * 26, starts_series=False)
    response.commits.add(seq=12, operation=pb.COMMIT_OPERATION_APPEND)
    response.forecast.reused_tokens = 900
    return response


def _request() -> bytes:
    return api.AdmitRequest(
        session_id="bench", turn=3, rendered_prompt="You are terse." * 10
    ).SerializeToString()


async def _measure(calls: int, tracer: Any) -> dict[str, tuple[float, float]]:
    response = _response()

    async def handler(request: Any, context: Any) -> Any:
        return response

    final = grpc.unary_unary_rpc_method_handler(
        handler,
        request_deserializer=api.AdmitRequest.FromString,
        response_serializer=api.AdmitResponse.SerializeToString,
    )

    async def terminal(details: Any) -> Any:
        return final

    telemetry = TelemetryInterceptor(Metrics(), tracer)
    tenants: Any = _Tenants()
    authenticate = AuthenticateFirst(api.DESCRIPTOR.services_by_name["AdmissionService"], tenants)
    chain: list[Any] = [telemetry, ErrorInterceptor(), authenticate]

    async def resolve(index: int, details: Any) -> Any:
        if index == len(chain):
            return await terminal(details)
        return await chain[index].intercept_service(lambda d: resolve(index + 1, d), details)

    context = _Context()
    raw = _request()
    details = _Details(METHOD)

    async def timed(run: Callable[[], Any]) -> tuple[float, float]:
        """µs per call: until the call returns (the response path), and in all (with the
        work it scheduled on the loop, run before the next call)."""
        clock = time.perf_counter
        for _ in range(min(calls, 500)):
            await run()
            await asyncio.sleep(0)
        on_path = 0.0
        started = clock()
        for _ in range(calls):
            before = clock()
            await run()
            on_path += clock() - before
            await asyncio.sleep(0)  # the loop runs what the call scheduled
        total = clock() - started
        return round(on_path / calls * 1e6, 2), round(total / calls * 1e6, 2)

    async def intercept_only() -> None:
        await resolve(0, details)

    bare = telemetry._wrap(handler, METHOD)

    async def telemetry_only() -> None:
        await bare(api.AdmitRequest(session_id="bench"), context)

    async def whole_chain() -> None:
        handler_ = await resolve(0, details)
        request = handler_.request_deserializer(raw)
        await handler_.unary_unary(request, context)

    async def nothing() -> None:
        await handler(None, context)

    return {
        "handler alone": await timed(nothing),
        "intercept": await timed(intercept_only),
        "telemetry": await timed(telemetry_only),
        "chain": await timed(whole_chain),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.telemetry_cost", description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args(argv)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    variants = {
        "log WARNING, no tracing (the benchmark's)": (None, "WARNING"),
        "log INFO (default), no tracing": (None, "INFO"),
        "log INFO, tracing (in-memory exporter)": (provider.get_tracer("bench"), "INFO"),
    }
    with open(os.devnull, "w") as devnull:
        for name, (tracer, level) in variants.items():
            configure_logging(level, "json", stream=devnull)
            result = asyncio.run(_measure(args.calls, tracer))
            print(name, result)  # noqa: T201
    logging.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
