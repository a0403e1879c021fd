"""The composition root (STYLE G11): the only module that wires configuration, database,
catalog, use cases and the gRPC server together.

``start_server`` builds and starts a server and returns a handle (tests start one in-process on
port 0, optionally with their own phase hooks or engine); ``serve`` runs one until SIGTERM or
SIGINT and then shuts down gracefully: health goes NOT_SERVING, new calls are refused, in-flight
calls get ``PAS_SHUTDOWN_GRACE_SECONDS`` to finish, and the database pool is closed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]
from grpc_reflection.v1alpha import reflection
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from sqlalchemy.ext.asyncio import AsyncEngine

from admission_service.api.errors import ErrorInterceptor
from admission_service.api.servicer import AdmissionServicer
from admission_service.api.tenancy import DefaultTenant, TenantResolver
from admission_service.app.hooks import NO_HOOKS, PhaseHooks
from admission_service.app.service import AdmissionApp
from admission_service.catalog.loader import load_catalog
from admission_service.config import ConfigError, Settings
from admission_service.domain.catalog import Catalog
from admission_service.domain.errors import InvalidModelInfo
from admission_service.storage.database import create_engine, run_migrations

SERVICE_NAME: str = api.DESCRIPTOR.services_by_name["AdmissionService"].full_name
OVERALL_HEALTH = ""

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunningServer:
    """A started server. ``stop`` is graceful and idempotent."""

    server: grpc.aio.Server
    port: int
    host: str
    app: AdmissionApp
    engine: AsyncEngine
    health: health_pb2_grpc.HealthServicer
    owns_engine: bool
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
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        if self.owns_engine:
            await self.engine.dispose()


def load_configured_catalog(settings: Settings) -> Catalog:
    try:
        return load_catalog(settings.model_catalog)
    except InvalidModelInfo as exc:
        source = settings.model_catalog or "the built-in catalog"
        raise ConfigError(f"invalid model catalog ({source}): {exc.message}") from exc


def server_options(settings: Settings) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
        # Fail to start when the port is taken, instead of silently sharing it (Linux default).
        ("grpc.so_reuseport", 0),
    ]


async def start_server(
    settings: Settings,
    *,
    hooks: PhaseHooks = NO_HOOKS,
    engine: AsyncEngine | None = None,
    catalog: Catalog | None = None,
    tenants: TenantResolver | None = None,
) -> RunningServer:
    """Build, bind and start the server described by ``settings``.

    Without ``engine`` the server creates its own on ``settings``' database (starting the
    embedded PostgreSQL when no URL is configured) and disposes of it on ``stop``; a given
    engine stays the caller's. Migrations run first when ``settings.migrate_on_start``.
    """
    catalog = catalog if catalog is not None else load_configured_catalog(settings)
    owns_engine = engine is None
    if engine is None:
        url = await asyncio.to_thread(settings.resolve_database_url)
    else:
        url = engine.url.render_as_string(hide_password=False)
    if settings.migrate_on_start:
        _log.info("running database migrations")
        await asyncio.to_thread(run_migrations, url)
    if engine is None:
        engine = create_engine(
            url, pool_size=settings.db_pool_size, max_overflow=settings.db_max_overflow
        )
    try:
        app = AdmissionApp(engine, catalog, settings.limits, hooks)
        server = grpc.aio.server(
            interceptors=[ErrorInterceptor()], options=server_options(settings)
        )
        api_grpc.add_AdmissionServiceServicer_to_server(
            AdmissionServicer(app, tenants or DefaultTenant(settings.default_tenant)), server
        )
        health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        reflection.enable_server_reflection(
            [
                SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            server,
        )
        try:
            port = server.add_insecure_port(settings.listen)
        except RuntimeError as exc:
            raise ConfigError(f"cannot listen on PAS_LISTEN={settings.listen}: {exc}") from exc
        await server.start()
        for service in (OVERALL_HEALTH, SERVICE_NAME):
            await health.set(service, health_pb2.HealthCheckResponse.SERVING)
    except BaseException:
        if owns_engine:
            await engine.dispose()
        raise
    host = settings.listen.rpartition(":")[0]
    _log.info("serving %s on %s:%d", SERVICE_NAME, host, port)
    return RunningServer(server, port, host, app, engine, health, owns_engine)


async def serve(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    running = await start_server(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        _log.info(
            "shutting down: refusing new calls, letting in-flight calls finish (up to %gs)",
            settings.shutdown_grace_seconds,
        )
    finally:
        await running.stop(settings.shutdown_grace_seconds)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    _log.info("stopped")
