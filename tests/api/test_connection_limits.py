"""One connection's open calls are bounded (``PAS_MAX_CONCURRENT_STREAMS``), through the real
server and a real gRPC caller: each open call holds its response until the caller reads it, so
without the bound one connection that reads nothing could pin any number of them. A call over
the bound waits in its caller's transport; other connections are served meanwhile."""

from __future__ import annotations

import asyncio
from typing import cast

import grpc
import pytest
from admission_service.app.hooks import Phase
from grpc_health.v1 import health_pb2, health_pb2_grpc
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from tests.api.support import StartApi, admit_request, create_session

# Channels with the same target and options share one connection (gRPC's global subchannel
# pool): this one has its own.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


class HeldAdmits:
    """Holds every Admit once its session is locked, until released (a flag, polled: the
    server's event loop is not the test's)."""

    def __init__(self) -> None:
        self.arrived = 0
        self.released = False

    async def reached(self, method: str, phase: Phase) -> None:
        if method == "Admit" and phase is Phase.LOAD:
            self.arrived += 1
            while not self.released:  # noqa: ASYNC110 (an Event is bound to the test's loop)
                await asyncio.sleep(0.02)


async def test_a_connection_holds_at_most_its_bound_of_open_calls(start_api: StartApi) -> None:
    held = HeldAdmits()
    server = await start_api(hooks=held, max_concurrent_streams=2)
    async with (
        grpc.aio.insecure_channel(server.server.target) as channel,
        grpc.aio.insecure_channel(server.server.target, options=OWN_CONNECTION) as other_channel,
    ):
        stub = cast("api_grpc.AdmissionServiceAsyncStub", api_grpc.AdmissionServiceStub(channel))
        sessions = [await create_session(stub) for _ in range(2)]
        admits = [stub.Admit(admit_request(sid, "A", "hi"), timeout=60) for sid in sessions]
        for _ in range(200):
            if held.arrived == 2:
                break
            await asyncio.sleep(0.05)
        assert held.arrived == 2

        # The connection has its two calls open: a third waits in its caller's transport,
        # while another connection is served (a health check: the held calls hold session
        # locks and pooled connections, which other calls could wait for).
        check = health_pb2.HealthCheckRequest()
        with pytest.raises(grpc.aio.AioRpcError) as waited:
            await health_pb2_grpc.HealthStub(channel).Check(check, timeout=1.5)
        assert waited.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        served = await health_pb2_grpc.HealthStub(other_channel).Check(check, timeout=10)
        assert served.status == health_pb2.HealthCheckResponse.SERVING

        held.released = True
        assert all(response.admission_id for response in await asyncio.gather(*admits))
        assert await create_session(stub)  # the connection serves again
