"""The SQL of the event log and the surface it builds: the ``events``, ``surface_nodes`` and
``tool_calls`` tables, in three parts of ``SessionStore``:

* ``SurfaceWrites`` logs events and applies their surface operations (each node encoded as it is
  written, at the price the caller gave) and the tool calls they make;
* ``FrameReads`` reads the surface: the system nodes, the nodes themselves, and derived requests
  as the stored protobuf frames concatenated by the database (a FULL request's, through the
  chunks of ``frame_chunks.py``);
* ``InspectionReads`` reads for Inspect, ListEvents, ListTrajectory and a replay's fold: the
  system nodes' details and pages of the event log, as typed rows (``rows``).

PostgreSQL concatenates the frames (``string_agg`` in position order over the unique (tenant,
session, position) index): no per-row work in Python, whatever the surface length. The frame reads
run on the transaction's psycopg connection with the binary result format (``raw``): in the text
format PostgreSQL would hex-encode the bytes and psycopg decode them, which doubles what a long
surface moves and costs more than the aggregate itself. They are written in psycopg's
placeholder syntax.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, case, delete, func, or_, select

from admission_service.domain.events import Append, Event, Replace
from admission_service.domain.projection import SystemNode
from admission_service.domain.session import Frames, Shadowed, Written
from admission_service.off_loop import off_the_loop_if_large
from admission_service.storage import codec
from admission_service.storage.batch import param
from admission_service.storage.frame_chunks import (
    FULL_FRAMES,
    drop_chunks,
    full_frames,
    seal_statement,
)
from admission_service.storage.held_frames import HELD_FRAME_MIN, NOT_HELD
from admission_service.storage.raw import RawStatement
from admission_service.storage.rows import NodeRecord, StoredEvent, SystemNodeDetail, columns
from admission_service.storage.scope import NOT_READ, SessionScope, where_session
from admission_service.storage.tables import events
from admission_service.storage.tables import surface_nodes as nodes

# Record the answers the domain chose (one per call); each updated call is returned with
# whether it was open on the surface before, for the domain's check (domain/recording.py).
_MARK_ANSWERED = (
    "UPDATE tool_calls AS c SET result_seq = u.result_seq"
    " FROM unnest(CAST(%(ids)s AS text[]), CAST(%(seqs)s AS bigint[])) AS u(call_id, result_seq),"
    " (SELECT o.call_id, o.result_seq IS NULL AND EXISTS (SELECT 1 FROM surface_nodes AS n"
    " WHERE n.tenant_id = %(t)s AND n.session_id = %(s)s AND n.seq = o.call_seq) AS was_open"
    " FROM tool_calls AS o WHERE o.tenant_id = %(t)s AND o.session_id = %(s)s"
    " AND o.call_id = ANY(CAST(%(ids)s AS text[]))) AS before"
    " WHERE c.tenant_id = %(t)s AND c.session_id = %(s)s AND c.call_id = u.call_id"
    " AND before.call_id = c.call_id"
    " RETURNING c.call_id, before.was_open"
)

# A change of route family prices every surviving node again (app/use_cases/admit.py:
# _reprice).
_REPRICE = (
    "UPDATE surface_nodes AS n SET tokens = u.tokens"
    " FROM unnest(CAST(%(seqs)s AS bigint[]), CAST(%(tokens)s AS bigint[])) AS u(seq, tokens)"
    " WHERE n.tenant_id = %(t)s AND n.session_id = %(s)s AND n.seq = u.seq"
)

# Which of some tool call ids this session already made (on the surface or not).
_KNOWN_CALLS = (
    "SELECT call_id FROM tool_calls"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s AND call_id = ANY(CAST(%(ids)s AS text[]))"
)


def known_calls_statement(tenant: str, session_id: str, call_ids: Sequence[str]) -> RawStatement:
    """The read of which of ``call_ids`` the session already made (every row: one call id)."""
    params = {"t": tenant, "s": session_id, "ids": list(call_ids)}
    return RawStatement(_KNOWN_CALLS, params, all_rows=True)


_FRAMES = (
    "SELECT string_agg(message_pb, ''::bytea ORDER BY position) AS frames,"
    " count(message_pb) AS messages,"
    " coalesce(sum(tokens), 0)::bigint AS tokens,"
    " count(message_pb) FILTER (WHERE position < %(split)s) AS before_messages,"
    " coalesce(sum(tokens) FILTER (WHERE position < %(split)s), 0)::bigint AS before_tokens"
    " FROM surface_nodes"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s AND position >= %(from_position)s"
    " AND message_pb IS NOT NULL"
)

# The last %(messages)s message nodes before %(end)s, in position order: a backward range scan
# of the (tenant, session, position) index that stops after them.
_FRAMES_BEFORE = (
    "SELECT string_agg(message_pb, ''::bytea ORDER BY position) FROM ("
    " SELECT message_pb, position FROM surface_nodes"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s AND position < %(end)s"
    " AND message_pb IS NOT NULL ORDER BY position DESC LIMIT %(messages)s) AS last"
)

# The tool calls on the surface still unanswered, in call order (partial index on the open
# calls; the tool-call ordering rule, domain/admission.py). Ids of one message in code-point
# order whatever the database's collation, as the aggregate orders the calls it follows
# (``SessionAggregate.wrote``), so a cached aggregate and a fresh read agree.
_OPEN_CALLS = (
    'SELECT array_agg(c.call_id ORDER BY c.call_seq, c.call_id COLLATE "C") FROM tool_calls AS c'
    " WHERE c.tenant_id = %(t)s AND c.session_id = %(s)s AND c.result_seq IS NULL"
    " AND EXISTS (SELECT 1 FROM surface_nodes AS n"
    " WHERE n.tenant_id = %(t)s AND n.session_id = %(s)s AND n.seq = c.call_seq)"
)

# The system nodes (partial index, surface order) and the open tool calls: what a step reads
# of its session beyond the row, read with the row's lock (session_rows.py).
_SYSTEM_AND_OPEN = (
    "SELECT (SELECT array_agg(seq ORDER BY position) FROM surface_nodes"
    "  WHERE tenant_id = %(t)s AND session_id = %(s)s AND is_system) AS system_seqs,"
    " (SELECT array_agg(system_text ORDER BY position) FROM surface_nodes"
    "  WHERE tenant_id = %(t)s AND session_id = %(s)s AND is_system) AS system_texts,"
    " (" + _OPEN_CALLS + ") AS open_calls"
)

# The frames of the surface as of an event seq, unless a replace since changed it (app/replay.py).
_FRAMES_AS_OF = (
    "SELECT EXISTS (SELECT 1 FROM events WHERE tenant_id = %(t)s AND session_id = %(s)s"
    "  AND seq > %(through)s AND surface_op = 'replace') AS replaced,"
    " (SELECT string_agg(message_pb, ''::bytea ORDER BY position) FROM ("
    "  SELECT message_pb, position FROM surface_nodes"
    "  WHERE tenant_id = %(t)s AND session_id = %(s)s AND seq <= %(through)s"
    "  AND message_pb IS NOT NULL ORDER BY position OFFSET %(first)s) AS n) AS frames"
)


def system_and_open_statement(params: dict[str, str]) -> RawStatement:
    """The read of the system nodes and the open tool calls (``params``: the session's key as
    ``t`` and ``s``); its row: ``system_and_open``."""
    return RawStatement(_SYSTEM_AND_OPEN, params, binary=True)


def system_and_open(row: tuple[Any, ...]) -> tuple[tuple[SystemNode, ...], tuple[str, ...]]:
    """The surviving system nodes in surface order and the open calls' ids in call order."""
    seqs, texts, calls = row
    system = tuple(
        SystemNode(seq, bytes(text).decode())
        for seq, text in zip(seqs or (), texts or (), strict=True)
    )
    return system, tuple(calls or ())


