"""The event log and the surface it builds: events, surface nodes (each encoded as it is
written, at the price the caller gave) and the tool calls they make."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete, func, select

from admission_service.domain.events import Append, Event, Replace
from admission_service.domain.session import Frames, Shadowed, Written
from admission_service.storage import codec
from admission_service.storage.batch import param
from admission_service.storage.frame_chunks import drop_chunks
from admission_service.storage.raw import RawStatement
from admission_service.storage.scope import NOT_READ, SessionScope
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
        frames: dict[int, bytes] = {}  # a message event's frame, by seq
        for event in new_events:
            if event.message is None:
                payload = codec.dumps(codec.event_payload(event))
            else:
                payload, frames[event.seq] = codec.encode_and_frame(event.message)
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
                b"".join(node["message_pb"] for node in tail),
                len(tail),
                sum(node["tokens"] for node in tail),
                0,
                0,
            ),
        )
        if self.known is not None:
            self.known.wrote(new_events, written, made)
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
        if self.known is not None:
            self.known.lost = True  # the frames it kept were priced with the old tokenizer
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
        known = self.known
        if self.warm and known is not None and not known.lost:
            # The cache knows the open calls and those made since, not every call ever made:
            # a reused id it misses fails the commit on its key, and the call runs again on a
            # fresh read, which finds it (``flush_and_commit``).
            return {c for c in call_ids if c in known.open_calls or c in known.made_calls}
        statement = known_calls_statement(self.tenant, self.session_id, call_ids)
        *_, rows = await self._flight(*self._deferred(), statement)
        return {call_id for (call_id,) in rows}

    async def mark_answered(self, answers: Sequence[tuple[str, int]]) -> dict[str, bool]:
        """Record each ``(call_id, result_seq)`` as the call's answer, in one statement, as the
        caller decided (one answer per call); for each call made in this session, whether it
        was open on the surface before (which answers are valid is the domain's rule). When
        this transaction knows every answered call is open (``KnownSession.answer``), the
        update joins the deferred writes and nothing is read."""
        if not answers:
            return {}
        known = self.known
        if known is not None and known.answer(call_id for call_id, _ in answers):
            # A call this transaction made is answered in its row, not sent yet; the others
            # by an update that joins the deferred writes.
            pairs = []
            for call_id, seq in answers:
                if (unsent := self.unsent_calls.get(call_id)) is not None:
                    unsent["result_seq"] = seq
                else:
                    pairs.append((call_id, seq))
            if not pairs:
                return {call_id: True for call_id, _ in answers}

            def build(params: list[Any]) -> str:
                ids = param(params, [call_id for call_id, _ in pairs])
                seqs = param(params, [seq for _, seq in pairs])
                return (
                    "UPDATE tool_calls AS c SET result_seq = u.result_seq"
                    f" FROM unnest(CAST({ids} AS text[]), CAST({seqs} AS bigint[]))"
                    f" AS u(call_id, result_seq) WHERE {self._where_mine(params, 'c')}"
                    " AND c.call_id = u.call_id"
                )

            self.batch.defer(build)
            return {call_id: True for call_id, _ in answers}
        if known is not None:
            known.lost = True
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
