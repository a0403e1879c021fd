"""The composition root (STYLE G11): the only module that wires configuration, database,
catalog, use cases and the gRPC server together.

``start_server`` builds and starts a server and returns a handle (tests start one in-process on
port 0, optionally with their own phase hooks, engine or tracer provider); ``serve`` runs one
until SIGTERM or SIGINT and then shuts down gracefully: health goes NOT_SERVING, new calls are
refused, in-flight calls get ``PAS_SHUTDOWN_GRACE_SECONDS`` to finish, and the database pool is
closed; a stop stuck well past the grace ends the process with its stacks in the log
(``shutdown_watchdog``).

Interceptors, outermost first: telemetry (request id, call log, metrics, span), errors, then
authentication, which refuses an unauthenticated ``AdmissionService`` call before its body is
parsed. Health and reflection stay open to probes (reflection can be turned off:
``PAS_REFLECTION=false``). Bearer tokens are read again on SIGHUP and when their file changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]
from grpc_reflection.v1alpha import reflection
from promptadmission.v1 import admission_service_pb2 as api
from sqlalchemy.ext.asyncio import AsyncEngine

from admission_service.api import convert
from admission_service.api.authentication import AuthenticateFirst
from admission_service.api.error_status import ErrorInterceptor
from admission_service.api.health_probe import DatabaseProbe
from admission_service.api.servicer import AdmissionServicer, add_to_server
from admission_service.api.shutdown_watchdog import ShutdownWatchdog
from admission_service.api.streaming import StreamingBudget, StreamSender
from admission_service.api.telemetry import TelemetryInterceptor
from admission_service.api.tenancy import BearerTokens, DefaultTenant, TenantResolver
from admission_service.api.token_reload import TokenReloader, on_sighup
from admission_service.app.deps import Deps
from admission_service.app.hooks import NO_HOOKS, PhaseHooks
from admission_service.app.page_tokens import PageTokens
from admission_service.app.sweeper import IdempotencySweeper
from admission_service.catalog.loader import load_catalog
from admission_service.config import ConfigError, Settings, split_listen
from admission_service.domain.catalog import Catalog
from admission_service.domain.errors import InvalidModelInfo
from admission_service.storage.engine import create_engine, migrate_to_latest
from admission_service.storage.token_keys import stored_page_token_keys
from admission_service.storage.transactions import PostgresStorage
from admission_service.telemetry.metrics import Metrics
from admission_service.telemetry.tracing import (
    TRACER_NAME,
    trace_database,
    tracer_provider_for,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

SERVICE_NAME: str = api.DESCRIPTOR.services_by_name["AdmissionService"].full_name
OVERALL_HEALTH = ""

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunningServer:
    """A started server. ``stop`` is graceful and idempotent."""

    server: grpc.aio.Server
    port: int
    host: str
    deps: Deps
    engine: AsyncEngine
    health: health_pb2_grpc.HealthServicer
    owns_engine: bool
    metrics: Metrics
    metrics_port: int | None = None
    tracer_provider: TracerProvider | None = None
    owns_tracer_provider: bool = False
    token_reloader: TokenReloader | None = None
    token_watch: asyncio.Task[None] | None = None
    sweeper: IdempotencySweeper | None = None
    health_probe: DatabaseProbe | None = None
    stopped: bool = False

    @property
    def target(self) -> str:
        """``host:port`` to dial (a wildcard listen address is dialled on loopback)."""
        host = self.host
        if host in ("0.0.0.0", "[::]", "::", ""):
            host = "127.0.0.1"
        return f"{host}:{self.port}"

    async def stop(self, grace: float | None = None) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.token_watch is not None:
            self.token_watch.cancel()
        # NOT_SERVING first (balancers route elsewhere at once); a probe's answer after it is
        # ignored, so the probe stops after.
        await self.health.enter_graceful_shutdown()
        if self.health_probe is not None:
            await self.health_probe.stop()
        await self.server.stop(grace)
        if self.sweeper is not None:
            await self.sweeper.stop()
        await asyncio.to_thread(self.metrics.stop_http)
        if self.owns_engine:
            await self.engine.dispose()
        if self.tracer_provider is not None and self.owns_tracer_provider:
            await asyncio.to_thread(self.tracer_provider.shutdown)  # flushes pending spans


def load_configured_catalog(settings: Settings) -> Catalog:
    try:
        return load_catalog(settings.model_catalog)
    except InvalidModelInfo as exc:
        source = settings.model_catalog or "the built-in catalog"
        raise ConfigError(f"invalid model catalog ({source}): {exc.message}") from exc


def tenant_resolver(settings: Settings) -> TenantResolver:
    """Bearer tokens when any are configured; else every call acts for the default tenant.

    A tokens file that holds no token at start stops the server (an empty ConfigMap must not
    turn authentication off) unless ``PAS_ALLOW_UNAUTHENTICATED=true``: then every call acts
    for the default tenant until a reload finds tokens in the file."""
    if settings.token_tenants:
        return BearerTokens(settings.token_tenants)
    if settings.auth_tokens_file is not None:
        settings.require_authenticated_listener()  # refuses an empty file unless allowed
        _log.warning(
            "%s holds no token: authentication is off until it does; every call acts for tenant %r",
            settings.auth_tokens_file,
            settings.default_tenant,
        )
        return BearerTokens({}, open_tenant=settings.default_tenant)
    _log.warning(
        "no bearer tokens configured: authentication is off, every call acts for tenant %r",
        settings.default_tenant,
    )
    return DefaultTenant(settings.default_tenant)


def token_reloader(settings: Settings, tenants: TenantResolver) -> TokenReloader | None:
    """What reads ``tenants``' tokens again (SIGHUP, the file's changes), when they are tokens."""
    if not isinstance(tenants, BearerTokens):
        return None
    return TokenReloader(tenants, settings.auth_tokens, settings.auth_tokens_file)


def watch_tokens(settings: Settings, reloader: TokenReloader | None) -> asyncio.Task[None] | None:
    """The task reloading the tokens when their file changes (``PAS_AUTH_TOKENS_WATCH_SECONDS``)."""
    if (
        reloader is None
        or settings.auth_tokens_file is None
        or settings.auth_tokens_watch_seconds <= 0
    ):
        return None
    return asyncio.create_task(reloader.watch(settings.auth_tokens_watch_seconds))


def configured_engine(
    settings: Settings, url: str, *, pool_size: int, max_overflow: int
) -> AsyncEngine:
    return create_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_overflow,
        prepared_statements=settings.prepared_statements,
    )


async def configured_page_tokens(settings: Settings, engine: AsyncEngine) -> PageTokens:
    """``PAS_PAGE_TOKEN_KEYS``, else the keys stored in the database (migration 0006), read by
    the first paged call (a server starts while its database is down)."""
    if settings.page_token_keys:
        return PageTokens([key.encode() for key in settings.page_token_keys])
    return PageTokens(loader=lambda: stored_page_token_keys(engine))


async def compose(
    settings: Settings, engine: AsyncEngine, catalog: Catalog, hooks: PhaseHooks = NO_HOOKS
) -> Deps:
    """What the use cases run on over ``engine``, as ``settings`` configure them (the API's
    workers and the inspector's process compose the same)."""
    return Deps.compose(
        engine,
        catalog,
        settings.limits,
        hooks,
        page_tokens=await configured_page_tokens(settings, engine),
        quotas=settings.quotas,
        encoders=convert.ENCODERS,
        idempotency_retention_seconds=settings.idempotency_retention_seconds,
        session_cache_bytes=settings.session_cache_bytes,
        held_frame_bytes=settings.held_frame_bytes,
        held_body_bytes=settings.held_body_bytes,
    )


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials from the configured PEM files (mTLS with a client CA), or None."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    try:
        chain = settings.tls_cert_file.read_bytes()
        key = settings.tls_key_file.read_bytes()
        client_ca = (
            settings.tls_client_ca_file.read_bytes()
            if settings.tls_client_ca_file is not None
            else None
        )
    except OSError as exc:
        raise ConfigError(f"cannot read a TLS file: {exc}") from exc
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def server_options(settings: Settings) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
        ("grpc.max_concurrent_streams", settings.max_concurrent_streams),
        # Fail to start when the port is taken, instead of silently sharing it (Linux default);
        # serve's workers share theirs on purpose (api/workers.py).
        ("grpc.so_reuseport", 1 if settings.share_port else 0),
    ]


