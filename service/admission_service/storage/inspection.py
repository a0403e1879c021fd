"""Reads for Inspect, ListEvents, ListTrajectory and a replay's fold: the ledger, the system
nodes' details and pages of the event log, as typed rows (``rows``)."""

from __future__ import annotations

import itertools

from sqlalchemy import ColumnElement, and_, case, func, or_, select

from admission_service.storage.rows import LedgerRow, StoredEvent, SystemNodeDetail, columns
from admission_service.storage.scope import SessionScope
from admission_service.storage.tables import events, requests
from admission_service.storage.tables import surface_nodes as nodes

# The events that can change the prompt in force, the header or the context (besides replaces).
_PROMPT_KINDS = ("system/message", "request/header", "request/context")


class InspectionReads(SessionScope):
    """Read-only views of a session's log and ledger."""

    async def ledger(self, limit: int) -> list[LedgerRow]:
        """The latest ``limit`` ledger rows, in request order."""
        await self.flush()
        statement = (
            select(*columns(requests, LedgerRow))
            .where(self._mine(requests))
            .order_by(requests.c.request_index.desc())
            .limit(limit)
        )
        rows = (await self.connection.execute(statement)).all()
        return [LedgerRow(*row) for row in reversed(rows)]

    async def requests_from(self, first_index: int, limit: int) -> list[LedgerRow]:
        """Ledger rows from ``first_index`` on, in request order (ListTrajectory)."""
        await self.flush()
        statement = (
            select(*columns(requests, LedgerRow))
            .where(self._mine(requests), requests.c.request_index >= first_index)
            .order_by(requests.c.request_index)
            .limit(limit)
        )
        return [LedgerRow(*row) for row in await self.connection.execute(statement)]

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
