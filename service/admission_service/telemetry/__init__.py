"""Observability: the call context (request id, tenant), JSON logs, Prometheus metrics and
OpenTelemetry tracing. The gRPC side of it is ``api.telemetry.TelemetryInterceptor``."""
