"""What a session keeps beside its log and surface, as the use cases read it through the storage
port (``app/ports.py``): the admissions a Reconcile reuses, the responses of idempotent calls,
and the running sizes a transaction's writes moved. Plain values; storage fills them."""

from __future__ import annotations

from dataclasses import dataclass

from admission_service.domain.messages import Tool


@dataclass(slots=True)
class Growth:
    """What a transaction's writes added to a session's running sizes (negative: removed)."""

    surface_bytes: int = 0
    surface_nodes: int = 0
    log_bytes: int = 0
    events: int = 0

    def minus(self, other: Growth) -> Growth:
        return Growth(
            self.surface_bytes - other.surface_bytes,
            self.surface_nodes - other.surface_nodes,
            self.log_bytes - other.log_bytes,
            self.events - other.events,
        )


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """The response stored for a call's ``request_id``, with the call it answered."""

    method: str
    request_digest: bytes
    response: bytes
    # Where the response's derived request comes from, when ``response`` leaves it out
    # (app/replay.py); None: ``response`` is the whole response.
    derived_request: bytes | None = None
    # Seconds since it was stored, by the database's clock (the sweeper's): past the retention
    # window the key is expired, even before the sweeper deletes it.
    age_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class AdmissionRecord:
    """A step's first attempt as admitted: what a Reconcile reuses (the prompt and tools are
    never assembled again) and how many attempts it has had."""

    admission_id: str
    turn: int
    step: int
    rendered_prompt: str
    tools: tuple[Tool, ...]
    attempts: int
