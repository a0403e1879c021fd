"""Fixtures for the provider tests that drive the real server over a real channel."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from tests.api.support import start_client


@pytest.fixture
async def stub(database_url: str) -> AsyncIterator[api_grpc.AdmissionServiceAsyncStub]:
    client = await start_client(database_url)
    yield client.stub
    await client.close()
