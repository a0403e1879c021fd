"""What the use cases need from storage, as protocols (the ports).

``SessionRepository`` is one session's reads and writes inside one transaction; PostgreSQL's
``storage.repository.SessionStore`` satisfies it, and so does the in-memory fake the service-layer
tests use (``tests/fakes``). ``tests/contract`` runs one suite against both. ``Storage`` opens
transactions (``StorageUnit``); the app's ``UnitOfWork`` (``unit_of_work.py``) wraps one with
the session gate, the row lock, idempotent replay and the commit.

The rows the reads return are protocols too (``SurfaceNode``, ``LoggedEvent``,
``SystemNodeRow``, ``LedgerRow``): the app reads their values and asks them for domain values
(``decoded()``, ``event()``, ``update``), never decodes stored bytes itself, so the stored
encoding is the adapter's business. Frames (``Frames.frames``) are the API's encoding of the
derived messages, concatenated (``storage.codec.frame``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, Self

from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.events import Event
from admission_service.domain.messages import Message
from admission_service.domain.projection import SystemNode
from admission_service.domain.session import Frames, Session, Written
from admission_service.domain.stored import AdmissionRecord, Growth, StoredResponse


class SurfaceNode(Protocol):
    """A surviving surface node with its price."""

    @property
    def seq(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def is_system(self) -> bool: ...
    @property
    def tokens(self) -> int: ...
    def decoded(self) -> Message | None:
        """The node's derived message (None: a node that derives to nothing)."""
        ...


class LoggedEvent(Protocol):
    """An event as logged, with its commit time."""

    @property
    def seq(self) -> int: ...
    @property
    def commit_time(self) -> datetime: ...
    def event(self) -> Event: ...