def _frames(row: tuple[Any, ...]) -> Frames:
    frames, messages, tokens, before_messages, before_tokens = row
    return Frames(
        (bytes(frames),) if frames else (), messages, tokens, before_messages, before_tokens
    )


# The events that can change the prompt in force, the header or the context (besides replaces).
_PROMPT_KINDS = ("system/message", "request/header", "request/context")


async def _encoded_messages(events: Sequence[Event]) -> dict[int, tuple[bytes, bytes]]:
    """Each message event's ``codec.encode_and_frame`` (its payload and frame), by seq: in a
    thread for a large step (protobuf encodes ~2 ms a MiB, twice)."""
    messages = [(event.seq, event.message) for event in events if event.message is not None]
    return await off_the_loop_if_large(
        sum(message.chars() for _, message in messages),
        lambda: {seq: codec.encode_and_frame(message) for seq, message in messages},
    )


class SurfaceWrites(SessionScope):
    """Logs events and applies their surface operations; the tool calls on the surface."""

    async def write_events(
        self,
        new_events: Sequence[Event],
        next_position: int,
        prices: Mapping[int, int],
    ) -> Written:
        """Log ``new_events`` and apply their surface operations, in order.

        Consecutive appended nodes (and their tool calls) are inserted in one statement each.
        A new node's price is ``prices[seq]``, as the caller computed it
        (``domain.accounting.node_prices``); only a change of route family prices it again
        (``reprice``).
        """
        shadowed: Shadowed | None = None
        tokens = 0
        if not new_events:
            return Written(next_position, shadowed, tokens)
        event_rows: list[dict[str, Any]] = []
        encoded = await _encoded_messages(new_events)
        frames: dict[int, bytes] = {}  # a message event's frame, by seq
        for event in new_events:
            if event.message is None:
                payload = codec.dumps(codec.event_payload(event))
            else:
                payload, frames[event.seq] = encoded[event.seq]
            event_rows.append(self._event_row(event, payload))
        self.batch.insert("events", event_rows)
        self.growth.events += len(event_rows)
        self.growth.log_bytes += sum(len(row["payload"]) for row in event_rows)
        pending: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for event in new_events:
            if event.op is None:
                continue
            message = event.derived_message()
            price = prices[event.seq]
            node: dict[str, Any] = {
                **self._keys(),
                "seq": event.seq,
                "is_system": event.is_system,
                "system_text": event.system_text.encode() if event.is_system else None,
                "message_pb": frames[event.seq] if message else None,
                "tokens": price,
                "turn": event.turn,
                "step": event.step,
            }
            tokens += price
            self.growth.surface_nodes += 1
            self.growth.surface_bytes += len(node["message_pb"] or b"")
            if (frame := node["message_pb"]) is not None and len(frame) >= HELD_FRAME_MIN:
                self.frames_written[event.seq] = frame
            if isinstance(event.op, Append):
                node["position"] = next_position
                next_position += 1
                pending.append(node)
            else:
                self._defer_nodes(pending, calls)
                await self.flush()  # _shadow reads and deletes the nodes written so far
                first, removed = await self._shadow(event.op)
                tokens -= removed
                node["position"] = first.position
                shadowed = first.earliest(shadowed)
                # Written now: only the appended nodes after the last replacement stay
                # deferred, so the tail is exactly the end of the surface.
                self.batch.insert("surface_nodes", [node])
                await self.flush()
            if message is not None:
                for call_id in message.tool_call_ids():
                    row = {**self._keys(), "call_id": call_id, "call_seq": event.seq}
                    self.unsent_calls[call_id] = row | {"result_seq": None}
                    calls.append(self.unsent_calls[call_id])
        tail = [node for node in pending if node["message_pb"] is not None]
        made = {call["call_id"]: call["call_seq"] for call in calls}
        self._defer_nodes(pending, calls)
        written = Written(
            next_position,
            shadowed,
            tokens,
            Frames(
                tuple(node["message_pb"] for node in tail),
                len(tail),
                sum(node["tokens"] for node in tail),
                0,
                0,
            ),
        )
        self.made_calls.update(made)
        return written

    def _defer_nodes(self, pending: list[dict[str, Any]], calls: list[dict[str, Any]]) -> None:
        if pending:
            self.batch.insert("surface_nodes", list(pending))
            pending.clear()
        if calls:
            self.batch.insert("tool_calls", list(calls))
            calls.clear()

    async def _shadow(self, op: Replace) -> tuple[Shadowed, int]:
        """Delete the shadowed run of nodes; the new node takes the first one's position.
        Returns the first shadowed node and the summed price of the shadowed nodes."""
        rows = await self._execute(
            select(nodes.c.seq, nodes.c.position, nodes.c.is_system).where(
                self._mine(nodes), nodes.c.seq.in_((op.start_seq, op.end_seq))
            )
        )
        by_seq = {row.seq: Shadowed(row.position, row.is_system) for row in rows}
        start, end = by_seq[op.start_seq], by_seq[op.end_seq]
        # The chunks reaching the shadowed run go (with the next flush), and none is sealed by
        # this transaction: below its new chunks would be a hole (frame_chunks.py).
        self.batch.defer(drop_chunks(self.tenant, self.session_id, start.position))
        self.seal = None
        removed = (
            await self._execute(
                delete(nodes)
                .where(self._mine(nodes), nodes.c.position.between(start.position, end.position))
                .returning(nodes.c.tokens, func.coalesce(func.octet_length(nodes.c.message_pb), 0))
            )
        ).all()
        self.growth.surface_nodes -= len(removed)
        self.growth.surface_bytes -= sum(row[1] for row in removed)
        return start, sum(row.tokens for row in removed)

    def _event_row(self, event: Event, payload: bytes) -> dict[str, Any]:
        surface_op = None
        start = end = None
        if isinstance(event.op, Append):
            surface_op = "append"
        elif isinstance(event.op, Replace):
            surface_op, start, end = "replace", event.op.start_seq, event.op.end_seq
        return {
            **self._keys(),
            "seq": event.seq,
            "kind": event.kind.value,
            "turn": event.turn,
            "step": event.step,
            "surface_op": surface_op,
            "replace_start_seq": start,
            "replace_end_seq": end,
            "source_seqs": list(event.source_seqs),
            "admission_id": event.admission_id or None,
            "payload": payload,
            "prompt_update": event.update,
        }

    async def reprice(self, prices: Sequence[tuple[int, int]]) -> None:
        """Set the stored price of each ``(seq, tokens)`` surface node, in one statement."""
        self.batch.defer(drop_chunks(self.tenant, self.session_id, 0))  # their prices too
        self.seal = None
        await self._with_pairs(_REPRICE, ("seqs", "tokens"), prices)

    async def known_tool_calls(self, call_ids: Sequence[str]) -> set[str]:
        """Which of ``call_ids`` were already made in this session (on the surface or not):
        read with the session's lock when the call named them (``read``), else now, after the
        deferred writes, in one round trip."""
        if not call_ids:
            return set()
        if (kept := self._kept("known_calls", tuple(call_ids))) is not NOT_READ:
            return kept  # type: ignore[no-any-return]
        if self.warm and self.entry is not None:
            # The cache knows the calls open when the step began and this transaction knows
            # those it made, not every call ever made: a reused id they miss fails the commit
            # on its key, and the call runs again on a fresh read, which finds it
            # (``flush_and_commit``).
            cached = self.entry.aggregate.open_calls
            return {c for c in call_ids if c in cached or c in self.made_calls}
        statement = known_calls_statement(self.tenant, self.session_id, call_ids)
        *_, rows = await self._flight(*self._deferred(), statement)
        return {call_id for (call_id,) in rows}

    async def close_calls(self, answers: Sequence[tuple[str, int]]) -> None:
        """Record each ``(call_id, result_seq)`` as the answer of a call the caller knows is
        open: a call this transaction made is answered in its row, not sent yet; the others by
        an update that joins the deferred writes. Nothing is read."""
        pairs = []
        for call_id, seq in answers:
            if (unsent := self.unsent_calls.get(call_id)) is not None:
                unsent["result_seq"] = seq
            else:
                pairs.append((call_id, seq))
        if not pairs:
            return
        key = self.key

        def build(params: list[Any]) -> str:
            ids = param(params, [call_id for call_id, _ in pairs])
            seqs = param(params, [seq for _, seq in pairs])
            return (
                "UPDATE tool_calls AS c SET result_seq = u.result_seq"
                f" FROM unnest(CAST({ids} AS text[]), CAST({seqs} AS bigint[]))"
                f" AS u(call_id, result_seq) WHERE {where_session(params, key, 'c')}"
                " AND c.call_id = u.call_id"
            )

        self.batch.defer(build)

    async def mark_answered(self, answers: Sequence[tuple[str, int]]) -> dict[str, bool]:
        """Record each ``(call_id, result_seq)`` as the call's answer, in one statement, as the
        caller decided (one answer per call), after the deferred writes; for each call made in
        this session, whether it was open on the surface before (which answers are valid is
        the domain's rule)."""
        if not answers:
            return {}
        rows = await self._with_pairs(_MARK_ANSWERED, ("ids", "seqs"), answers)
        return {call_id: was_open for call_id, was_open in rows}

    async def _with_pairs(
        self, sql: str, names: tuple[str, str], pairs: Sequence[tuple[Any, Any]]
    ) -> list[tuple[Any, ...]]:
        """Run ``sql`` after the deferred writes (what it updates may be among them), in the
        same round trip, with the session's key as ``t``/``s`` and ``pairs`` as two arrays named
        ``names``; its rows. Nothing runs, not even the deferred writes, for no pairs."""
        if not pairs:
            return []
        first, second = names
        params = {
            "t": self.tenant,
            "s": self.session_id,
            first: [a for a, _ in pairs],
            second: [b for _, b in pairs],
        }
        *_, rows = await self._flight(*self._deferred(), RawStatement(sql, params, all_rows=True))
        return rows  # type: ignore[no-any-return]


