"""The composition root over a real channel: health, reflection, options, graceful stop."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from admission_service.api.server import SERVICE_NAME
from admission_service.app.hooks import Phase
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from tests.api.support import (
    ApiClient,
    StartApi,
    admit_request,
    async_stub,
    create_session,
    rich_error,
)


@pytest.mark.parametrize("service", ["", SERVICE_NAME])
async def test_health_is_serving(api: ApiClient, service: str) -> None:
    health = health_pb2_grpc.HealthStub(api.channel)
    response = await health.Check(health_pb2.HealthCheckRequest(service=service))
    assert response.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_service(api: ApiClient) -> None:
    reflection = reflection_pb2_grpc.ServerReflectionStub(api.channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    responses = [r async for r in reflection.ServerReflectionInfo(iter([request]))]
    names = {s.name for s in responses[0].list_services_response.service}
    assert SERVICE_NAME == "promptadmission.v1.AdmissionService"
    assert {SERVICE_NAME, "grpc.health.v1.Health"} <= names


async def test_reflection_serves_the_contract(api: ApiClient) -> None:
    reflection = reflection_pb2_grpc.ServerReflectionStub(api.channel)
    request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME)
    responses = [r async for r in reflection.ServerReflectionInfo(iter([request]))]
    files = responses[0].file_descriptor_response.file_descriptor_proto
    assert files, "reflection returned no file descriptor for the service"


async def test_an_oversized_request_is_refused_by_the_transport(start_api: StartApi) -> None:
    client = await start_api(max_receive_message_bytes=64 * 1024)
    request = api.GetSessionRequest(session_id="x" * (128 * 1024))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await client.stub.GetSession(request)
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_the_listen_port_must_be_free(api: ApiClient, start_api: StartApi) -> None:
    from admission_service.config import ConfigError

    with pytest.raises(ConfigError, match="cannot listen"):
        await start_api(listen=api.server.target)


class HoldAtCommit:
    """Holds every Admit at the commit point until released."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def reached(self, method: str, phase: Phase) -> None:
        if method == "Admit" and phase is Phase.COMMIT:
            self.arrived.set()
            await self.release.wait()


async def test_stop_lets_an_in_flight_call_finish(start_api: StartApi) -> None:
    hooks = HoldAtCommit()
    client = await start_api(hooks=hooks)
    session_id = await create_session(client.stub)
    health = health_pb2_grpc.HealthStub(client.channel)
    watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
    first = await watch.read()
    assert first.status == health_pb2.HealthCheckResponse.SERVING

    admit = asyncio.ensure_future(client.stub.Admit(admit_request(session_id, "p", "hi")))
    await asyncio.wait_for(hooks.arrived.wait(), 10)
    stopping = asyncio.ensure_future(client.server.stop(grace=10))

    # Health says NOT_SERVING at once, and new calls are refused, while the admission runs on.
    update = await asyncio.wait_for(watch.read(), 10)
    assert update.status == health_pb2.HealthCheckResponse.NOT_SERVING
    watch.cancel()  # an open Watch stream would otherwise hold the server for the whole grace
    with pytest.raises(grpc.aio.AioRpcError):
        await client.stub.GetSession(api.GetSessionRequest(session_id=session_id), timeout=5)
    assert not admit.done()

    hooks.release.set()
    response = await asyncio.wait_for(admit, 10)
    assert response.user_seqs == [1]
    await asyncio.wait_for(stopping, 10)


async def test_a_fresh_channel_to_a_stopped_server_is_unavailable(start_api: StartApi) -> None:
    client = await start_api()
    await client.server.stop(0)
    async with grpc.aio.insecure_channel(client.server.target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await async_stub(channel).GetSession(api.GetSessionRequest(session_id="x"), timeout=5)
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_unknown_session_is_not_found(stub: api_grpc.AdmissionServiceAsyncStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetSession(api.GetSessionRequest(session_id="no-such-session"))
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.NOT_FOUND
    assert error.reason == "SESSION_NOT_FOUND"
    assert error.error_infos[0].metadata["session_id"] == "no-such-session"
