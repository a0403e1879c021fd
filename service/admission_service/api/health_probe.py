"""The health status follows the database: NOT_SERVING while PostgreSQL does not answer.

A balancer or orchestrator reads ``grpc.health.v1``; a replica that cannot reach its database
fails every call, so it must say so and take no traffic until the database answers again. The
probe runs ``SELECT 1`` every ``interval`` seconds on a connection of its own (not the pool's:
a pool busy with calls is not an outage), opened again after any failure. One failed probe
turns every status NOT_SERVING, one answered probe SERVING again. Graceful shutdown wins: the
health servicer ignores updates once it is shutting down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import psycopg
from grpc_health.v1 import health_pb2

from admission_service.storage.engine import libpq_url

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# A probe that takes longer than this is a failed one (as long as libpq's connect_timeout).
PROBE_TIMEOUT = 5.0
APPLICATION_NAME = "admission-service-health"

_log = logging.getLogger(__name__)


class DatabaseProbe:
    def __init__(self, url: str, health: object, services: Sequence[str], interval: float) -> None:
        self.url = libpq_url(url)
        self.health = health  # grpc_health's aio HealthServicer (untyped)
        self.services = tuple(services)
        self.interval = interval
        self.serving = True
        self._connection: psycopg.AsyncConnection[tuple[object, ...]] | None = None

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.interval)
                answered = await self.check()
                if answered != self.serving:
                    await self._set(answered)
        finally:
            await self._close()

    async def check(self) -> bool:
        """True when the database answered ``SELECT 1`` within ``PROBE_TIMEOUT``."""
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                if self._connection is None or self._connection.closed:
                    self._connection = await psycopg.AsyncConnection.connect(
                        self.url,
                        autocommit=True,
                        connect_timeout=int(PROBE_TIMEOUT),
                        application_name=APPLICATION_NAME,
                        prepare_threshold=None,  # safe behind a transaction-mode pooler
                    )
                await self._connection.execute("SELECT 1")
            return True
        except (psycopg.Error, OSError, TimeoutError) as exc:
            if self.serving:
                _log.warning("database probe failed: %s: %s", type(exc).__name__, exc)
            await self._close()
            return False

    async def _set(self, serving: bool) -> None:
        self.serving = serving
        status = SERVING if serving else NOT_SERVING
        for service in self.services:
            await self.health.set(service, status)  # type: ignore[attr-defined]
        if serving:
            _log.info("database answers again: health SERVING")
        else:
            _log.warning("database unreachable: health NOT_SERVING until it answers")

    async def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()
