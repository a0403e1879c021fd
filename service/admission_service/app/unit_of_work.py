"""The unit of work of one mutation, the handlers' one shape:

    async with UnitOfWork(deps, call) as uow:
        if (replayed := await uow.replayed()) is not None:
            return replayed
        aggregate = uow.load(expected_revision)
        ...  # the domain's transitions, their writes through uow.sessions
        await uow.sessions.save(aggregate_after)
        return await uow.commit(result)

Entering takes, in order: a place in the tenant's concurrent-calls quota, the per-session
write gate (one writer per session per process, queued before the pool), a transaction
(``Storage.unit``), and the session under its row lock (``SELECT … FOR UPDATE``: one writer
per session across replicas) as the domain's ``SessionAggregate`` — or, for
``CreateSession``, the new row. ``replayed`` answers a
repeated ``request_id`` with the stored response; ``load`` checks the session exists at the
expected revision. ``commit`` checks the growth bounds, stores the response for ``request_id``,
sends the deferred writes and commits. Leaving the block without ``commit`` rolls back: an
exception, a cancellation at any phase; ``validate_only`` calls ``commit`` too, which checks
what a commit would and then leaves without committing, so nothing is written.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, Self, TypeVar

from admission_service.app import bounds, replay, validation
from admission_service.app.commands import Idempotency
from admission_service.app.deps import Deps
from admission_service.app.hooks import Phase
from admission_service.app.ports import SessionRepository, StorageUnit
from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.errors import (
    RequestIdReused,
    RevisionMismatch,
    SessionAlreadyExists,
    SessionNotFound,
)
from admission_service.off_loop import off_the_loop_if_large, sha256_started
from admission_service.storage.failures import SessionMoved

R = TypeVar("R")
P = ParamSpec("P")

# How many times a mutation runs when the session it ran on keeps moving under it: the first
# run may be on the worker's cached session, the next ones read it afresh under its lock and
# can only meet a session deleted and recreated in between.
MUTATION_RUNS = 3


def runs_again_if_moved(
    handler: Callable[P, Awaitable[Reply[R]]],
) -> Callable[P, Awaitable[Reply[R]]]:
    """A mutation that runs again when the worker's cached session it ran on was stale
    (``SessionMoved``: nothing was committed, and the cache dropped the session, so the next
    run reads it afresh)."""

    @functools.wraps(handler)
    async def run(*args: P.args, **kwargs: P.kwargs) -> Reply[R]:
        for _ in range(MUTATION_RUNS - 1):
            try:
                return await handler(*args, **kwargs)
            except SessionMoved:
                continue
        return await handler(*args, **kwargs)

    return run


@dataclass(frozen=True, slots=True)
class Reply(Generic[R]):
    """What a mutation answers: its typed ``result`` and, when the unit of work made them, the
    response bytes (``encoded``: stored for the call's request_id, sent as they are). A repeated
    request_id replays the stored bytes and has no result; without a request_id, or with
    ``validate_only``, nothing is stored, so nothing is encoded and the edge encodes the
    result."""

    result: R | None
    encoded: bytes | None = None
    # A streamed call's: encoded's SHA-256, hashed on a thread since it was encoded, so while
    # the commit's round trip and the first chunks' writes go on (a chunk carries it).
    sha256: asyncio.Task[bytes] | None = None


@dataclass(frozen=True, slots=True)
class Call:
    """One mutating call: the RPC, the session it writes, its idempotency key, whether it
    only validates (never commits) or creates the session, and the admission and tool call ids
    it reads (read with the session's lock, in the same round trip)."""

    method: str
    tenant: str
    session_id: str
    idempotency: Idempotency | None
    validate_only: bool = False
    create: bool = False
    admission_id: str | None = None
    tool_call_ids: tuple[str, ...] = ()
    streamed: bool = False  # its response goes out in chunks (StreamAdmit, StreamReconcile)


class UnitOfWork:
    """One mutating call's transaction on one session (see the module docstring). The handler
    reads and writes the session's rows through ``sessions``."""

    sessions: SessionRepository

    def __init__(self, deps: Deps, call: Call) -> None:
        self._deps = deps
        self._call = call
        self.validate_only = call.validate_only
        self._encode = deps.encoders[call.method]
        self._stack = AsyncExitStack()
        self._loaded: SessionAggregate | None = None
        self._committed = False
        # The worker's rendered bodies of this session: the one this call may continue, and
        # the one it leaves once it commits (app/held_bodies.py).
        self.bodies = deps.bodies.of(call.tenant, call.session_id)

    async def __aenter__(self) -> Self:
        call, deps = self._call, self._deps
        if call.idempotency is not None:
            validation.check_request_id(call.idempotency.request_id, deps.limits)
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(deps.quotas.call(call.tenant))  # the gate's queue
            await stack.enter_async_context(deps.gate.hold(call.tenant, call.session_id))
            unit: StorageUnit = await stack.enter_async_context(
                deps.storage.unit(call.tenant, call.session_id)
            )
            self._unit, self.sessions = unit, unit.store
            if call.create:
                self._loaded = await self.sessions.create()
                self._created = self._loaded is not None
            else:
                # The lock, the stored response of a repeated request_id and the admission and
                # tool calls the call reads: one round trip (with the transaction's BEGIN).
                idempotency = None if self.validate_only else call.idempotency
                self._loaded = await self.sessions.lock(
                    request_id=idempotency.request_id if idempotency is not None else None,
                    admission_id=call.admission_id,
                    tool_call_ids=call.tool_call_ids,
                )
                self._created = False
            await self.reached(Phase.LOAD)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.__aexit__(*exc)
        if self._committed and exc[1] is None:
            await self.reached(Phase.COMMITTED)

    async def reached(self, phase: Phase) -> None:
        await self._deps.hooks.reached(self._call.method, phase)

    async def replayed(self) -> Reply[Any] | None:
        """The response stored for a repeated ``request_id`` (rebuilt, ``replay.py``); None
        when there is none (or with ``validate_only``, which never replays)."""
        idempotency = self._call.idempotency
        if idempotency is None or self.validate_only or self._created:
            return None
        stored = await self.sessions.stored_response(idempotency.request_id)
        if stored is None:
            return None
        if stored.age_seconds >= self._deps.idempotency_retention_seconds:
            # Past the retention window the id is new, whether or not the sweeper ran.
            await self.sessions.forget_response(idempotency.request_id)
            return None
        if (
            stored.method != self._call.method
            or stored.request_digest != idempotency.request_digest
        ):
            raise RequestIdReused(idempotency.request_id)
        return Reply(None, await replay.replayed(self.sessions, stored, self._encode))

    def load(self, expected_revision: int | None = None) -> SessionAggregate:
        """The session the call works on, as it was when the call began: refused when it does
        not exist (or, creating, already existed) or is not at ``expected_revision``."""
        if self._loaded is None:
            if self._call.create:
                raise SessionAlreadyExists(self._call.session_id)
            raise SessionNotFound(self._call.session_id)
        revision = self._loaded.session.revision
        if expected_revision is not None and expected_revision != revision:
            raise RevisionMismatch(expected_revision, revision)
        return self._loaded

    async def check_new_session(self) -> None:
        await self._deps.quotas.check_new_session(self._unit.usage)

    async def commit(self, result: R) -> Reply[R]:
        """Check the session's growth bounds and the tenant's stored-bytes quota for what this
        transaction wrote; with ``validate_only`` stop there (the answer is the commit's, and
        nothing is committed). Otherwise store the encoded ``result`` under the call's
        ``request_id`` and commit with the deferred writes (one round trip)."""
        loaded = self.load().session
        growth = self.sessions.growth
        bounds.check_session_growth(loaded, growth, self._deps.limits)
        await self._deps.quotas.check_stored_bytes(
            self._unit.usage, self._call.tenant, growth.log_bytes
        )
        if self.validate_only:
            await self._unit.verify()  # the answer is that of the stored session
            return Reply(result)
        idempotency = self._call.idempotency
        # Only a response stored for a request_id is encoded here, under the session's lock;
        # otherwise the edge encodes it once the lock and the connection are free.
        encoded = sha256 = None
        if idempotency is not None:
            through_seq = loaded.next_seq + growth.events - 1
            encoded, stored = await off_the_loop_if_large(
                replay.encoding_size(result), lambda: self._stored_form(result, through_seq)
            )
            await self.sessions.store_response(
                idempotency.request_id,
                self._call.method,
                idempotency.request_digest,
                stored.response,
                stored.recipe,
            )
            # A failed commit leaves it to finish on its own: a thread cannot be stopped.
            sha256 = sha256_started(encoded) if self._call.streamed else None
        await self.reached(Phase.COMMIT)
        _raise_if_cancelled()
        await self._unit.commit()  # the deferred writes and COMMIT: one round trip
        self._committed = True
        self.bodies.committed()
        self._deps.quotas.stored(self._call.tenant, growth.log_bytes)
        return Reply(result, encoded, sha256)

    def _stored_form(self, result: R, through_seq: int) -> tuple[bytes, replay.StoredForm]:
        """``result`` encoded, and what to store for it under the call's request_id."""
        encoded = self._encode(result)
        return encoded, replay.stored_form(result, encoded, self._encode, through_seq)


def _raise_if_cancelled() -> None:
    """The commit point: a call whose cancellation was requested commits nothing (SPEC §4),
    also when the ``CancelledError`` never reached it. Python 3.11's ``asyncio.wait_for``, in
    the driver's waits, drops a cancellation that lands as its round trip completes (CPython
    gh-86296, app/background.py); the request stays counted on the task (``cancelling``)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