class FrameReads(SessionScope):
    """The surface as the projection rule and the derived request read it."""

    async def system_nodes_and_open_calls(self) -> tuple[tuple[SystemNode, ...], tuple[str, ...]]:
        """The surviving system nodes in surface order and the open tool calls in call order,
        after the deferred writes, in one round trip."""
        params = {"t": self.tenant, "s": self.session_id}
        *_, row = await self._flight(*self._deferred(), system_and_open_statement(params))
        return system_and_open(row)

    async def surface(self, *, with_empty: bool = True) -> list[NodeRecord]:
        """Every surviving node in surface order (``with_empty=False``: only message nodes)."""
        await self.flush()
        statement = select(*columns(nodes, NodeRecord)).where(self._mine(nodes))
        if not with_empty:
            statement = statement.where(nodes.c.message_pb.is_not(None))
        rows = await self._execute(statement.order_by(nodes.c.position))
        return [NodeRecord(*row) for row in rows]

    def _frame_params(self, from_position: int, split_position: int | None) -> dict[str, Any]:
        return {
            "t": self.tenant,
            "s": self.session_id,
            "from_position": from_position,
            "split": split_position if split_position is not None else -1,
        }

    async def frames(
        self, from_position: int, split_position: int | None, *, after_writes: bool = False
    ) -> Frames:
        """The derived messages of the nodes at ``from_position`` and after, in surface order,
        as concatenated frames (one aggregate in the database; an index range scan), with
        their count and price, and the count and price of those before ``split_position``.

        Deferred nodes are read only ``after_writes`` (they go first, in the same round trip);
        otherwise ``write_events`` returned them as its tail."""
        return await self._read_frames(from_position, split_position, flush=after_writes)

    async def frames_before(self, end_position: int, messages: int) -> bytes:
        """The frames of the last ``messages`` derived messages before ``end_position``, in
        surface order. They were committed before this transaction (no flush)."""
        params = {"t": self.tenant, "s": self.session_id, "end": end_position, "messages": messages}
        row = await self._execute_raw(_FRAMES_BEFORE, params, binary=True, flush=False)
        assert row is not None
        return bytes(row[0] or b"")

    async def _read_frames(
        self, from_position: int, split_position: int | None, flush: bool
    ) -> Frames:
        """``frames``; ``flush``: after the deferred writes. A FULL request (from position 0)
        reads the chunked frames and the nodes past them (``frame_chunks.py``), and leaves the
        seal of what it found unsealed to go with the transaction's commit."""
        if from_position > 0:
            return _frames(await self._read(_FRAMES, from_position, split_position, flush))
        deferred = self._deferred() if flush else ()
        held = self.held_frames.get(self.key) if self.held_frames is not None else NOT_HELD
        params = self._frame_params(0, split_position)
        params["held"], params["held_version"] = list(held.parts), held.row_version
        read = RawStatement(FULL_FRAMES, params, binary=True, all_rows=True)
        *_, rows = await self._flight(*deferred, read)
        found = full_frames(rows, held.parts)
        self.seal = seal_statement(self.tenant, self.session_id, found.sealed_upto, found.read_end)
        self.frames_to_hold = found.to_hold
        if self.held_frames is not None:
            self.held_frames.used += found.from_held
        return found.frames

    async def _read(
        self, sql: str, from_position: int, split_position: int | None, flush: bool
    ) -> tuple[Any, ...]:
        """The row of a read of the frames (``sql``: psycopg placeholders, binary results);
        ``flush``: after the deferred writes, in the same round trip."""
        params = self._frame_params(from_position, split_position)
        row = await self._execute_raw(sql, params, binary=True, flush=flush)
        assert row is not None
        return row  # type: ignore[no-any-return]

    async def frames_as_of(self, through_seq: int, first_message: int) -> bytes | None:
        """The derived messages from index ``first_message`` on of the surface as it was after
        event ``through_seq``, as concatenated frames; None when a node was shadowed since
        (then the stored nodes no longer hold that surface). With no ``replace`` event after
        ``through_seq`` that surface is exactly the stored nodes at or before it."""
        row = await self._execute_raw(
            _FRAMES_AS_OF,
            {
                "t": self.tenant,
                "s": self.session_id,
                "through": through_seq,
                "first": first_message,
            },
            binary=True,
            flush=True,
        )
        assert row is not None
        replaced, frames = row
        return None if replaced else bytes(frames or b"")


