"""Typed domain errors.

The domain knows nothing about gRPC: each error carries a stable UPPER_SNAKE ``reason`` and, for
bad input, the name of the offending field. One interceptor at the API edge maps the class to a
canonical status code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class DomainError(Exception):
    """Base of every error the domain and service layers raise on purpose."""

    reason = "INTERNAL"

    def __init__(self, message: str, **metadata: str) -> None:
        super().__init__(message)
        self.message = message
        self.metadata = dict(metadata)


class InvalidArgument(DomainError):
    """A request field is malformed, out of range or contradicts the session."""

    reason = "INVALID_FIELD"

    def __init__(
        self, field: str, message: str, *, reason: str | None = None, **values: object
    ) -> None:
        """``message`` names the offending ``values`` as ``{name}`` (or ``{name!r}``): they are
        formatted into it and carried in ``metadata`` too, so a client reads them unparsed."""
        described = message.format(**values) if values else message
        metadata = {name: str(value) for name, value in values.items()}
        super().__init__(f"{field}: {described}", field=field, **metadata)
        self.field = field
        if reason is not None:
            self.reason = reason

    def nest(self, parent: str) -> None:
        """Name the field as one of the nested message ``parent``'s (``parent.field``)."""
        description = self.message.removeprefix(f"{self.field}: ")
        self.field = f"{parent}.{self.field}"
        self.metadata["field"] = self.field
        self.message = f"{self.field}: {description}"
        self.args = (self.message,)


class InvalidModelInfo(InvalidArgument):
    """A capability value that is not one the service knows (request or catalog)."""

    reason = "INVALID_MODEL_INFO"


class SummaryNotSmaller(InvalidArgument):
    """A compaction summary that costs at least as many tokens as the range it replaces."""

    reason = "SUMMARY_NOT_SMALLER"

    def __init__(self, summary_tokens: int, shadowed_tokens: int) -> None:
        super().__init__(
            "summary",
            "summary costs {summary_tokens} tokens, not fewer than the {shadowed_tokens} tokens "
            "it replaces",
            summary_tokens=summary_tokens,
            shadowed_tokens=shadowed_tokens,
        )


class UnknownToolCall(InvalidArgument):
    """A tool result that answers no open tool call on the surface."""

    reason = "UNKNOWN_TOOL_CALL"


class FailedPrecondition(DomainError):
    """The request is valid but the session is not in a state that allows it."""

    reason = "FAILED_PRECONDITION"


class NothingToCompact(FailedPrecondition):
    reason = "NOTHING_TO_COMPACT"

    def __init__(self) -> None:
        super().__init__("no surface range can be compacted with this selection")


class UnansweredToolCall(FailedPrecondition):
    """An attempt while a tool call on the surface has no result (domain/admission.py)."""

    reason = "UNANSWERED_TOOL_CALL"

    def __init__(self, call_ids: tuple[str, ...]) -> None:
        super().__init__(
            f"tool call {call_ids[0]!r} has no result yet ({len(call_ids)} unanswered): record "
            "the results of every tool call before the next step",
            call_id=call_ids[0],
            unanswered=str(len(call_ids)),
        )


class WireFormatError(FailedPrecondition):
    """The surface cannot be expressed in the requested provider wire format."""

    reason = "UNSUPPORTED_WIRE_CONTENT"


class SurfaceViolation(DomainError):
    """An operation that would break a surface invariant (head protection, citations, order).

    The admission rule never produces one; seeing it means a caller built an invalid operation.
    """

    reason = "SURFACE_VIOLATION"


class NotFound(DomainError):
    reason = "NOT_FOUND"


class SessionNotFound(NotFound):
    reason = "SESSION_NOT_FOUND"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} not found", session_id=session_id)


class AdmissionNotFound(NotFound):
    reason = "ADMISSION_NOT_FOUND"

    def __init__(self, admission_id: str) -> None:
        super().__init__(f"admission {admission_id!r} not found", admission_id=admission_id)


class AlreadyExists(DomainError):
    reason = "ALREADY_EXISTS"


class SessionAlreadyExists(AlreadyExists):
    reason = "SESSION_ALREADY_EXISTS"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already exists", session_id=session_id)


class RequestIdReused(AlreadyExists):
    reason = "REQUEST_ID_REUSED"

    def __init__(self, request_id: str) -> None:
        super().__init__(
            f"request_id {request_id!r} was already used for a different request",
            request_id=request_id,
        )


class Aborted(DomainError):
    """A compare-and-set or race the caller should retry after re-reading."""

    reason = "ABORTED"


class RevisionMismatch(Aborted):
    reason = "REVISION_MISMATCH"

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(
            f"expected revision {expected}, session is at {actual}",
            expected_revision=str(expected),
            actual_revision=str(actual),
        )


class StaleCompactionPlan(Aborted):
    reason = "STALE_COMPACTION_PLAN"

    def __init__(self) -> None:
        super().__init__("the surface changed since the compaction was planned")


class Unavailable(DomainError):
    reason = "DATABASE_UNAVAILABLE"


@contextlib.contextmanager
def fields_under(parent: str) -> Iterator[None]:
    """Bad input raised inside names its field under the nested message ``parent``: the same
    checks serve a message on its own (RecordRequest) and nested (AdmitRequest.previous_output)."""
    try:
        yield
    except InvalidArgument as error:
        error.nest(parent)
        raise


class ResourceExhausted(DomainError):
    """A bound or quota would be exceeded (issue 13); nothing was committed. The subclass's
    reason names the bound; ``metadata`` carries its limit and the value it would reach."""

    reason = "RESOURCE_EXHAUSTED"


class SessionSurfaceBytesExceeded(ResourceExhausted):
    reason = "SESSION_SURFACE_BYTES_EXCEEDED"


class SessionSurfaceNodesExceeded(ResourceExhausted):
    reason = "SESSION_SURFACE_NODES_EXCEEDED"


class ResponseTooLarge(ResourceExhausted):
    reason = "RESPONSE_TOO_LARGE"


class SessionsQuotaExceeded(ResourceExhausted):
    reason = "SESSIONS_QUOTA_EXCEEDED"


class StoredBytesQuotaExceeded(ResourceExhausted):
    reason = "STORED_BYTES_QUOTA_EXCEEDED"


class ConcurrentCallsQuotaExceeded(ResourceExhausted):
    reason = "CONCURRENT_CALLS_QUOTA_EXCEEDED"
