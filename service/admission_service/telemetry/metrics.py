"""Prometheus metrics, one registry per server (so several servers can run in one process).

The RPC metrics use the names operators know from go-grpc-prometheus. The admission metrics are
derived from the responses at the API edge (``observe_response``), so the domain stays free of
instrumentation; a replayed response (a repeated ``request_id``) is counted again, like any
other successful call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb
from sqlalchemy.ext.asyncio import AsyncEngine

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

APPEND, CONSOLIDATE, CLEAR, NO_OP = "append", "consolidate", "clear", "no-op"
_CAPABILITY_SOURCES = {
    pb.CAPABILITY_SOURCE_REQUEST: "request",
    pb.CAPABILITY_SOURCE_CATALOG: "catalog",
    pb.CAPABILITY_SOURCE_DEFAULT: "default",
}


def admission_decision(response: api.AdmitResponse | api.ReconcileResponse) -> str:
    """What the projection rule did to the prompt, from the call's commits: ``append`` (a
    node appended after the history, including the first head), ``consolidate`` (only
    replacements, and a prompt remains in force), ``clear`` (only replacements, and no prompt
    remains), or ``no-op`` (no commit)."""
    commits = response.commits
    if not commits:
        return NO_OP
    if any(c.operation == pb.COMMIT_OPERATION_APPEND for c in commits):
        return APPEND
    if response.effective_prompt.location == pb.PROMPT_LOCATION_NONE:
        return CLEAR
    return CONSOLIDATE


def series_start_cause(
    request: api.AdmitRequest | api.ReconcileRequest,
    response: api.AdmitResponse | api.ReconcileResponse,
) -> str | None:
    """Why the request starts a series (None when it does not): the first of ``declared`` (the
    harness said so), ``header-change`` (the logged header changed: a tool set the route cannot
    update in place), ``replaced`` (this call replaced a system node: a consolidation or a
    clear), ``history-replaced`` (a compaction since the last request moved the replace
    generation). Several may hold at once; the label is the first that does."""
    if not response.starts_series:
        return None
    if isinstance(request, api.AdmitRequest) and request.starts_request_series:
        return "declared"
    if response.HasField("header") and response.header.reason == pb.HEADER_REASON_CHANGE:
        return "header-change"
    if any(c.operation == pb.COMMIT_OPERATION_REPLACE for c in response.commits):
        return "replaced"
    return "history-replaced"


class _PoolCollector(Collector):
    """Database pool usage, read from the engine's pool at scrape time."""

    def __init__(self, engine: AsyncEngine, max_connections: int) -> None:
        self._pool: Any = engine.sync_engine.pool
        self._max = max_connections

    def collect(self) -> Iterator[GaugeMetricFamily]:
        connections = GaugeMetricFamily(
            "pas_db_pool_connections", "Database connections by state.", labels=["state"]
        )
        checked_out = getattr(self._pool, "checkedout", None)
        checked_in = getattr(self._pool, "checkedin", None)
        if callable(checked_out) and callable(checked_in):
            connections.add_metric(["in_use"], float(checked_out()))
            connections.add_metric(["idle"], float(checked_in()))
        yield connections
        yield GaugeMetricFamily(
            "pas_db_pool_max_connections",
            "The most connections the pool opens (pool size plus overflow).",
            value=float(self._max),
        )


class StreamingState(Protocol):
    """What a worker's streaming budget reports (``api.streaming.StreamingBudget``)."""

    limit: int
    held: int
    stalled: int
    exhausted: int


class _StreamingCollector(Collector):
    """The streamed responses a worker holds while sending them, read at scrape time."""

    def __init__(self, state: StreamingState) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        state = self._state
        yield GaugeMetricFamily(
            "pas_streaming_bytes",
            "Bytes of StreamAdmit and StreamReconcile responses the worker holds while sending.",
            value=float(state.held),
        )
        yield GaugeMetricFamily(
            "pas_streaming_max_bytes",
            "The most such bytes the worker holds (PAS_LIMIT_MAX_STREAMING_BYTES).",
            value=float(state.limit),
        )
        ended = CounterMetricFamily(
            "pas_streams_ended",
            "Streamed responses ended before their last chunk, by cause: the caller stopped "
            "reading (stalled) or the worker's streaming bytes were exhausted (exhausted).",
            labels=["cause"],
        )
        ended.add_metric(["stalled"], float(state.stalled))
        ended.add_metric(["exhausted"], float(state.exhausted))
        yield ended


class CacheState(Protocol):
    """How full a worker's cache is (``storage.session_cache``, ``storage.held_frames``,
    ``app.held_bodies``)."""

    bytes: int
    max_bytes: int

    def __len__(self) -> int: ...


class SessionCacheState(CacheState, Protocol):
    hits: int
    misses: int


class ServingCacheState(CacheState, Protocol):
    """A cache that counts what it served instead of the work it saves (held frames, held
    bodies)."""

    used: int