async def start_server(
    settings: Settings,
    *,
    hooks: PhaseHooks = NO_HOOKS,
    engine: AsyncEngine | None = None,
    catalog: Catalog | None = None,
    tenants: TenantResolver | None = None,
    tracer_provider: TracerProvider | None = None,
) -> RunningServer:
    """Build, bind and start the server described by ``settings``.

    Without ``engine`` the server creates its own on ``settings``' database (starting the
    embedded PostgreSQL when no URL is configured) and disposes of it on ``stop``; a given
    engine stays the caller's. Migrations run first when ``settings.migrate_on_start``.
    ``tracer_provider`` (else one built for ``settings.tracing_exporter``) turns tracing on;
    database statements are traced only on an engine the server creates itself.
    """
    settings.require_authenticated_listener()
    catalog = catalog if catalog is not None else load_configured_catalog(settings)
    owns_engine = engine is None
    if engine is None:
        url = await asyncio.to_thread(settings.resolve_database_url)
    else:
        url = engine.url.render_as_string(hide_password=False)
    if settings.migrate_on_start:
        _log.info("running database migrations")
        await asyncio.to_thread(migrate_to_latest, url)
    if engine is None:
        engine = configured_engine(
            settings, url, pool_size=settings.db_pool_size, max_overflow=settings.db_max_overflow
        )
    owns_tracer_provider = tracer_provider is None
    if tracer_provider is None:
        tracer_provider = tracer_provider_for(settings.tracing_exporter)
    tracer = tracer_provider.get_tracer(TRACER_NAME) if tracer_provider is not None else None
    if tracer is not None and owns_engine:
        trace_database(engine, tracer)
    metrics = Metrics()
    metrics.watch_pool(engine, settings.db_pool_size + settings.db_max_overflow)
    metrics_port = None
    tenants = tenants or tenant_resolver(settings)
    reloader = token_reloader(settings, tenants)
    try:
        deps = await compose(settings, engine, catalog, hooks)
        if isinstance(deps.storage, PostgresStorage):
            metrics.watch_caches(deps.storage.cache, deps.storage.held, deps.bodies)
        telemetry = TelemetryInterceptor(metrics, tracer, log_payloads=settings.log_payloads)
        authenticate = AuthenticateFirst(
            api.DESCRIPTOR.services_by_name["AdmissionService"], tenants
        )
        server = grpc.aio.server(
            interceptors=[telemetry, ErrorInterceptor(), authenticate],
            options=server_options(settings),
        )
        # The streamed responses this worker holds while sending them, bounded.
        streaming = StreamingBudget(settings.limits.max_streaming_bytes)
        metrics.watch_streaming(streaming)
        streams = StreamSender(streaming, settings.stream_stall_seconds)
        add_to_server(AdmissionServicer(deps, tenants, streams), server)
        health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        if settings.reflection:
            reflection.enable_server_reflection(
                [
                    SERVICE_NAME,
                    health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                    reflection.SERVICE_NAME,
                ],
                server,
            )
        credentials = server_credentials(settings)
        try:
            if credentials is None:
                port = server.add_insecure_port(settings.listen)
            else:
                port = server.add_secure_port(settings.listen, credentials)
        except RuntimeError as exc:
            raise ConfigError(f"cannot listen on PAS_LISTEN={settings.listen}: {exc}") from exc
        if settings.metrics_listen is not None:
            metrics_host, wanted = split_listen(settings.metrics_listen)
            try:
                metrics_port = metrics.serve_http(metrics_host, wanted)
            except OSError as exc:
                raise ConfigError(
                    f"cannot serve metrics on PAS_METRICS_LISTEN={settings.metrics_listen}: {exc}"
                ) from exc
        await server.start()
        for service in (OVERALL_HEALTH, SERVICE_NAME):
            await health.set(service, health_pb2.HealthCheckResponse.SERVING)
        sweeper = IdempotencySweeper(
            engine,
            metrics.idempotency_keys_swept,
            retention_seconds=settings.idempotency_retention_seconds,
            interval_seconds=settings.idempotency_sweep_seconds,
        )
        sweeper.start()
    except BaseException:
        metrics.stop_http()
        if owns_engine:
            await engine.dispose()
        if tracer_provider is not None and owns_tracer_provider:
            tracer_provider.shutdown()
        raise
    token_watch = watch_tokens(settings, reloader)
    health_probe = None
    if settings.health_probe_seconds > 0:
        health_probe = DatabaseProbe(
            url, health, (OVERALL_HEALTH, SERVICE_NAME), settings.health_probe_seconds
        )
        health_probe.start()
    host = settings.listen.rpartition(":")[0]
    _log.info(
        "serving %s on %s:%d (%s%s)",
        SERVICE_NAME,
        host,
        port,
        "mTLS" if settings.tls_client_ca_file else "TLS" if credentials else "plaintext",
        f", metrics on {host_port(settings.metrics_listen, metrics_port)}" if metrics_port else "",
    )
    return RunningServer(
        server,
        port,
        host,
        deps,
        engine,
        health,
        owns_engine,
        metrics,
        metrics_port,
        tracer_provider,
        owns_tracer_provider,
        reloader,
        token_watch,
        sweeper=sweeper,
        health_probe=health_probe,
    )


def host_port(listen: str | None, port: int | None) -> str:
    return f"{(listen or '').rpartition(':')[0]}:{port}"


@contextlib.asynccontextmanager
async def stop_signals(reloader: TokenReloader | None) -> AsyncIterator[asyncio.Event]:
    """An event SIGTERM and SIGINT set (SIGHUP meanwhile reloads the tokens), for as long as
    the block runs: a second signal during the shutdown still finds these handlers."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, on_sighup(reloader))
    try:
        yield stop
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)


async def serve(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    running = await start_server(settings)
    async with stop_signals(running.token_reloader) as stop:
        try:
            await stop.wait()
            _log.info(
                "shutting down: refusing new calls, letting in-flight calls finish (up to %gs)",
                settings.shutdown_grace_seconds,
            )
        finally:
            grace = settings.shutdown_grace_seconds
            with ShutdownWatchdog(grace + settings.shutdown_overrun_seconds):
                await running.stop(grace)
    _log.info("stopped")
