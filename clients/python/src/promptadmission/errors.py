"""Typed errors of the Prompt Admission Service client.

The service answers every failure with a `google.rpc.Status` in the `grpc-status-details-bin`
trailer holding exactly one `google.rpc.ErrorInfo` (domain ``promptadmission.v1``) whose
``reason`` names a value of the proto's ``ErrorReason`` (``Reason``), plus a
`google.rpc.BadRequest` naming the field for bad input.
``AdmissionError.from_rpc_error`` turns a gRPC error (sync or asyncio) into one value that
carries all of it, so callers branch on ``err.reason`` instead of parsing messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]

# The ErrorInfo.reason values, generated from the proto's ErrorReason enum. AdmissionError.reason
# is a plain str (a newer server may add reasons); compare it with these members (strings too).
from promptadmission.v1.error_reasons import Reason as Reason

ERROR_DOMAIN = "promptadmission.v1"
STATUS_DETAILS_KEY = "grpc-status-details-bin"

# ABORTED with one of these reasons fails the same way on every retry: the caller has to re-read
# the session (REVISION_MISMATCH) or plan again (STALE_COMPACTION_PLAN) first.
_DETERMINISTIC_ABORTS = frozenset({Reason.REVISION_MISMATCH, Reason.STALE_COMPACTION_PLAN})


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One entry of the error's `google.rpc.BadRequest`: the offending field and why."""

    field: str
    description: str


class AdmissionError(Exception):
    """A failed call: its gRPC ``code``, the service's ``ErrorInfo`` and field violations.

    ``reason`` is empty (and ``domain`` too) when the failure did not come from the service's
    error mapping, for example ``UNAVAILABLE`` because nothing listens at the target, or
    ``DEADLINE_EXCEEDED`` on the client side.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str = "",
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
        field_violations: Sequence[FieldViolation] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.domain = domain
        self.metadata: dict[str, str] = dict(metadata or {})
        self.field_violations: tuple[FieldViolation, ...] = tuple(field_violations)

    def __str__(self) -> str:
        # The service's messages already start with the reason ("SESSION_NOT_FOUND: ...").
        said = not self.reason or self.message.startswith(f"{self.reason}: ")
        label = self.code.name if said else f"{self.code.name}/{self.reason}"
        return f"{label}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code.name}, reason={self.reason!r}, "
            f"message={self.message!r}, metadata={self.metadata!r})"
        )

    @property
    def retryable(self) -> bool:
        """True when repeating the same call (same ``request_id``) may succeed: ``UNAVAILABLE``,
        and ``ABORTED`` from a lost race, but not a revision mismatch or a stale plan."""
        if self.code == grpc.StatusCode.UNAVAILABLE:
            return True
        return self.code == grpc.StatusCode.ABORTED and self.reason not in _DETERMINISTIC_ABORTS

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> AdmissionError:
        """The typed form of a ``grpc.RpcError`` or ``grpc.aio.AioRpcError``."""
        code, message, trailers = _call_parts(error)
        status = _status_from_trailers(trailers)
        info = error_details_pb2.ErrorInfo()
        bad_request = error_details_pb2.BadRequest()
        has_info = False
        if status is not None:
            for detail in status.details:
                if not has_info and detail.Is(info.DESCRIPTOR):
                    has_info = detail.Unpack(info)
                elif detail.Is(bad_request.DESCRIPTOR):
                    detail.Unpack(bad_request)
        return cls(
            code,
            message,
            reason=info.reason if has_info else "",
            domain=info.domain if has_info else "",
            metadata=dict(info.metadata) if has_info else None,
            field_violations=[
                FieldViolation(violation.field, violation.description)
                for violation in bad_request.field_violations
            ],
        )


def _call_parts(error: grpc.RpcError) -> tuple[grpc.StatusCode, str, Sequence[Any]]:
    # Both grpc.Call (sync) and grpc.aio.AioRpcError expose code(), details() and
    # trailing_metadata(); a bare RpcError (for example a channel closed under the call) does not.
    code_of = getattr(error, "code", None)
    details_of = getattr(error, "details", None)
    trailers_of = getattr(error, "trailing_metadata", None)
    code = code_of() if callable(code_of) else None
    details = details_of() if callable(details_of) else None
    trailers = trailers_of() if callable(trailers_of) else None
    return (
        code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN,
        details if isinstance(details, str) else str(error),
        tuple(trailers or ()),
    )


def _status_from_trailers(trailers: Sequence[Any]) -> status_pb2.Status | None:
    for key, value in trailers:
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return None
