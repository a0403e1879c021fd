"""The shared machinery of the use cases: their dependencies, the transaction shapes, what a
mutation answers (``Reply``) and what every use case reads of a session row."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from admission_service.app import validation
from admission_service.app.commands import Page
from admission_service.app.database import PostgresStorage
from admission_service.app.gate import SessionGate
from admission_service.app.hooks import NO_HOOKS, PhaseHooks
from admission_service.app.limits import Limits, Quotas
from admission_service.app.page_tokens import PageTokens, Shape
from admission_service.app.ports import SessionRepository, Storage
from admission_service.app.quotas import TenantQuotas
from admission_service.app.unit_of_work import Call, Resources, UnitOfWork
from admission_service.domain.accounting import TokenCounter, node_prices
from admission_service.domain.catalog import Catalog
from admission_service.domain.errors import SessionNotFound
from admission_service.domain.events import Event
from admission_service.domain.session import Session, Written
from admission_service.tokenizers import counter_for

R = TypeVar("R")
T = TypeVar("T")
# A page's items and, when more follow, the position of its last item.
PageRead = tuple[tuple[T, ...], int | None]
# Each mutating RPC's response encoder, by method (``Call.method``): the API edge's, given at
# composition. The unit of work stores its bytes for a request_id and replays them verbatim.
ResponseEncoders = Mapping[str, Callable[[Any], bytes]]


@dataclass(frozen=True, slots=True)
class Reply(Generic[R]):
    """What a mutation answers: its typed ``result`` and, when the unit of work made them, the
    response bytes (``encoded``: stored for the call's request_id, sent as they are). A repeated
    request_id replays the stored bytes and has no result; without a request_id, or with
    ``validate_only``, nothing is stored, so nothing is encoded and the edge encodes the
    result."""

    result: R | None
    encoded: bytes | None = None


class Machinery:
    """What every use case runs on: the storage, the per-session gate, the quotas, the limits,
    the phase hooks, the catalog, the page tokens and the response encoders; and the two
    transaction shapes, a mutation (``_mutate``: one ``UnitOfWork``) and a read of one session
    (``_read_session``: one snapshot)."""

    def __init__(
        self,
        engine: AsyncEngine | None,
        catalog: Catalog,
        limits: Limits | None = None,
        hooks: PhaseHooks = NO_HOOKS,
        quotas: Quotas | None = None,
        page_tokens: PageTokens | None = None,
        *,
        storage: Storage | None = None,
        encoders: ResponseEncoders,
    ) -> None:
        """On PostgreSQL through ``engine``, or on another ``storage`` (the tests' fake)."""
        if storage is None:
            assert engine is not None, "an engine or a storage"
            storage = PostgresStorage(engine)
        self.storage = storage
        # The server passes the configured or stored keys (api/server.py); without them,
        # tokens are this app's own.
        self.page_tokens = page_tokens or PageTokens.random()
        self.catalog = catalog
        self.limits = limits or Limits()
        self.hooks = hooks
        self.encoders = encoders
        self.quotas = TenantQuotas(quotas or Quotas())
        self.gate = SessionGate()  # a hot session's queued writers hold no pool connection
        self.resources = Resources(self.storage, self.gate, self.quotas, self.limits, self.hooks)

    # ---- the transaction shapes ---------------------------------------------------------

    async def _mutate(
        self,
        call: Call,
        expected_revision: int | None,
        work: Callable[[UnitOfWork], Awaitable[R]],
    ) -> Reply[R]:
        """One mutation: ``work`` runs in a unit of work that commits its result, with the
        encoded response stored for the request_id, unless the call only validates (or raises,
        or is cancelled)."""
        encode = self.encoders[call.method]
        if call.idempotency is not None:
            validation.check_request_id(call.idempotency.request_id, self.limits)
        async with UnitOfWork(self.resources, call) as uow:
            replayed = await uow.replayed(encode)
            if replayed is not None:
                return Reply(None, replayed)
            uow.load(expected_revision)
            result = await work(uow)
            await uow.check_growth()
            if call.validate_only:
                return Reply(result)
            # Only a response stored for a request_id is encoded here, under the session's
            # lock; otherwise the edge encodes it once the lock and the connection are free.
            encoded = encode(result) if call.idempotency is not None else None
            await uow.commit(result, encoded, encode)
        return Reply(result, encoded)

    async def _read_session(
        self,
        tenant: str,
        session_id: str,
        work: Callable[[SessionRepository, Session], Awaitable[R]],
    ) -> R:
        validation.check_session_id(session_id, self.limits)
        async with (
            self.quotas.call(tenant),
            self.storage.unit(tenant, session_id, snapshot=True) as unit,
        ):
            record = await unit.store.read(lock=False)
            if record is None:
                raise SessionNotFound(session_id)
            return await work(unit.store, record)

    async def _read_page(
        self,
        kind: str,
        tenant: str,
        session_id: str,
        page_size: int,
        page_token: str,
        read: Callable[[SessionRepository, Session, int, int], Awaitable[PageRead[T]]],
    ) -> Page[T]:
        """A page of one session's ``kind``: ``read(store, record, limit, after)`` returns
        at most ``limit`` items after the position ``after`` (-1 for the first page) and the
        position of its last item when more follow (the next page token's cursor)."""
        limit = validation.check_page_size(page_size, self.limits)
        # Before the token is checked: its scope holds the session id (a 64 KiB one broke the
        # token's signature, INTERNAL; found by the fuzzer).
        validation.check_session_id(session_id, self.limits)
        scope = f"{kind}/{tenant}/{session_id}"
        after = -1
        if page_token:
            after = self.page_tokens.decode(scope, page_token, "page_token", _AFTER)["after"]

        async def page(store: SessionRepository, record: Session) -> Page[T]:
            items, last = await read(store, record, limit, after)
            token = self.page_tokens.encode(scope, {"after": last}) if last is not None else ""
            return Page(items, token)

        return await self._read_session(tenant, session_id, page)


_AFTER: Shape = {"after": int}  # the cursor of a session's pages: the position of the last item


def session_counter(record: Session) -> TokenCounter:
    """The tokenizer of the session's route in force (that of its last admission), which
    priced every surviving node (``use_cases/admit.py``: ``_reprice``): Record, Compact and
    Inspect price with it."""
    context = record.series.last_context
    return counter_for(context.context.provider if context else "")


async def write_outcome(
    store: SessionRepository, session: Session, events: Sequence[Event], counter: TokenCounter
) -> Written:
    """Write a transition's events at the surface's end, each new node priced by the domain with
    ``counter``."""
    return await store.write_events(events, session.next_position, node_prices(events, counter))