class SystemNodeRow(Protocol):
    """A surviving system node with its event's commit time and whether it was an update."""

    @property
    def seq(self) -> int: ...
    @property
    def turn(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def system_text(self) -> bytes: ...
    @property
    def tokens(self) -> int: ...
    @property
    def commit_time(self) -> datetime: ...
    @property
    def update(self) -> bool: ...


class LedgerRow(Protocol):
    """A derived request's ledger row: the app's forecast JSON and the usage observed."""

    @property
    def request_index(self) -> int: ...
    @property
    def admission_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    def forecast_json(self) -> dict[str, Any]:
        """The forecast JSON object the app stored (``add_request``)."""
        ...

    def observed_json(self) -> dict[str, Any] | None:
        """The usage JSON object recorded for it (``observe_usage``), if any."""
        ...


class SessionRepository(Protocol):
    """One (tenant, session) within the caller's transaction. Writes may be deferred until
    ``flush`` (every read but ``frames`` flushes first); nothing here commits."""

    growth: Growth  # what this transaction's writes added to the session's running sizes

    async def flush(self) -> None: ...

    # the session
    async def create(self) -> SessionAggregate | None:
        """Insert the session; None when it already exists."""
        ...

    async def read(self) -> Session | None:
        """The session row, not locked (a snapshot's reads)."""
        ...

    async def lock(
        self,
        *,
        request_id: str | None = None,
        admission_id: str | None = None,
        tool_call_ids: Sequence[str] = (),
    ) -> SessionAggregate | None:
        """The session under its row lock, as the aggregate a step works on (the adapter may
        answer from what it kept of its own last commit, checked at the commit). Reads ahead,
        in the same round trip, what ``stored_response(request_id)``,
        ``admission(admission_id)`` and ``known_tool_calls(tool_call_ids)`` answer."""
        ...

    async def save(self, aggregate: SessionAggregate) -> None:
        """Write the session row the transitions left (its running sizes: what ``growth``
        moved); the adapter may keep ``aggregate`` for the next step once committed."""
        ...

    async def delete(self) -> None: ...

    # idempotency
    async def stored_response(self, request_id: str) -> StoredResponse | None: ...
    async def forget_response(self, request_id: str) -> None: ...
    async def store_response(
        self,
        request_id: str,
        method: str,
        request_digest: bytes,
        response: bytes,
        derived_request: bytes | None = None,
    ) -> None: ...

    # the event log and the surface
    async def write_events(
        self, new_events: Sequence[Event], next_position: int, prices: Mapping[int, int]
    ) -> Written: ...
    async def system_nodes_and_open_calls(self) -> tuple[tuple[SystemNode, ...], tuple[str, ...]]:
        """The surviving system nodes in surface order and the open tool calls in call order,
        after the deferred writes (what ``SessionAggregate.reread`` takes)."""
        ...

    async def surface(self, *, with_empty: bool = True) -> Sequence[SurfaceNode]: ...
    async def frames(
        self, from_position: int, split_position: int | None, *, after_writes: bool = False
    ) -> Frames:
        """The derived messages of the nodes at ``from_position`` and after, as concatenated
        frames, with their count and price (and those before ``split_position``). Deferred
        nodes are read only ``after_writes`` (otherwise ``write_events`` returned them as its
        tail)."""
        ...

    async def frames_before(self, end_position: int, messages: int) -> bytes:
        """The frames of the last ``messages`` derived messages before ``end_position``, in
        surface order (what an Anthropic Messages DELTA renders again)."""
        ...

    async def frames_as_of(self, through_seq: int, first_message: int) -> bytes | None: ...
    async def reprice(self, prices: Sequence[tuple[int, int]]) -> None: ...

    # tool calls
    async def known_tool_calls(self, call_ids: Sequence[str]) -> set[str]: ...
    async def close_calls(self, answers: Sequence[tuple[str, int]]) -> None:
        """Record each ``(call_id, result_seq)`` as the answer of a call the caller knows is
        open (its aggregate says so); nothing is read."""
        ...

    async def mark_answered(self, answers: Sequence[tuple[str, int]]) -> dict[str, bool]:
        """Record each ``(call_id, result_seq)``; for each call made in this session, whether
        it was open before (the domain decides what that means)."""
        ...

    # admissions and the ledger
    async def add_admission(self, admission: AdmissionRecord, user_seqs: Sequence[int]) -> None:
        """A step's first attempt, and the seqs of the users it admitted."""
        ...

    async def admission(self, admission_id: str) -> AdmissionRecord | None: ...
    async def count_attempt(self, admission_id: str) -> None: ...
    async def add_request(
        self, request_index: int, admission_id: str, attempt: int, forecast: Mapping[str, Any]
    ) -> None: ...
    async def observe_usage(self, admission_id: str, observed: Mapping[str, Any]) -> None: ...
    async def ledger(self, limit: int) -> Sequence[LedgerRow]: ...

    # reads for Inspect, ListEvents, ListTrajectory and replays
    async def system_node_details(self) -> Sequence[SystemNodeRow]: ...
    async def events_page(
        self, after_seq: int, limit: int, budget: int
    ) -> tuple[Sequence[LoggedEvent], bool]: ...
    async def requests_from(self, first_index: int, limit: int) -> Sequence[LedgerRow]: ...
    async def events_before(
        self, before_seq: int, limit: int, budget: int
    ) -> tuple[Sequence[LoggedEvent], bool]: ...
    async def surface_positions(self, first_seq: int, end_seq: int) -> Mapping[int, int]: ...
    async def prompt_events(self, before_seq: int) -> Sequence[LoggedEvent]: ...
    async def events_after(self, after_seq: int, limit: int) -> Sequence[LoggedEvent]: ...


class TenantUsage(Protocol):
    """The tenant-wide figures the quotas read, in the unit's transaction."""

    async def lock_sessions(self) -> None:
        """Serialise the tenant's session creations until the transaction ends."""
        ...

    async def count_sessions(self) -> int: ...
    async def stored_bytes(self) -> int: ...


class StorageUnit(Protocol):
    """One transaction: rolled back on leaving the block unless ``commit`` was awaited."""

    @property
    def store(self) -> SessionRepository: ...
    @property
    def usage(self) -> TenantUsage: ...

    async def __aenter__(self) -> Self: ...
    async def __aexit__(self, *exc: Any) -> None: ...
    async def commit(self) -> None: ...
    async def verify(self) -> None:
        """Check that the session this unit read is the stored one when it was not read under
        its lock (a worker's cached session); raises ``SessionMoved`` when not."""
        ...

    async def list_sessions(
        self,
        after: tuple[datetime, str] | None,
        limit: int,
        *,
        newest_first: bool = False,
        id_prefix: str = "",
    ) -> list[Session]:
        """The tenant's sessions in creation order (``newest_first``: the reverse), after the
        keyset ``after``; only those whose id starts with ``id_prefix``."""
        ...


class Storage(Protocol):
    def unit(self, tenant: str, session_id: str = "", *, snapshot: bool = False) -> StorageUnit:
        """A transaction on ``(tenant, session_id)``; ``snapshot``: a read-only snapshot
        (every statement sees the same committed state)."""
        ...