class InspectionReads(SessionScope):
    """Read-only views of a session's log and ledger."""

    async def system_node_details(self) -> list[SystemNodeDetail]:
        """Surviving system nodes in surface order with their event's time and update flag."""
        await self.flush()
        statement = (
            select(
                nodes.c.seq,
                nodes.c.turn,
                nodes.c.step,
                nodes.c.system_text,
                nodes.c.tokens,
                events.c.commit_time,
                events.c.prompt_update,
            )
            .join(
                events,
                and_(
                    events.c.tenant_id == nodes.c.tenant_id,
                    events.c.session_id == nodes.c.session_id,
                    events.c.seq == nodes.c.seq,
                ),
            )
            .where(self._mine(nodes), nodes.c.is_system)
            .order_by(nodes.c.position)
        )
        return [SystemNodeDetail(*row) for row in await self.connection.execute(statement)]

    async def events_page(
        self, after_seq: int, limit: int, budget: int
    ) -> tuple[list[StoredEvent], bool]:
        """Events after ``after_seq`` in order: at most ``limit``, and at most ``budget``
        payload bytes, except that the first always comes (so an event larger than the budget
        comes alone on its page); and whether more follow."""
        return await self._bounded_events(events.c.seq > after_seq, limit, budget, backwards=False)

    async def events_before(
        self, before_seq: int, limit: int, budget: int
    ) -> tuple[list[StoredEvent], bool]:
        """``events_page`` backwards: the events just below ``before_seq``, newest first, at
        most ``limit`` and at most ``budget`` payload bytes (the newest always comes), returned
        in log order; and whether older ones remain (the inspector's chat opens at the newest
        events)."""
        page, more = await self._bounded_events(
            events.c.seq < before_seq, limit, budget, backwards=True
        )
        return page[::-1], more

    async def _bounded_events(
        self, where: ColumnElement[bool], limit: int, budget: int, *, backwards: bool
    ) -> tuple[list[StoredEvent], bool]:
        """The events ``where`` holds in seq order (``backwards``: descending), at most
        ``limit`` and ``budget`` payload bytes but at least one; and whether more remain. Sizes
        are read from the rows' headers (``octet_length`` does not detoast), so events past the
        budget are not loaded."""
        await self.flush()
        order = events.c.seq.desc() if backwards else events.c.seq
        window = (
            select(
                *columns(events, StoredEvent),
                func.sum(func.octet_length(events.c.payload)).over(order_by=order).label("running"),
                func.row_number().over(order_by=order).label("number"),
            )
            .where(self._mine(events), where)
            .order_by(order)
            .limit(limit + 1)
            .subquery()
        )
        fits = or_(window.c.number == 1, window.c.running <= budget)
        # A row past the budget comes without its payload (the last column): it is only counted.
        statement = select(
            *(window.c[column.name] for column in columns(events, StoredEvent)[:-1]),
            case((fits, window.c.payload)).label("payload"),
            fits.label("fits"),
        ).order_by(window.c.number)
        rows = (await self.connection.execute(statement)).all()
        page = [
            StoredEvent(*row[:-1]) for row in itertools.takewhile(lambda r: r.fits, rows[:limit])
        ]
        return page, len(rows) > len(page)

    async def surface_positions(self, first_seq: int, end_seq: int) -> dict[int, int]:
        """The surface position of each surviving node whose seq is in [first_seq, end_seq)."""
        await self.flush()
        statement = select(nodes.c.seq, nodes.c.position).where(
            self._mine(nodes), nodes.c.seq >= first_seq, nodes.c.seq < end_seq
        )
        return {row.seq: row.position for row in await self.connection.execute(statement)}

    async def prompt_events(self, before_seq: int) -> list[StoredEvent]:
        """The events below ``before_seq`` that can change the prompt in force, the header or
        the context: system messages, replacements, request headers and contexts."""
        await self.flush()
        statement = (
            select(*columns(events, StoredEvent))
            .where(
                self._mine(events),
                events.c.seq < before_seq,
                or_(events.c.kind.in_(_PROMPT_KINDS), events.c.surface_op == "replace"),
            )
            .order_by(events.c.seq)
        )
        return [StoredEvent(*row) for row in await self.connection.execute(statement)]

    async def events_after(self, after_seq: int, limit: int) -> list[StoredEvent]:
        """At most ``limit`` events after ``after_seq``, in order."""
        await self.flush()
        statement = (
            select(*columns(events, StoredEvent))
            .where(self._mine(events), events.c.seq > after_seq)
            .order_by(events.c.seq)
            .limit(limit)
        )
        return [StoredEvent(*row) for row in await self.connection.execute(statement)]
