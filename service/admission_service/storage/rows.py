"""The values ``SessionStore`` reads and returns: frozen and typed.

The rows a caller reads further (``StoredEvent``, ``NodeRecord``, ``SystemNodeDetail``,
``LedgerRow``) keep their columns' names and decode themselves into domain values
(``event()``, ``decoded()``, ``update``), so no caller knows a stored encoding; the others are
the domain's values of the idempotency keys, admissions and running sizes (``domain/stored.py``).
The session row is the
domain's aggregate (``domain.session.Session``), with the frames it derives requests from.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Table

from admission_service.domain.events import Append, Event, EventKind, Replace, SurfaceOp
from admission_service.domain.messages import Message
from admission_service.domain.stored import AdmissionRecord
from admission_service.storage import codec


@dataclass(frozen=True, slots=True)
class StoredInputs:
    """An admission whose prompt and tool set are stored, with the digests that name them: a
    later admission with the same prompt or tools names them without sending their bytes."""

    admission: AdmissionRecord
    prompt_digest: bytes
    tools_digest: bytes

    def kept_for(self, admission: AdmissionRecord | None) -> StoredInputs | None:
        """These digests beside ``admission`` (a later value of the same admission, its
        attempts counted); None when ``admission`` is another, or none."""
        if admission is None or admission.admission_id != self.admission.admission_id:
            return None
        return StoredInputs(admission, self.prompt_digest, self.tools_digest)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A surviving surface node as stored: its framed message and price."""

    seq: int
    position: int
    is_system: bool
    message_pb: bytes | None
    tokens: int

    def decoded(self) -> Message | None:
        """The node's derived message; None for a node that derives to nothing."""
        if self.message_pb is None:
            return None
        (message,) = codec.decode_frames(self.message_pb)
        return message


# The events whose payload is JSON; every other event's is its message (``codec.encode``).
_JSON_KINDS = frozenset({EventKind.REQUEST_HEADER.value, EventKind.REQUEST_CONTEXT.value})


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An ``events`` row (ListEvents, the trajectory, a replay's fold)."""

    seq: int
    kind: str
    turn: int
    step: int
    commit_time: datetime
    surface_op: str | None
    replace_start_seq: int | None
    replace_end_seq: int | None
    source_seqs: list[int]
    admission_id: str | None
    prompt_update: bool
    payload: bytes

    def event(self) -> Event:
        """The row as a domain event."""
        message = header = context = None
        if self.kind in _JSON_KINDS:
            payload = codec.loads(self.payload)
            header = codec.header_from_json(payload["header"]) if "header" in payload else None
            context = codec.context_from_json(payload["context"]) if "context" in payload else None
        else:
            message = codec.decode(self.payload)
        return Event(
            seq=self.seq,
            kind=EventKind(self.kind),
            turn=self.turn,
            step=self.step,
            op=self._op(),
            source_seqs=tuple(self.source_seqs),
            message=message,
            header=header,
            context=context,
            admission_id=self.admission_id or "",
            update=self.prompt_update,
        )

    def _op(self) -> SurfaceOp | None:
        if self.surface_op == "append":
            return Append()
        if self.surface_op == "replace":
            start, end = self.replace_start_seq, self.replace_end_seq
            assert start is not None
            assert end is not None
            return Replace(start, end)
        return None


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """A ``requests`` row: one derived request's forecast and the usage observed for it, each
    the app's JSON object (stored as canonical JSON: ``codec.dumps``)."""

    request_index: int
    admission_id: str
    attempt: int
    forecast: bytes
    observed: bytes | None
    create_time: datetime

    def forecast_json(self) -> dict[str, Any]:
        return codec.loads(self.forecast)  # type: ignore[no-any-return]

    def observed_json(self) -> dict[str, Any] | None:
        return codec.loads(self.observed) if self.observed is not None else None


@dataclass(frozen=True, slots=True)
class SystemNodeDetail:
    """A surviving system node with its event's commit time (Inspect)."""

    seq: int
    turn: int
    step: int
    system_text: bytes
    tokens: int
    commit_time: datetime
    prompt_update: bool

    @property
    def update(self) -> bool:
        """Whether the system message updated the prompt (``Event.update``)."""
        return self.prompt_update


def columns(table: Table, row_type: type[Any]) -> list[Column[Any]]:
    """The columns of ``table`` that make ``row_type``, in its field order: a row selected
    with them is ``row_type(*row)``."""
    return [table.c[item.name] for item in fields(row_type)]
