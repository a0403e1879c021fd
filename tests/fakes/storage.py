"""An in-memory ``Storage`` (``admission_service.app.ports``): the app's use cases run on it
without PostgreSQL, and ``tests/contract`` checks it answers like ``SessionStore``.

Rows keep domain values (events, messages), not an encoding of them: only frames are bytes, the
API's encoding (``storage.codec.frame``) that a derived request splices. A unit works on a copy
of the whole state and swaps it in on ``commit`` (writers of one storage take turns, as the
session row lock makes them); leaving without ``commit`` drops the copy. Writes are deferred to
``flush`` exactly where ``SessionStore`` defers them, and every read that flushes there flushes
here, so ``frames`` sees what the real one sees (not this transaction's appended tail).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Self

from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.events import Append, Event, EventKind, Replace
from admission_service.domain.messages import Message
from admission_service.domain.projection import SystemNode
from admission_service.domain.series import SeriesState
from admission_service.domain.session import Frames, Session, Shadowed, Written
from admission_service.domain.stored import AdmissionRecord, Growth, StoredResponse
from admission_service.storage import codec

_PROMPT_KINDS = (EventKind.SYSTEM_MESSAGE, EventKind.REQUEST_HEADER, EventKind.REQUEST_CONTEXT)


def _as_stored(value: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON object as the real store gives it back (through its canonical JSON)."""
    return codec.loads(codec.dumps(value))  # type: ignore[no-any-return]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class EventRow:
    """A logged event: kept as the domain value (the fake stores no encoding of it)."""

    logged: Event
    size: int  # what it adds to the session's log bytes
    commit_time: datetime = field(default_factory=_now)

    @property
    def seq(self) -> int:
        return self.logged.seq

    def event(self) -> Event:
        return self.logged


@dataclass(slots=True)
class NodeRow:
    seq: int
    position: int
    is_system: bool
    system_text: bytes | None
    message: Message | None  # the derived message
    message_pb: bytes | None  # its frame (``storage.codec.frame``): what a request splices
    tokens: int
    turn: int
    step: int
    update: bool

    def decoded(self) -> Message | None:
        return self.message


@dataclass(slots=True)
class RequestRow:
    request_index: int
    admission_id: str
    attempt: int
    forecast: dict[str, Any]
    observed: dict[str, Any] | None = None
    create_time: datetime = field(default_factory=_now)

    def forecast_json(self) -> dict[str, Any]:
        return dict(self.forecast)

    def observed_json(self) -> dict[str, Any] | None:
        return dict(self.observed) if self.observed is not None else None


@dataclass(frozen=True, slots=True)
class SystemNodeDetail:
    seq: int
    turn: int
    step: int
    system_text: bytes
    tokens: int
    commit_time: datetime
    update: bool


@dataclass(slots=True)
class _Session:
    """One session's rows."""

    record: Session
    events: list[EventRow] = field(default_factory=list)
    nodes: list[NodeRow] = field(default_factory=list)
    calls: dict[str, list[int | None]] = field(default_factory=dict)  # id -> [call, result]
    admissions: dict[str, AdmissionRecord] = field(default_factory=dict)
    requests: list[RequestRow] = field(default_factory=list)

    def by_position(self) -> list[NodeRow]:
        return sorted(self.nodes, key=lambda node: node.position)


@dataclass(slots=True)
class State:
    """Every session's rows, and the stored responses (kept apart from the sessions, as a
    DeleteSession's own key outlives the session it deleted)."""

    sessions: dict[tuple[str, str], _Session] = field(default_factory=dict)
    responses: dict[tuple[str, str], dict[str, StoredResponse]] = field(default_factory=dict)


