"""Callers that read a streamed response slowly, or not at all, through the real server and a
real gRPC caller (issue 23: responses of any size; api/streaming.py).

A StreamAdmit's response is committed before its first chunk and held by the worker until its
last chunk is written, which gRPC accepts only as fast as the caller reads. A caller that stops
reading is let go after ``PAS_STREAM_STALL_SECONDS``; a response that would take the worker past
``PAS_LIMIT_MAX_STREAMING_BYTES`` is dropped before its first chunk. Either way the memory is
given back (the ``pas_streaming_bytes`` gauge returns to 0), the call stays committed once, and
a retry under its request_id receives the response: the client's own retry, for the budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import cast

import grpc
import pytest
from admission_service.app.limits import Limits
from promptadmission import AdmissionClient, RetryPolicy
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import ApiClient, StartApi, grown_by_tool_outputs, rich_error, tool_step
from tests.reliability.checks import eventually

MIB = 1 << 20
ROUTE = pb.Route(provider="other", model="big", context_window=10_000_000)
# Three tool outputs of 3 MiB: a FULL response of ~9 MiB, more than gRPC buffers for a caller
# that reads nothing (about 3 MiB on loopback), so the worker's writes wait for the caller.
OUTPUTS, OUTPUT_BYTES = 3, 3 * MIB


async def _grown(client: AdmissionClient) -> tuple[str, api.AdmitRequest]:
    """A session whose next step's FULL request is ~9 MiB, and that step's Admit (with a
    request_id, not yet sent)."""
    session_id, step = await grown_by_tool_outputs(client, ROUTE, OUTPUTS, OUTPUT_BYTES)
    last = tool_step(session_id, OUTPUTS, step.admission_id, OUTPUT_BYTES, ROUTE)
    last.request_id = uuid.uuid4().hex
    return session_id, last


@contextlib.asynccontextmanager
async def non_reader(server: ApiClient) -> AsyncIterator[api_grpc.AdmissionServiceAsyncStub]:
    """A caller that reads nothing it is not asked to: a channel of its own whose receive window
    never grows (no BDP probing), so gRPC stops taking a large response's chunks at once. With
    probing, a channel that had received megabytes could take a whole ~9 MiB response into its
    buffers (seen under load: the worker never waited)."""
    options = [("grpc.http2.bdp_probe", 0)]
    async with grpc.aio.insecure_channel(server.server.target, options=options) as channel:
        yield cast("api_grpc.AdmissionServiceAsyncStub", api_grpc.AdmissionServiceStub(channel))


def _gauge(server: ApiClient, name: str, **labels: str) -> float:
    value = server.server.metrics.registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


async def _held(server: ApiClient) -> None:
    await eventually(
        lambda: _gauge(server, "pas_streaming_bytes") > 9 * MIB, "the worker holds the response"
    )


async def _released(server: ApiClient) -> None:
    await eventually(
        lambda: _gauge(server, "pas_streaming_bytes") == 0, "the worker let go of every response"
    )


async def _ended(server: ApiClient, cause: str, at_least: int) -> None:
    await eventually(
        lambda: _gauge(server, "pas_streams_ended_total", cause=cause) >= at_least,
        f"{at_least} stream(s) ended, {cause}",
    )


async def _read_until_it_fails(call: object) -> tuple[int, grpc.aio.AioRpcError]:
    """The chunks a streamed call delivers before it fails, and its error."""
    chunks = 0
    try:
        async for _ in cast("AsyncIterator[object]", call):
            chunks += 1
    except grpc.aio.AioRpcError as error:
        return chunks, error
    raise AssertionError(f"the stream ended without an error after {chunks} chunks")


async def _revision(client: AdmissionClient, session_id: str) -> int:
    request = api.GetSessionRequest(session_id=session_id)
    return (await client.get_session(request)).session.revision


async def test_a_caller_that_stops_reading_is_let_go_and_its_retry_replays(
    start_api: StartApi,
) -> None:
    server = await start_api(
        stream_stall_seconds=1.0, limits=replace(Limits(), max_message_bytes=4 * MIB)
    )
    async with (
        AdmissionClient(server.server.target, timeout=120) as client,
        non_reader(server) as slow,
    ):
        session_id, last = await _grown(client)
        stalled = slow.StreamAdmit(api.StreamAdmitRequest(request=last))
        # The worker holds the response while gRPC waits for the caller, then lets it go.
        await _held(server)
        await _ended(server, "stalled", 1)
        assert _gauge(server, "pas_streams_ended_total", cause="stalled") == 1
        await _released(server)
        # Meanwhile, and after, the worker serves other calls.
        other = await client.create_session()
        assert other.session.session_id

        # What the caller finds when it reads at last: the chunks gRPC had buffered, then
        # UNAVAILABLE naming the stall.
        chunks, ended = await _read_until_it_fails(stalled)
        assert 0 < chunks < 9
        assert ended.code() == grpc.StatusCode.UNAVAILABLE
        assert rich_error(ended).reason == "RESPONSE_STREAM_STALLED"

        # The step committed once; its request_id gives the whole response, which is what a
        # fresh replay gives, and commits nothing more.
        revision = await _revision(client, session_id)
        received = await client.admit_streamed(last)
        assert received.ByteSize() > 9 * MIB
        assert [m.role for m in received.request.messages].count(pb.MESSAGE_ROLE_TOOL) == OUTPUTS
        assert await client.admit_streamed(last) == received
        assert await _revision(client, session_id) == revision
        assert _gauge(server, "pas_streaming_bytes") == 0


async def test_a_response_over_the_workers_streaming_bytes_waits_for_the_clients_retry(
    start_api: StartApi,
) -> None:
    """One ~9 MiB response held by a caller that does not read leaves less than another one
    needs: that one is dropped before its first chunk (UNAVAILABLE), the client retries it under
    its request_id, and receives it once the first caller goes away; the second call committed
    exactly once."""
    limits = replace(
        Limits(),
        max_message_bytes=4 * MIB,
        max_streamed_response_bytes=16 * MIB,
        max_streaming_bytes=16 * MIB,
    )
    server = await start_api(stream_stall_seconds=60.0, limits=limits)
    patient = RetryPolicy(max_attempts=40, initial_backoff=0.05, max_backoff=0.2)
    async with (
        AdmissionClient(server.server.target, timeout=120, retry=patient) as client,
        non_reader(server) as slow,
    ):
        session_id, last = await _grown(client)
        first = await client.admit_streamed(last)
        holder = slow.StreamAdmit(api.StreamAdmitRequest(request=last))  # a replay
        await _held(server)

        reconcile = api.ReconcileRequest(
            session_id=session_id,
            admission_id=first.admission_id,
            route=ROUTE,
            request_id=uuid.uuid4().hex,
        )
        retried = asyncio.ensure_future(client.reconcile_streamed(reconcile))
        await _ended(server, "exhausted", 2)
        assert not retried.done()
        holder.cancel()  # the first caller goes away: its bytes are given back
        reconciled = await retried
        assert reconciled.attempt == 1
        assert reconciled.request.total_messages == first.request.total_messages
        await _released(server)
        # The Reconcile committed once, however many times it was dropped and retried: the
        # next one is the second attempt.
        reconcile.request_id = uuid.uuid4().hex
        assert (await client.reconcile_streamed(reconcile)).attempt == 2

        # A raw caller sees the refusal itself, with the numbers in its metadata.
        holder = slow.StreamAdmit(api.StreamAdmitRequest(request=last))
        await _held(server)
        refused = server.stub.StreamReconcile(api.StreamReconcileRequest(request=reconcile))
        chunks, ended = await _read_until_it_fails(refused)
        assert chunks == 0
        assert ended.code() == grpc.StatusCode.UNAVAILABLE
        error = rich_error(ended)
        assert error.reason == "STREAMING_BYTES_EXHAUSTED"
        metadata = error.error_infos[0].metadata
        assert metadata["limit"] == str(16 * MIB)
        assert int(metadata["held"]) > 9 * MIB and int(metadata["value"]) > 9 * MIB
        holder.cancel()
        await _released(server)


async def test_a_caller_that_goes_away_while_the_worker_waits_is_a_cancellation(
    start_api: StartApi, caplog: pytest.LogCaptureFixture
) -> None:
    """gRPC fails the write a caller's cancel leaves pending; that is the call's cancellation,
    not an unexpected failure logged with a traceback (INTERNAL) for nobody."""
    server = await start_api(limits=replace(Limits(), max_message_bytes=4 * MIB))
    async with (
        AdmissionClient(server.server.target, timeout=120) as client,
        non_reader(server) as slow,
    ):
        _, last = await _grown(client)
        for _ in range(3):
            call = slow.StreamAdmit(api.StreamAdmitRequest(request=last))
            await _held(server)
            call.cancel()
            await _released(server)
    unexpected = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert unexpected == []
