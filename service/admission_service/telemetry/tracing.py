"""OpenTelemetry tracing of gRPC calls and database statements; off unless an exporter is
configured (``PAS_TRACING_EXPORTER``), and then nothing but the exporter touches the network.

Every server gets its own ``TracerProvider`` (none is installed globally), so tests can run
several servers with in-memory exporters side by side. The SDK is imported only when tracing
is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from sqlalchemy.ext.asyncio import AsyncEngine

TRACING_EXPORTERS = ("none", "console", "otlp")
TRACER_NAME = "admission_service"
SERVICE_NAME = "admission-service"
_SPAN_KEY = "pas_span"


def tracer_provider_for(exporter: str) -> TracerProvider | None:
    """A provider exporting to ``exporter`` (``console``: JSON spans on stdout; ``otlp``: the
    OTLP/gRPC exporter, configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables), or
    None for ``none``. ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` apply."""
    if exporter == "none":
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    span_exporter: SpanExporter
    if exporter == "console":
        span_exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    return provider


def trace_database(engine: AsyncEngine, tracer: trace.Tracer) -> None:
    """A client span per statement on ``engine``, child of the current call's span.

    The statement text is parameterised SQL (no values: parameters never reach a span); the
    operation name is its first keyword.
    """
    from sqlalchemy import event

    sync_engine = engine.sync_engine
    database = sync_engine.url.database or ""

    @event.listens_for(sync_engine, "before_cursor_execute")
    def _start(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
    ) -> None:
        operation = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "SQL"
        span = tracer.start_span(
            f"{operation} {database}".strip(),
            kind=SpanKind.CLIENT,
            attributes={
                "db.system": "postgresql",
                "db.name": database,
                "db.operation": operation,
                "db.statement": statement,
            },
        )
        if context is not None:
            setattr(context, _SPAN_KEY, span)

    @event.listens_for(sync_engine, "after_cursor_execute")
    def _end(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
    ) -> None:
        span = getattr(context, _SPAN_KEY, None)
        if span is not None:
            span.end()
            setattr(context, _SPAN_KEY, None)

    @event.listens_for(sync_engine, "handle_error")
    def _error(exception_context: Any) -> None:
        span = getattr(exception_context.execution_context, _SPAN_KEY, None)
        if span is not None:
            error = exception_context.original_exception
            # The type only: a driver's message may quote the statement's values.
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.end()
            setattr(exception_context.execution_context, _SPAN_KEY, None)
