"""The unit of work of one mutation: ``async with uow: ...; await uow.commit(...)``.

Entering takes, in order: a place in the tenant's concurrent-calls quota, the per-session
write gate (one writer per session per process, queued before the pool), a transaction
(``Storage.unit``), and the session row under lock (``SELECT … FOR UPDATE``: one writer per
session across replicas) — or, for ``CreateSession``, the new row. ``replayed`` answers a
repeated ``request_id`` with the stored response; ``load`` checks the session exists at the
expected revision. ``commit`` stores the response for ``request_id``, sends the deferred writes
and commits. Leaving the block without ``commit`` rolls back: an exception, a cancellation at
any phase, and ``validate_only`` (which simply never commits) all write nothing.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Self

from admission_service.app import bounds, replay
from admission_service.app.commands import Idempotency
from admission_service.app.gate import SessionGate
from admission_service.app.hooks import Phase, PhaseHooks
from admission_service.app.limits import Limits
from admission_service.app.ports import SessionRepository, Storage, StorageUnit
from admission_service.app.quotas import TenantQuotas
from admission_service.domain.errors import (
    RequestIdReused,
    RevisionMismatch,
    SessionAlreadyExists,
    SessionNotFound,
)
from admission_service.domain.session import Session


@dataclass(frozen=True, slots=True)
class Resources:
    """What a unit of work runs on (one set per ``AdmissionApp``)."""

    storage: Storage
    gate: SessionGate
    quotas: TenantQuotas
    limits: Limits
    hooks: PhaseHooks


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


class UnitOfWork:
    """One mutating call's transaction on one session (see the module docstring). The use case
    reads and writes through ``store`` and keeps ``record`` as the session row it leaves."""

    store: SessionRepository
    record: Session

    def __init__(self, resources: Resources, call: Call) -> None:
        self._resources = resources
        self.method, self.tenant, self.session_id = call.method, call.tenant, call.session_id
        self.idempotency = call.idempotency
        self.validate_only = call.validate_only
        self._create = call.create
        self._admission_id = call.admission_id
        self._tool_call_ids = call.tool_call_ids
        self._stack = AsyncExitStack()
        self._committed = False

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(
                self._resources.quotas.call(self.tenant)
            )  # the gate's queue
            await stack.enter_async_context(self._resources.gate.hold(self.tenant, self.session_id))
            unit: StorageUnit = await stack.enter_async_context(
                self._resources.storage.unit(self.tenant, self.session_id)
            )
            self._unit, self.store = unit, unit.store
            if self._create:
                self._loaded = await self.store.create()
                self._created = self._loaded is not None
            else:
                # The lock, the stored response of a repeated request_id and the admission the
                # call reads: one round trip (with the transaction's BEGIN).
                idempotency = None if self.validate_only else self.idempotency
                self._loaded = await self.store.read(
                    lock=True,
                    request_id=idempotency.request_id if idempotency is not None else None,
                    admission_id=self._admission_id,
                    tool_call_ids=self._tool_call_ids,
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
        await self._resources.hooks.reached(self.method, phase)

    async def replayed(self, encode: object) -> bytes | None:
        """The response stored for a repeated ``request_id`` (rebuilt, ``replay.py``); None
        when there is none (or with ``validate_only``, which never replays)."""
        if self.idempotency is None or self.validate_only or self._created:
            return None
        stored = await self.store.stored_response(self.idempotency.request_id)
        if stored is None:
            return None
        if stored.method != self.method or stored.request_digest != self.idempotency.request_digest:
            raise RequestIdReused(self.idempotency.request_id)
        return await replay.replayed(self.store, stored, encode)

    def load(self, expected_revision: int | None = None) -> Session:
        """The session row the call works on: refused when it does not exist (or, creating,
        already existed) or is not at ``expected_revision``."""
        if self._loaded is None:
            if self._create:
                raise SessionAlreadyExists(self.session_id)
            raise SessionNotFound(self.session_id)
        if expected_revision is not None and expected_revision != self._loaded.revision:
            raise RevisionMismatch(expected_revision, self._loaded.revision)
        self.record = self._loaded
        return self.record

    async def check_new_session(self) -> None:
        await self._resources.quotas.check_new_session(self._unit.usage)

    async def check_growth(self) -> None:
        """The session's growth bounds and the tenant's stored-bytes quota, for what this
        transaction wrote (also with ``validate_only``: the answer is the commit's)."""
        assert self._loaded is not None
        growth = self.store.growth
        bounds.check_session_growth(self._loaded, growth, self._resources.limits)
        await self._resources.quotas.check_stored_bytes(
            self._unit.usage, self.tenant, growth.log_bytes
        )

    async def commit(self, result: object, payload: bytes | None, encode: object) -> None:
        """Store ``payload`` (the encoded ``result``) under the call's ``request_id``, and
        commit with the deferred writes."""
        assert not self.validate_only, "validate_only never commits"
        if self.idempotency is not None:
            assert self._loaded is not None
            assert payload is not None
            through_seq = self._loaded.next_seq + self.store.growth.events - 1
            await self.store.store_response(
                self.idempotency.request_id,
                self.method,
                self.idempotency.request_digest,
                *replay.stored_form(result, payload, encode, through_seq),
            )
        await self.reached(Phase.COMMIT)
        await self._unit.commit()  # the deferred writes and COMMIT: one round trip
        self._committed = True
