"""A database that accepts connections but never answers fails calls fast with UNAVAILABLE
(``connect_timeout``), instead of hanging each one until its deadline. Found by the
reliability suite (``docs/RELIABILITY.md``, database outage)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Iterator

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as api

from .support import admit_request, rich_error, start_client


@pytest.fixture
def silent_database() -> Iterator[str]:
    """A TCP port that accepts connections and never says a word."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"postgresql://postgres:x@127.0.0.1:{listener.getsockname()[1]}/postgres"


async def test_a_silent_database_is_unavailable_before_the_deadline(silent_database: str) -> None:
    client = await start_client(silent_database)
    try:
        started = time.monotonic()
        calls: list[Awaitable[object]] = [
            client.stub.GetSession(api.GetSessionRequest(session_id="s"), timeout=15),
            client.stub.Admit(admit_request("s", "prompt", "hello"), timeout=15),
        ]
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            assert isinstance(outcome, grpc.aio.AioRpcError)
            assert outcome.code() is grpc.StatusCode.UNAVAILABLE
            assert rich_error(outcome).reason == "DATABASE_UNAVAILABLE"
        assert time.monotonic() - started < 10
    finally:
        await client.close()
