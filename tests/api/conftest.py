"""Fixtures for the API tests: the real server, started in-process, over a real channel.

* ``api`` (session): the run's shared server (production hooks, default limits) with a
  connected channel and stub (``ApiClient``: ``.server``, ``.channel``, ``.stub``).
* ``stub``: ``api.stub``, the generated stub typed as ``AdmissionServiceAsyncStub``.
* ``start_api``: starts extra servers with custom phase hooks or ``Settings`` overrides, and
  stops them after the test::

      async def test_cancel_at_load(start_api: StartApi) -> None:
          client = await start_api(hooks=BlockAt(Phase.LOAD), shutdown_grace_seconds=1)
          call = client.stub.Admit(request)
          ...

Tests that commit must use their own session ids (``support.new_session_id()``): the database
is shared by the whole run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from admission_service.app.hooks import NO_HOOKS, PhaseHooks
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from tests.api.support import ApiClient, StartApi, start_client


@pytest.fixture(scope="session")
async def api(database_url: str) -> AsyncIterator[ApiClient]:
    client = await start_client(database_url)
    yield client
    await client.close()


@pytest.fixture
def stub(api: ApiClient) -> api_grpc.AdmissionServiceAsyncStub:
    return api.stub


@pytest.fixture
async def start_api(database_url: str) -> AsyncIterator[StartApi]:
    started: list[ApiClient] = []

    async def start(*, hooks: PhaseHooks = NO_HOOKS, **settings: Any) -> ApiClient:
        client = await start_client(database_url, hooks=hooks, **settings)
        started.append(client)
        return client

    yield start
    for client in reversed(started):
        await client.close()