class FakeSessionStore:
    """``SessionStore``'s behaviour over ``State``."""

    def __init__(self, state: State, tenant: str, session_id: str) -> None:
        self._state, self.tenant, self.session_id = state, tenant, session_id
        self._deferred: list[Callable[[], None]] = []
        self.growth = Growth()
        self._saved_growth = Growth()
        self.saved: SessionAggregate | None = None

    @property
    def _key(self) -> tuple[str, str]:
        return (self.tenant, self.session_id)

    @property
    def _mine(self) -> _Session:
        return self._state.sessions[self._key]

    async def flush(self) -> None:
        deferred, self._deferred = self._deferred, []
        for write in deferred:
            write()

    # ---- the session row

    async def create(self) -> SessionAggregate | None:
        if self._key in self._state.sessions:
            return None
        now = _now()
        record = Session(self.session_id, 0, 0, 0, SeriesState(), None, None, None, 0, 0, now, now)
        self._state.sessions[self._key] = _Session(record)
        self._state.responses.pop(self._key, None)  # request ids are new in a new lifetime
        return SessionAggregate.read(record, (), (), None)

    async def read(self) -> Session | None:
        session = self._state.sessions.get(self._key)
        return session.record if session is not None else None

    async def lock(
        self,
        *,
        request_id: str | None = None,
        admission_id: str | None = None,
        tool_call_ids: Sequence[str] = (),
    ) -> SessionAggregate | None:
        session = self._state.sessions.get(self._key)
        if session is None:
            return None
        admission = session.admissions.get(admission_id) if admission_id is not None else None
        return SessionAggregate.read(
            session.record, self._system_nodes(), self._open_calls(), admission
        )

    async def save(self, aggregate: SessionAggregate) -> None:
        self.saved, saved = aggregate, aggregate.session
        unsaved, self._saved_growth = self.growth.minus(self._saved_growth), replace(self.growth)

        def write() -> None:
            session = self._mine
            old = session.record
            session.record = replace(
                saved,
                # One column: without its prefix the previous request is not kept.
                last_request=saved.last_request if saved.prefix is not None else None,
                prefix=saved.prefix if saved.last_request is not None else None,
                create_time=old.create_time,
                update_time=_now(),
                surface_bytes=old.surface_bytes + unsaved.surface_bytes,
                surface_nodes=old.surface_nodes + unsaved.surface_nodes,
                log_bytes=old.log_bytes + unsaved.log_bytes,
            )

        self._deferred.append(write)

    async def delete(self) -> None:
        self.saved = None
        self._state.sessions.pop(self._key, None)
        self._state.responses.pop(self._key, None)

    def check_saved(self) -> None:
        """The aggregate saved, as its commit leaves it (what PostgreSQL's adapter would cache
        for the next step), is what is stored: the check ``tests/integration/
        test_session_cache.py`` makes on PostgreSQL after each step of a seeded mix, made here
        at every commit of every use-case test."""
        if self.saved is None or self._key not in self._state.sessions:
            return
        kept, stored = self.saved.committed(self.growth), self._mine
        counters = ("revision", "next_seq", "next_position", "surface_tokens", "request_count")
        sizes = ("surface_bytes", "surface_nodes", "log_bytes")
        for name in counters + sizes:
            assert getattr(kept.session, name) == getattr(stored.record, name), name
        assert kept.system_nodes == self._system_nodes(), "system nodes"
        assert kept.open_calls == self._open_calls(), "open calls"
        if kept.pending is not None:
            assert kept.pending == self._frames(kept.pending_from, None), "frames since request"
        if (admission := kept.admission) is not None:
            assert stored.admissions.get(admission.admission_id) == admission, "admission"

    # ---- idempotency

    async def stored_response(self, request_id: str) -> StoredResponse | None:
        await self.flush()
        return self._state.responses.get(self._key, {}).get(request_id)

    async def forget_response(self, request_id: str) -> None:
        self._state.responses.get(self._key, {}).pop(request_id, None)

    async def store_response(
        self,
        request_id: str,
        method: str,
        request_digest: bytes,
        response: bytes,
        derived_request: bytes | None = None,
    ) -> None:
        stored = StoredResponse(method, request_digest, response, derived_request)

        def write() -> None:
            responses = self._state.responses.setdefault(self._key, {})
            if request_id in responses:
                raise AssertionError(f"duplicate key: request_id {request_id!r}")
            responses[request_id] = stored

        self._deferred.append(write)

    # ---- the surface

    async def system_nodes_and_open_calls(self) -> tuple[tuple[SystemNode, ...], tuple[str, ...]]:
        await self.flush()
        return self._system_nodes(), self._open_calls()

    def _open_calls(self) -> tuple[str, ...]:
        session = self._mine
        on_surface = {node.seq for node in session.nodes}
        open_calls = sorted(
            (call_seq, call_id)
            for call_id, (call_seq, result_seq) in session.calls.items()
            if result_seq is None and call_seq in on_surface
        )
        return tuple(call_id for _, call_id in open_calls)

    def _system_nodes(self) -> tuple[SystemNode, ...]:
        return tuple(
            SystemNode(node.seq, (node.system_text or b"").decode())
            for node in self._mine.by_position()
            if node.is_system
        )

    async def surface(self, *, with_empty: bool = True) -> list[NodeRow]:
        await self.flush()
        return [
            replace(node)
            for node in self._mine.by_position()
            if with_empty or node.message is not None
        ]

    async def write_events(
        self,
        new_events: Sequence[Event],
        next_position: int,
        prices: Mapping[int, int],
    ) -> Written:
        shadowed: Shadowed | None = None
        tokens = 0
        if not new_events:
            return Written(next_position, shadowed, tokens)
        rows = [EventRow(event, len(repr(event).encode())) for event in new_events]
        self._deferred.append(lambda: self._mine.events.extend(rows))
        self.growth.events += len(rows)
        self.growth.log_bytes += sum(row.size for row in rows)
        pending: list[NodeRow] = []
        calls: list[tuple[str, int]] = []
        for event in new_events:
            if event.op is None:
                continue
            message = event.derived_message()
            price = prices[event.seq]
            node = NodeRow(
                event.seq,
                -1,
                event.is_system,
                event.system_text.encode() if event.is_system else None,
                message,
                codec.frame(message) if message else None,
                price,
                event.turn,
                event.step,
                event.update,
            )
            tokens += price
            self.growth.surface_nodes += 1
            self.growth.surface_bytes += len(node.message_pb or b"")
            if isinstance(event.op, Append):
                node.position = next_position
                next_position += 1
                pending.append(node)
            else:
                self._defer_nodes(pending, calls)
                await self.flush()
                first, removed = self._shadow(event.op)
                tokens -= removed
                node.position = first.position
                shadowed = first.earliest(shadowed)
                self._mine.nodes.append(node)
            if message is not None:
                calls += ((call_id, event.seq) for call_id in message.tool_call_ids())
        tail = [node for node in pending if node.message_pb is not None]
        self._defer_nodes(pending, calls)
        return Written(
            next_position,
            shadowed,
            tokens,
            Frames(
                tuple(node.message_pb for node in tail if node.message_pb),
                len(tail),
                sum(node.tokens for node in tail),
                0,
                0,
            ),
        )

    def _defer_nodes(self, pending: list[NodeRow], calls: list[tuple[str, int]]) -> None:
        nodes, made = list(pending), list(calls)
        pending.clear()
        calls.clear()

        def write() -> None:
            session = self._mine
            session.nodes.extend(nodes)
            for call_id, call_seq in made:
                if call_id in session.calls:
                    raise AssertionError(f"duplicate key: tool call {call_id!r}")
                session.calls[call_id] = [call_seq, None]

        self._deferred.append(write)

    def _shadow(self, op: Replace) -> tuple[Shadowed, int]:
        session = self._mine
        by_seq = {node.seq: node for node in session.nodes}
        start, end = by_seq[op.start_seq], by_seq[op.end_seq]
        removed = [n for n in session.nodes if start.position <= n.position <= end.position]
        session.nodes = [n for n in session.nodes if n not in removed]
        self.growth.surface_nodes -= len(removed)
        self.growth.surface_bytes -= sum(len(n.message_pb or b"") for n in removed)
        return Shadowed(start.position, start.is_system), sum(n.tokens for n in removed)

    def _frames(self, from_position: int, split_position: int | None) -> Frames:
        split = split_position if split_position is not None else -1
        read = [
            node
            for node in self._mine.by_position()
            if node.position >= from_position and node.message_pb is not None
        ]
        before = [node for node in read if node.position < split]
        return Frames(  # a part per node, as a FULL read has a part per chunk
            tuple(node.message_pb for node in read if node.message_pb),
            len(read),
            sum(node.tokens for node in read),
            len(before),
            sum(node.tokens for node in before),
        )

    async def frames(
        self, from_position: int, split_position: int | None, *, after_writes: bool = False
    ) -> Frames:
        if after_writes:
            await self.flush()
        return self._frames(from_position, split_position)  # else no flush, like SessionStore

    async def frames_before(self, end_position: int, messages: int) -> bytes:
        kept = [
            node.message_pb
            for node in self._mine.by_position()
            if node.position < end_position and node.message_pb is not None
        ]
        return b"".join(kept[max(len(kept) - messages, 0) :] if messages > 0 else ())

    async def frames_as_of(self, through_seq: int, first_message: int) -> bytes | None:
        await self.flush()
        session = self._mine
        if any(e.seq > through_seq and isinstance(e.logged.op, Replace) for e in session.events):
            return None
        kept = [
            node.message_pb
            for node in session.by_position()
            if node.seq <= through_seq and node.message_pb is not None
        ]
        return b"".join(kept[first_message:])

    async def reprice(self, prices: Sequence[tuple[int, int]]) -> None:
        await self.flush()
        new = dict(prices)
        for node in self._mine.nodes:
            if node.seq in new:
                node.tokens = new[node.seq]

    # ---- tool calls

    async def known_tool_calls(self, call_ids: Sequence[str]) -> set[str]:
        await self.flush()
        return {call_id for call_id in call_ids if call_id in self._mine.calls}

    async def close_calls(self, answers: Sequence[tuple[str, int]]) -> None:
        answered = list(answers)

        def write() -> None:
            calls = self._mine.calls
            for call_id, seq in answered:
                calls[call_id][1] = seq

        self._deferred.append(write)

    async def mark_answered(self, answers: Sequence[tuple[str, int]]) -> dict[str, bool]:
        if not answers:
            return {}
        await self.flush()
        session = self._mine
        on_surface = {node.seq for node in session.nodes}
        was_open: dict[str, bool] = {}
        for call_id, seq in answers:
            call = session.calls.get(call_id)
            if call is None:
                continue
            was_open[call_id] = call[1] is None and call[0] in on_surface
            call[1] = seq
        return was_open

    # ---- admissions and the ledger

    async def add_admission(self, admission: AdmissionRecord, user_seqs: Sequence[int]) -> None:
        admitted = admission.admission_id
        self._deferred.append(lambda: self._mine.admissions.__setitem__(admitted, admission))

    async def admission(self, admission_id: str) -> AdmissionRecord | None:
        await self.flush()
        return self._mine.admissions.get(admission_id)

    async def count_attempt(self, admission_id: str) -> None:
        def write() -> None:
            admissions = self._mine.admissions
            if admission_id in admissions:
                old = admissions[admission_id]
                admissions[admission_id] = replace(old, attempts=old.attempts + 1)

        self._deferred.append(write)

    async def add_request(
        self, request_index: int, admission_id: str, attempt: int, forecast: Mapping[str, Any]
    ) -> None:
        row = RequestRow(request_index, admission_id, attempt, _as_stored(forecast))
        self._deferred.append(lambda: self._mine.requests.append(row))

    async def observe_usage(self, admission_id: str, observed: Mapping[str, Any]) -> None:
        def write() -> None:
            rows = [row for row in self._mine.requests if row.admission_id == admission_id]
            if rows:
                max(rows, key=lambda row: row.request_index).observed = _as_stored(observed)

        self._deferred.append(write)

    async def ledger(self, limit: int) -> list[RequestRow]:
        await self.flush()
        rows = sorted(self._mine.requests, key=lambda row: row.request_index)
        return rows[-limit:] if limit else []

    # ---- reads for Inspect, ListEvents, ListTrajectory and replays

    async def system_node_details(self) -> list[SystemNodeDetail]:
        await self.flush()
        session = self._mine
        events = {event.seq: event for event in session.events}
        return [
            SystemNodeDetail(
                node.seq,
                node.turn,
                node.step,
                node.system_text or b"",
                node.tokens,
                events[node.seq].commit_time,
                node.update,
            )
            for node in session.by_position()
            if node.is_system
        ]

    def _events(self) -> list[EventRow]:
        return sorted(self._mine.events, key=lambda event: event.seq)

    async def events_page(
        self, after_seq: int, limit: int, budget: int
    ) -> tuple[list[EventRow], bool]:
        await self.flush()
        return _bounded([event for event in self._events() if event.seq > after_seq], limit, budget)

    async def requests_from(self, first_index: int, limit: int) -> list[RequestRow]:
        await self.flush()
        rows = sorted(self._mine.requests, key=lambda row: row.request_index)
        return [row for row in rows if row.request_index >= first_index][:limit]

    async def events_before(
        self, before_seq: int, limit: int, budget: int
    ) -> tuple[list[EventRow], bool]:
        await self.flush()
        older = [event for event in self._events() if event.seq < before_seq][::-1]
        page, more = _bounded(older, limit, budget)
        return page[::-1], more

    async def surface_positions(self, first_seq: int, end_seq: int) -> dict[int, int]:
        await self.flush()
        return {
            node.seq: node.position for node in self._mine.nodes if first_seq <= node.seq < end_seq
        }

    async def prompt_events(self, before_seq: int) -> list[EventRow]:
        await self.flush()
        return [
            event
            for event in self._events()
            if event.seq < before_seq
            and (event.logged.kind in _PROMPT_KINDS or isinstance(event.logged.op, Replace))
        ]

    async def events_after(self, after_seq: int, limit: int) -> list[EventRow]:
        await self.flush()
        return [event for event in self._events() if event.seq > after_seq][:limit]


