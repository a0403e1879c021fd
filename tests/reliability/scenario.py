"""What several scenarios share: channels and stubs to a service, session setup."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from .harness import Book
from .process import CHANNEL_OPTIONS


def stub_of(channel: grpc.aio.Channel) -> api_grpc.AdmissionServiceAsyncStub:
    return cast("api_grpc.AdmissionServiceAsyncStub", api_grpc.AdmissionServiceStub(channel))


@asynccontextmanager
async def plain_stub(target: str) -> AsyncIterator[api_grpc.AdmissionServiceAsyncStub]:
    """A stub whose calls are not counted (setup and audit)."""
    from tests.api.support import DefaultDeadline

    async with grpc.aio.insecure_channel(
        target,
        options=CHANNEL_OPTIONS,
        interceptors=[DefaultDeadline()],  # type: ignore[list-item]
    ) as channel:
        yield stub_of(channel)


@asynccontextmanager
async def authorized_stub(
    target: str, token: str
) -> AsyncIterator[api_grpc.AdmissionServiceAsyncStub]:
    """``plain_stub``, sending ``authorization: Bearer <token>`` with every call."""
    from tests.api.support import DefaultDeadline, MetadataInterceptor

    interceptor = MetadataInterceptor((("authorization", f"Bearer {token}"),))
    async with grpc.aio.insecure_channel(
        target,
        options=CHANNEL_OPTIONS,
        interceptors=[interceptor, DefaultDeadline()],  # type: ignore[list-item]
    ) as channel:
        yield stub_of(channel)


async def create_sessions(
    stub: api_grpc.AdmissionServiceAsyncStub, book: Book, count: int, concurrency: int = 16
) -> None:
    limit = asyncio.Semaphore(concurrency)

    async def one() -> None:
        session_id = book.new_session_id()
        async with limit:
            await stub.CreateSession(
                api.CreateSessionRequest(session_id=session_id, request_id=str(uuid.uuid4())),
                timeout=30,
            )
        book.add(session_id)

    await asyncio.gather(*(one() for _ in range(count)))
