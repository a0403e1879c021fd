"""Health follows the database (``api/health_probe.py``): NOT_SERVING while PostgreSQL cannot
be reached, SERVING again once it answers, so a balancer stops sending calls that would fail."""

from __future__ import annotations

import asyncio
import time

from admission_service.api.server import SERVICE_NAME
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .proxy import DatabaseProxy, database_proxy
from .support import start_client

__all__ = ["database_proxy"]  # the fixture

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
PROBE_SECONDS = 0.2
WAIT = 10.0  # the probe's interval and timeout, with room for a busy machine


async def statuses(health: health_pb2_grpc.HealthStub) -> set[int]:
    replies = [
        await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        for service in ("", SERVICE_NAME)
    ]
    return {reply.status for reply in replies}


async def wait_for_status(health: health_pb2_grpc.HealthStub, status: int) -> set[int]:
    until = time.monotonic() + WAIT
    seen = await statuses(health)
    while seen != {status} and time.monotonic() < until:
        await asyncio.sleep(0.05)
        seen = await statuses(health)
    return seen


async def test_health_is_not_serving_while_the_database_is_down_and_serving_after(
    database_proxy: tuple[DatabaseProxy, str],
) -> None:
    proxy, proxied_url = database_proxy
    client = await start_client(proxied_url, health_probe_seconds=PROBE_SECONDS)
    try:
        health = health_pb2_grpc.HealthStub(client.channel)
        assert await statuses(health) == {SERVING}
        proxy.down = True
        assert await wait_for_status(health, NOT_SERVING) == {NOT_SERVING}
        proxy.down = False
        assert await wait_for_status(health, SERVING) == {SERVING}
    finally:
        await client.close()


async def test_without_the_probe_health_ignores_the_database(
    database_proxy: tuple[DatabaseProxy, str],
) -> None:
    proxy, proxied_url = database_proxy
    client = await start_client(proxied_url, health_probe_seconds=0)
    try:
        health = health_pb2_grpc.HealthStub(client.channel)
        proxy.down = True
        await asyncio.sleep(PROBE_SECONDS * 5)
        assert await statuses(health) == {SERVING}
    finally:
        await client.close()