def _bounded(rows: list[EventRow], limit: int, budget: int) -> tuple[list[EventRow], bool]:
    """The first of ``rows`` within ``limit`` and ``budget`` bytes (at least one), and whether
    more remain: the events pages' bound."""
    rows = rows[: limit + 1]
    running = list(itertools.accumulate(row.size for row in rows))
    fits = [number == 0 or running[number] <= budget for number in range(len(rows))]
    page = [row for row, ok in itertools.takewhile(lambda p: p[1], zip(rows, fits, strict=True))]
    page = page[:limit]
    return page, len(rows) > len(page)


class FakeUsage:
    def __init__(self, state: State, tenant: str) -> None:
        self._state, self._tenant = state, tenant

    async def lock_sessions(self) -> None:
        return None

    async def count_sessions(self) -> int:
        return sum(1 for tenant, _ in self._state.sessions if tenant == self._tenant)

    async def stored_bytes(self) -> int:
        sessions = self._state.sessions.items()
        return sum(s.record.log_bytes for (t, _), s in sessions if t == self._tenant)


class FakeUnit:
    def __init__(self, storage: FakeStorage, tenant: str, session_id: str, snapshot: bool) -> None:
        self._storage, self._tenant, self._session_id = storage, tenant, session_id
        self._snapshot = snapshot
        self._locked = False

    async def __aenter__(self) -> Self:
        if not self._snapshot:
            await self._storage.lock.acquire()
            self._locked = True
        self._state: State = copy.deepcopy(self._storage.state)
        self.store = FakeSessionStore(self._state, self._tenant, self._session_id)
        self.usage = FakeUsage(self._state, self._tenant)
        return self

    async def commit(self) -> None:
        assert not self._snapshot, "a snapshot is read-only"
        await self.store.flush()
        self.store.check_saved()
        self._storage.state = self._state
        self._storage.commits += 1

    async def verify(self) -> None:
        return None  # every unit reads the state under the lock: nothing is cached

    async def list_sessions(
        self,
        after: tuple[datetime, str] | None,
        limit: int,
        *,
        newest_first: bool = False,
        id_prefix: str = "",
    ) -> list[Session]:
        records = sorted(
            (
                s.record
                for (t, sid), s in self._state.sessions.items()
                if t == self._tenant and sid.startswith(id_prefix)
            ),
            key=lambda r: (r.create_time, r.session_id),
            reverse=newest_first,
        )
        if after is not None:
            # After the cursor in the listing's order.
            records = [
                r
                for r in records
                if (
                    (r.create_time, r.session_id) < after
                    if newest_first
                    else (r.create_time, r.session_id) > after
                )
            ]
        return records[:limit]

    async def __aexit__(self, *exc: object) -> None:
        if self._locked:
            self._locked = False
            self._storage.lock.release()


class FakeStorage:
    """The ``Storage`` port in memory; ``commits`` counts committed units."""

    def __init__(self) -> None:
        self.state = State()
        self.lock = asyncio.Lock()
        self.commits = 0

    def unit(self, tenant: str, session_id: str = "", *, snapshot: bool = False) -> FakeUnit:
        return FakeUnit(self, tenant, session_id, snapshot)
