"""Session events and surface operations (SPEC §1).

Every event has a dense per-session ``seq``. The five message-producing kinds carry a surface
operation: ``Append`` puts the node at the surface end; ``Replace(start_seq, end_seq)`` shadows
the contiguous run of surviving nodes from ``start_seq`` to ``end_seq`` (surface order) and puts
the new node in its place, citing every shadowed seq in ``source_seqs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from admission_service.domain.messages import Message, system_message
from admission_service.domain.series import ContextLog, HeaderLog


class EventKind(StrEnum):
    SYSTEM_MESSAGE = "system/message"
    USER_MESSAGE = "user/message"
    ASSISTANT_MESSAGE = "assistant/message"
    TOOL_RESULT = "tool/result"
    COMPACTION_SUMMARY = "compaction/summary"
    REQUEST_HEADER = "request/header"
    REQUEST_CONTEXT = "request/context"


SURFACE_KINDS = frozenset(
    {
        EventKind.SYSTEM_MESSAGE,
        EventKind.USER_MESSAGE,
        EventKind.ASSISTANT_MESSAGE,
        EventKind.TOOL_RESULT,
        EventKind.COMPACTION_SUMMARY,
    }
)


@dataclass(frozen=True, slots=True)
class Append:
    pass


@dataclass(frozen=True, slots=True)
class Replace:
    start_seq: int
    end_seq: int


SurfaceOp = Append | Replace


@dataclass(frozen=True, slots=True)
class Event:
    """One log event. ``message`` is set for surface kinds, ``header``/``context`` for logs."""

    seq: int
    kind: EventKind
    turn: int = 0
    step: int = 0
    op: SurfaceOp | None = None
    source_seqs: tuple[int, ...] = ()
    message: Message | None = None
    header: HeaderLog | None = None
    context: ContextLog | None = None
    admission_id: str = ""
    update: bool = False

    @property
    def is_system(self) -> bool:
        return self.kind is EventKind.SYSTEM_MESSAGE

    @property
    def system_text(self) -> str:
        assert self.message is not None
        return self.message.text

    def derived_message(self) -> Message | None:
        """The message this node contributes; empty system and assistant nodes give none."""
        if self.message is None:
            return None
        if self.kind in (EventKind.SYSTEM_MESSAGE, EventKind.ASSISTANT_MESSAGE):
            return self.message if self.message.content else None
        return self.message


def system_event(
    seq: int, text: str, op: SurfaceOp, *, turn: int, step: int, update: bool = False
) -> Event:
    sources = (op.start_seq,) if isinstance(op, Replace) else ()
    return Event(
        seq,
        EventKind.SYSTEM_MESSAGE,
        turn,
        step,
        op,
        sources,
        system_message(text),
        update=update,
    )


def revision_after(revision: int, logged: int) -> int:
    """The session's revision after a write that logged ``logged`` events: the revision counts
    changes of the history, so it moves (by one) only when events were logged."""
    return revision + (1 if logged else 0)
