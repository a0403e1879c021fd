"""The session as one step sees it: the row and what the step needs beyond it, one value.

A step needs more than the session row (``Session``): the surviving system nodes (the
projection rule's input), the open tool calls (Record's rule: an answer must name one), the
frames appended since the previous request (what a DELTA request is, and what its digest
chains over) and the last admission (what the next step's previous output answers).
``SessionAggregate`` holds them, and its transitions are pure: each takes what a step wrote
and returns the value the step leaves.

Some writes cannot be followed without the surface's positions: a replacement shadows a run
of nodes this value does not hold, a repricing changes every frame's price. Their transition
returns None, "not known": whoever holds the value reads the database instead and keeps
nothing. Storage keeps the value a commit left in a per-worker cache
(``storage/session_cache.py``), checked under the row lock by version; nothing here knows of
that, and every transition here is tested against a fresh read of what the writes left
(``tests/unit/domain/test_aggregate.py`` on the in-memory store).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from admission_service.domain.events import Append, Event
from admission_service.domain.projection import SystemNode
from admission_service.domain.session import NO_FRAMES, Frames, Session, Written
from admission_service.domain.stored import AdmissionRecord, Growth
from admission_service.domain.surface import fold_system_nodes


@dataclass(frozen=True, slots=True)
class SessionAggregate:
    """``session``: the row; ``system_nodes``: the surviving system nodes in surface order;
    ``open_calls``: the tool calls on the surface no result answers yet, in call order;
    ``pending``: the frames of the message nodes at ``pending_from`` and after (appended since
    the previous request, which ended at ``pending_from``), None when not known;
    ``admission``: the last admission, when known."""

    session: Session
    system_nodes: tuple[SystemNode, ...]
    open_calls: tuple[str, ...]
    pending_from: int
    pending: Frames | None
    admission: AdmissionRecord | None

    @classmethod
    def read(
        cls,
        session: Session,
        system_nodes: tuple[SystemNode, ...],
        open_calls: Iterable[str],
        admission: AdmissionRecord | None,
    ) -> SessionAggregate:
        """From the row and its indexed state as a fresh read found them. The frames since the
        previous request are known (none) only when nothing was appended since it."""
        end = _request_end(session)
        pending = NO_FRAMES if session.next_position == end else None
        return cls(session, system_nodes, tuple(open_calls), end, pending, admission)

    def frames_since_request(self, from_position: int, split_position: int | None) -> Frames | None:
        """The frames a read from ``from_position`` would find, when that is exactly the frames
        appended since the previous request and they are known; None: read them."""
        if split_position is not None or from_position != self.pending_from:
            return None
        return self.pending

    def wrote(self, events: Iterable[Event], written: Written) -> SessionAggregate | None:
        """After ``events`` were logged, appending ``written.tail``; None after a replacement
        (not followed: read the indexed state again, ``reread``)."""
        events = tuple(events)
        if written.shadowed is not None or not all(
            isinstance(event.op, Append) for event in events if event.op is not None
        ):
            return None
        made = [
            call_id
            for event in events
            if event.op is not None and (message := event.derived_message()) is not None
            for call_id in sorted(message.tool_call_ids())
        ]
        pending = self.pending
        if pending is not None:
            tail = written.tail
            pending = Frames(
                pending.parts + tail.parts,
                pending.messages + tail.messages,
                pending.tokens + tail.tokens,
                0,
                0,
            )
        return replace(
            self,
            system_nodes=fold_system_nodes(self.system_nodes, events),
            open_calls=self.open_calls + tuple(made),
            pending=pending,
        )

    def answered(self, call_ids: Iterable[str]) -> SessionAggregate | None:
        """``call_ids`` closed, when every one is open; None when one is not (whether it was
        ever made, or answered already, is then the database's to say)."""
        call_ids = set(call_ids)
        if not call_ids <= set(self.open_calls):
            return None
        return replace(
            self, open_calls=tuple(call for call in self.open_calls if call not in call_ids)
        )

    def reread(
        self, system_nodes: tuple[SystemNode, ...], open_calls: Iterable[str]
    ) -> SessionAggregate:
        """After a write ``wrote`` could not follow: the system nodes and open calls as read
        again; the frames since the previous request are no longer known."""
        return replace(self, system_nodes=system_nodes, open_calls=tuple(open_calls), pending=None)

    def repriced(self) -> SessionAggregate:
        """After every node was priced again with another tokenizer: the frames kept since the
        previous request carry the old prices, so they are no longer known."""
        return replace(self, pending=None)

    def saved(self, session: Session) -> SessionAggregate:
        """With the row a transition left (what the step saves)."""
        return replace(self, session=session)

    def admission_named(self, admission_id: str) -> AdmissionRecord | None:
        """The last admission when it is ``admission_id``; None: not known here (read it)."""
        admission = self.admission
        return (
            admission if admission is not None and admission.admission_id == admission_id else None
        )

    def admitted(self, admission: AdmissionRecord) -> SessionAggregate:
        return replace(self, admission=admission)

    def attempted(self, admission_id: str) -> SessionAggregate:
        """One more attempt of ``admission_id`` counted (a Reconcile)."""
        admission = self.admission
        if admission is None or admission.admission_id != admission_id:
            return self
        return replace(self, admission=replace(admission, attempts=admission.attempts + 1))

    def committed(self, growth: Growth | None) -> SessionAggregate:
        """The value a commit leaves: the row's running sizes moved by ``growth`` as the row's
        update moves them (None: the step saved no row)."""
        session = self.session
        if growth is not None:
            session = replace(
                session,
                surface_bytes=session.surface_bytes + growth.surface_bytes,
                surface_nodes=session.surface_nodes + growth.surface_nodes,
                log_bytes=session.log_bytes + growth.log_bytes,
            )
        end = _request_end(session)
        pending: Frames | None = NO_FRAMES
        if session.next_position != end:
            # Appended since the previous request (a Record): still known if it was then.
            pending = self.pending if self.pending_from == end else None
        return replace(self, session=session, pending_from=end, pending=pending)


def _request_end(session: Session) -> int:
    """Where the previous request ended (0 before the first): the frames appended since start
    there."""
    return session.prefix.end_position if session.prefix is not None else 0