class _CachesCollector(Collector):
    """A worker's session cache, held frames and held bodies (``PAS_SESSION_CACHE_BYTES``,
    ``PAS_HELD_FRAME_BYTES``, ``PAS_HELD_BODY_BYTES``), read at scrape time: how full each is
    and how often it served."""

    def __init__(
        self,
        sessions: SessionCacheState | None,
        frames: ServingCacheState | None,
        bodies: ServingCacheState | None,
    ) -> None:
        self._sessions, self._frames, self._bodies = sessions, frames, bodies

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        sessions, frames, bodies = self._sessions, self._frames, self._bodies
        caches: dict[str, CacheState | None] = {
            "sessions": sessions,
            "frames": frames,
            "bodies": bodies,
        }
        held = GaugeMetricFamily(
            "pas_worker_cache_bytes",
            "Bytes a worker's cache holds: the sessions it wrote (sessions), the large frames "
            "(nodes, sealed chunks) its commits wrote or read FULL (frames) and the large "
            "provider bodies of its sessions' last requests (bodies).",
            labels=["cache"],
        )
        bound = GaugeMetricFamily(
            "pas_worker_cache_max_bytes", "The most bytes each cache holds.", labels=["cache"]
        )
        entries = GaugeMetricFamily(
            "pas_worker_cache_sessions", "Sessions each cache holds.", labels=["cache"]
        )
        for name, cache in caches.items():
            if cache is not None:
                held.add_metric([name], float(cache.bytes))
                bound.add_metric([name], float(cache.max_bytes))
                entries.add_metric([name], float(len(cache)))
        yield from (held, bound, entries)
        if sessions is not None:
            lookups = CounterMetricFamily(
                "pas_session_cache_lookups",
                "Steps that looked for their session in the worker's cache, by result: a hit "
                "sends the step in one round trip (checked by the row's version), a miss reads "
                "the session first.",
                labels=["result"],
            )
            lookups.add_metric(["hit"], float(sessions.hits))
            lookups.add_metric(["miss"], float(sessions.misses))
            yield lookups
        served: tuple[tuple[str, str, ServingCacheState | None], ...] = (
            (
                "pas_held_frames_used",
                "Frames (nodes, sealed chunks) FULL reads took from the worker instead of "
                "fetching them.",
                frames,
            ),
            (
                "pas_held_bodies_used",
                "FULL provider bodies made from the worker's held body of the previous request "
                "and the messages after it, instead of rendered from every frame.",
                bodies,
            ),
        )
        for name, documentation, cache in served:
            if cache is not None:
                yield CounterMetricFamily(name, documentation, value=float(cache.used))


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        rpc = ["grpc_service", "grpc_method"]
        self.started = Counter("grpc_server_started", "RPCs started.", rpc, registry=r)
        self.handled = Counter(
            "grpc_server_handled",
            "RPCs completed, by status code.",
            [*rpc, "grpc_code"],
            registry=r,
        )
        self.latency = Histogram(
            "grpc_server_handling_seconds",
            "RPC latency until the status is sent.",
            rpc,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.admissions = Counter(
            "pas_admissions",
            "Committed Admit and Reconcile calls by decision (append, consolidate, clear, no-op) "
            "and by where the system prompt capability came from.",
            ["method", "decision", "capability_source"],
            registry=r,
        )
        self.series_starts = Counter(
            "pas_series_starts",
            "Requests that start a new request series, by cause.",
            ["cause"],
            registry=r,
        )
        self.forecast_cache_read = Counter(
            "pas_cache_read_tokens_forecast",
            "Tokens the cache forecast expects to be read from the provider cache (Admit and "
            "Reconcile).",
            registry=r,
        )
        self.observed_cache_read = Counter(
            "pas_cache_read_tokens_observed",
            "Cache-read tokens the provider reported (Record with usage).",
            registry=r,
        )
        self.idempotency_keys_swept = Counter(
            "pas_idempotency_keys_swept",
            "Idempotency keys deleted after the retention window (app/sweeper.py).",
            registry=r,
        )
        self._http: Any = None
        self._http_thread: threading.Thread | None = None

    def watch_pool(self, engine: AsyncEngine, max_connections: int) -> None:
        self.registry.register(_PoolCollector(engine, max_connections))

    def watch_streaming(self, state: StreamingState) -> None:
        self.registry.register(_StreamingCollector(state))

    def watch_caches(
        self,
        sessions: SessionCacheState | None,
        frames: ServingCacheState | None,
        bodies: ServingCacheState | None = None,
    ) -> None:
        self.registry.register(_CachesCollector(sessions, frames, bodies))

    def rpc_children(self, service: str, method: str) -> tuple[Any, Any, Any]:
        """One method's started counter and latency histogram, and a function of a status
        code's name to its handled counter: looked up once per method, not per call."""
        return (
            self.started.labels(service, method),
            self.latency.labels(service, method),
            lambda code: self.handled.labels(service, method, code),
        )

    def rpc_started(self, service: str, method: str) -> None:
        self.started.labels(service, method).inc()

    def rpc_handled(self, service: str, method: str, code: str, seconds: float) -> None:
        self.handled.labels(service, method, code).inc()
        self.latency.labels(service, method).observe(seconds)

    def observe_response(self, request: Any, response: Any) -> None:
        """Admission metrics from a successful call's request and response (a streamed call's
        by its wrapped request: StreamAdmit is an Admit)."""
        if isinstance(request, api.StreamAdmitRequest | api.StreamReconcileRequest):
            request = request.request
        if isinstance(response, api.AdmitResponse | api.ReconcileResponse):
            if request.validate_only:
                return
            method = "Admit" if isinstance(response, api.AdmitResponse) else "Reconcile"
            source = _CAPABILITY_SOURCES.get(response.capability_source, "unspecified")
            self.admissions.labels(method, admission_decision(response), source).inc()
            cause = series_start_cause(request, response)
            if cause is not None:
                self.series_starts.labels(cause).inc()
            self.forecast_cache_read.inc(response.forecast.reused_tokens)
        elif isinstance(request, api.RecordRequest) and request.HasField("usage"):
            self.observed_cache_read.inc(request.usage.cache_read_tokens)

    # ---- the HTTP endpoint --------------------------------------------------------------

    def serve_http(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on ``host:port`` (port 0 picks one) in a thread; the bound port."""
        self._http, self._http_thread = start_http_server(port, host, registry=self.registry)
        bound: int = self._http.server_port
        return bound

    def stop_http(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._http_thread is not None:
            self._http_thread.join(timeout=5)
            self._http_thread = None
