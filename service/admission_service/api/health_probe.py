"""The health status follows the database: NOT_SERVING while PostgreSQL does not answer.

A balancer or orchestrator reads ``grpc.health.v1``; a replica that cannot reach its database
fails every call, so it must say so and take no traffic until the database answers again. The
probe asks storage whether the database answers (``storage/liveness.py``: ``SELECT 1`` on a
connection of its own, not the pool's) every ``interval`` seconds. One failed probe
turns every status NOT_SERVING, one answered probe SERVING again. Graceful shutdown wins: the
health servicer ignores updates once it is shutting down.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from grpc_health.v1 import health_pb2

from admission_service.app.background import PeriodicTask
from admission_service.storage.liveness import Liveness

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

_log = logging.getLogger(__name__)


class DatabaseProbe:
    def __init__(self, url: str, health: object, services: Sequence[str], interval: float) -> None:
        self.liveness = Liveness(url)
        self.health = health  # grpc_health's aio HealthServicer (untyped)
        self.services = tuple(services)
        self.interval = interval
        self.serving = True
        self._rounds = PeriodicTask("database-probe", interval, self._probe)

    def start(self) -> None:
        self._rounds.start()

    async def stop(self) -> None:
        """No probe after this (the one in flight cancelled, ``PeriodicTask.stop``), and its
        connection closed."""
        await self._rounds.stop()
        await self.liveness.close()

    async def _probe(self) -> None:
        answered = await self.check()
        if answered != self.serving:
            await self._set(answered)

    async def check(self) -> bool:
        """True when the database answered (``Liveness.check``)."""
        failure = await self.liveness.check()
        if failure is not None and self.serving:
            _log.warning("database probe failed: %s: %s", type(failure).__name__, failure)
        return failure is None

    async def _set(self, serving: bool) -> None:
        self.serving = serving
        status = SERVING if serving else NOT_SERVING
        for service in self.services:
            await self.health.set(service, status)  # type: ignore[attr-defined]
        if serving:
            _log.info("database answers again: health SERVING")
        else:
            _log.warning("database unreachable: health NOT_SERVING until it answers")
