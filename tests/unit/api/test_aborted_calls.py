"""An aborted call lets go of its request and command at once, not at the next full collection.

gRPC keeps a call's AbortError in its call state, and the state is reachable from the error's own
traceback, so the error and every frame its traceback holds are cyclic garbage. Only a full
collection frees them. When the edge aborted inside its ``except`` block, the AbortError chained
the handler's exception and, through its traceback, every frame of the failed call with the
request and command in it. A worker refusing 15 MiB Admits grew to 1.47 GiB resident in 120
calls (docs/BENCHMARKS.md, tenth round). These tests keep the AbortError as gRPC does, with the
collector off, and check that the request is freed by reference counting alone.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import grpc
import pytest
from admission_service.api import error_status
from admission_service.api.telemetry import TelemetryInterceptor
from admission_service.domain.errors import InvalidArgument
from admission_service.telemetry.metrics import Metrics
from prometheus_client import CollectorRegistry


class LargeRequest:
    """Stands for a parsed 15 MiB request (weakly referenceable)."""


class KeepsItsAbort:
    """A servicer context whose ``abort`` raises and keeps the AbortError, as gRPC's call
    state does."""

    def __init__(self) -> None:
        self.kept: list[BaseException] = []

    def time_remaining(self) -> float | None:
        return None

    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def send_initial_metadata(self, metadata: Any) -> None:
        return None

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.INVALID_ARGUMENT

    async def abort(self, code: Any, details: str = "", trailing_metadata: Any = ()) -> None:
        error = grpc.aio.AbortError()
        self.kept.append(error)
        raise error


async def refuse(request: Any, context: Any) -> None:
    command = [request]  # what the use case holds while it runs
    raise InvalidArgument("session_id", f"refused ({len(command)})")


def _aborted(behavior: Any) -> tuple[weakref.ref[LargeRequest], KeepsItsAbort]:
    held = [LargeRequest()]
    freed = weakref.ref(held[0])
    context = KeepsItsAbort()

    async def call() -> None:
        # The behavior gets the only reference, as gRPC hands it over (its Cython frames in a
        # traceback hold no locals).
        handled = behavior(held.pop(), context)
        with pytest.raises(grpc.aio.AbortError):
            await handled

    asyncio.run(call())
    return freed, context


def test_a_refused_call_frees_its_request_at_once(collector_off: None) -> None:
    freed, context = _aborted(error_status._wrap(refuse, "Admit"))
    assert context.kept, "the call was not aborted"
    assert freed() is None, "the aborted call's frames still hold the request"


def test_the_telemetry_around_a_refused_call_frees_it_too(collector_off: None) -> None:
    telemetry = TelemetryInterceptor(Metrics(CollectorRegistry()))
    observed = telemetry._wrap(error_status._wrap(refuse, "Admit"), "/p.S/Admit")

    async def settle() -> None:
        await asyncio.sleep(0)  # the telemetry's finish, scheduled after the call

    freed, context = _aborted(observed)
    asyncio.run(settle())
    assert context.kept
    assert freed() is None, "the aborted call's frames still hold the request"


class WritesUntilCancelled(KeepsItsAbort):
    """A streaming call's context whose ``write`` waits, as for a slow caller, until the call
    is cancelled (gRPC cancels the handler's task when its caller cancels)."""

    async def write(self, message: Any) -> None:
        await asyncio.Event().wait()


async def stream(request: Any, context: Any) -> None:
    response = [request]  # the handler holds the request and its response while it streams
    await context.write(response)


def test_a_stream_its_caller_cancels_frees_its_request_at_once(collector_off: None) -> None:
    telemetry = TelemetryInterceptor(Metrics(CollectorRegistry()))
    observed = telemetry._wrap(error_status._wrap(stream, "StreamAdmit"), "/p.S/StreamAdmit")
    held = [LargeRequest()]
    freed = weakref.ref(held[0])

    async def call() -> None:
        task = asyncio.ensure_future(observed(held.pop(), WritesUntilCancelled()))
        await asyncio.sleep(0)  # the handler is writing
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # the telemetry's finish

    asyncio.run(call())
    assert freed() is None, "the cancelled stream's frames still hold the request"
