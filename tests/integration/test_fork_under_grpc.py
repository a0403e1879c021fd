"""A test process starts processes while its grpc.aio channels are busy; each child must reach
its exec (tests/conftest.py turns gRPC's fork support off: grpc/grpc#43055 killed 44 % of them).
"""

from __future__ import annotations

import asyncio
import os
import subprocess

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]


@pytest.mark.skipif(os.geteuid() != 0, reason="only a fork that changes user skips vfork")
async def test_children_started_while_grpc_is_busy_reach_their_exec() -> None:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health_aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    busy = True
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)

        async def call_until_done() -> None:
            while busy:
                await stub.Check(health_pb2.HealthCheckRequest())

        callers = [asyncio.create_task(call_until_done()) for _ in range(4)]
        codes = []
        for _ in range(100):  # as the embedded PostgreSQL is started: another user, as root
            child = await asyncio.to_thread(
                subprocess.Popen, ["/bin/true"], stderr=subprocess.DEVNULL, user="nobody"
            )
            codes.append(await asyncio.to_thread(child.wait))
        busy = False
        await asyncio.gather(*callers)
    await server.stop(None)
    assert codes == [0] * 100, f"{sum(code != 0 for code in codes)} of 100 children died"
