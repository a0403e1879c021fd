"""The one place that turns exceptions into gRPC statuses (STYLE G10).

Domain and use-case code raise typed errors that know nothing about gRPC. ``ErrorInterceptor``
wraps every unary-unary handler and maps what escapes it to a canonical code and a
``google.rpc.Status`` carrying exactly one ``ErrorInfo`` (domain ``promptadmission.v1``, a stable
reason that is the name of a ``promptadmission.v1.ErrorReason`` value, and every value of the
message in its metadata), plus a ``BadRequest`` field
violation for invalid input. Nothing escapes as UNKNOWN, and a client never sees a traceback, SQL
or exception text it did not cause: unexpected failures are INTERNAL with a generic message and
an ``error_id`` that finds the logged traceback.

Cancellation is not an error: ``asyncio.CancelledError`` (a ``BaseException``) propagates, so a
cancelled call or an expired deadline unwinds the handler and rolls its transaction back.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.any_pb2 import Any as AnyProto
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status
from promptadmission.v1.error_reasons import Reason

from admission_service.api.malformed import MalformedRequest, tolerant
from admission_service.api.tenancy import Unauthenticated
from admission_service.api.unary import Behavior, Continuation, wrap_unary
from admission_service.domain.errors import (
    Aborted,
    AlreadyExists,
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from admission_service.storage.deadline import call_deadline
from admission_service.storage.failures import Failure, classify, driver_error

ERROR_DOMAIN = "promptadmission.v1"
# Every reason the service sends is a value of ErrorReason (proto/promptadmission/v1/
# error_reason.proto), whose generated StrEnum is ``Reason``: adding a reason is one line in
# that enum and `make generate`. A reason missing from it is a bug in the server: it is logged
# at ERROR with ``UNKNOWN_REASON`` in the record (every test fails on such a record, see
# tests/conftest.py) and still sent with its status code, which clients branch on first.
KNOWN_REASONS: frozenset[str] = frozenset(Reason)
UNKNOWN_REASON = "unknown_error_reason"

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MappedError:
    """What a client learns about a failure."""

    code: grpc.StatusCode
    reason: str
    message: str
    metadata: dict[str, str] = field(default_factory=dict)
    field: str | None = None  # the BadRequest field violation, for invalid input
    field_description: str = ""

    def to_status(self) -> status_pb2.Status:
        if self.reason not in KNOWN_REASONS:
            _log.error(
                "error reason %r is not an ErrorReason value; add it to error_reason.proto",
                self.reason,
                extra={UNKNOWN_REASON: self.reason},
            )
        details = [
            error_details_pb2.ErrorInfo(
                reason=self.reason, domain=ERROR_DOMAIN, metadata=self.metadata
            )
        ]
        if self.field is not None:
            violation = error_details_pb2.BadRequest.FieldViolation(
                field=self.field, description=self.field_description, reason=self.reason
            )
            details.append(error_details_pb2.BadRequest(field_violations=[violation]))
        packed = []
        for detail in details:
            any_detail = AnyProto()
            any_detail.Pack(detail)
            packed.append(any_detail)
        # The reason leads the message: plain grpcurl output shows it without decoding details.
        message = f"{self.reason}: {self.message}"
        return status_pb2.Status(code=self.code.value[0], message=message, details=packed)


_DOMAIN_CODES: tuple[tuple[type[DomainError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (Aborted, grpc.StatusCode.ABORTED),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),  # e.g. WireFormatError
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),  # session bounds, tenant quotas
    # SurfaceViolation and any other DomainError fall through to INTERNAL: they mean a bug.
)


def map_exception(exc: Exception) -> MappedError:
    """The status for ``exc``; anything unexpected is INTERNAL (the caller logs it)."""
    if isinstance(exc, Unauthenticated):
        return MappedError(grpc.StatusCode.UNAUTHENTICATED, exc.reason, exc.message)
    if isinstance(exc, DomainError):
        for kind, code in _DOMAIN_CODES:
            if isinstance(exc, kind):
                if isinstance(exc, InvalidArgument):
                    prefix = f"{exc.field}: "
                    description = exc.message.removeprefix(prefix)
                    return MappedError(
                        code, exc.reason, exc.message, exc.metadata, exc.field, description
                    )
                return MappedError(code, exc.reason, exc.message, exc.metadata)
    database = classify(exc)
    failure = database.failure if database is not None else None
    if failure is Failure.CONFLICT:
        return MappedError(
            grpc.StatusCode.ABORTED,
            Reason.CONCURRENT_MODIFICATION,
            "the transaction conflicted with another one and was rolled back; retry",
        )
    if failure is Failure.TIMEOUT:
        return MappedError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            Reason.DATABASE_TIMEOUT,
            "the database work did not finish within the call's deadline; nothing was written",
        )
    if failure is Failure.UNSTORABLE:
        assert database is not None
        return MappedError(
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.INVALID_FIELD,
            f"the request holds a value the database cannot store (SQLSTATE {database.sqlstate}); "
            "nothing was written, and a retry cannot succeed",
            {"sqlstate": database.sqlstate},
            field="",
        )
    if failure is Failure.UNAVAILABLE:
        return MappedError(
            grpc.StatusCode.UNAVAILABLE,
            Reason.DATABASE_UNAVAILABLE,
            "the database is unavailable; retry with backoff",
        )
    error_id = uuid.uuid4().hex
    return MappedError(
        grpc.StatusCode.INTERNAL,
        Reason.INTERNAL,
        f"internal error (error_id {error_id})",
        {"error_id": error_id},
    )


def _log_failure(method: str, exc: Exception, mapped: MappedError) -> None:
    # Client errors are routine: one line, no exception text (it may quote the client's input).
    if mapped.code is grpc.StatusCode.INTERNAL:
        _log.error(
            "%s failed unexpectedly (error_id %s)",
            method,
            mapped.metadata["error_id"],
            exc_info=exc,
        )
    elif "sqlstate" in mapped.metadata:
        # A client value no edge bound caught (app/limits.py should have one): no exception
        # text, which may quote the value.
        _log.warning(
            "%s: the database refused a value (SQLSTATE %s); bound it at the edge",
            method,
            mapped.metadata["sqlstate"],
        )
    elif mapped.reason == Reason.DATABASE_UNAVAILABLE:
        # No traceback: SQLAlchemy's text carries the statement and its parameters (prompts).
        cause = driver_error(exc)
        _log.warning("%s: database unavailable: %s: %s", method, type(cause).__name__, cause)
    else:
        _log.info("%s: %s %s", method, mapped.code.name, mapped.reason)


async def abort_with(context: grpc.aio.ServicerContext[Any, Any], mapped: MappedError) -> None:
    """End the call with ``mapped`` (the rich status travels in ``grpc-status-details-bin``)."""
    status = rpc_status.to_status(mapped.to_status())
    await context.abort(status.code, status.details, status.trailing_metadata)


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Maps exceptions escaping unary-unary handlers; streaming handlers pass through."""

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any]:
        return await wrap_unary(continuation, handler_call_details, _wrap, deserializer=tolerant)


def _wrap(behavior: Behavior, method: str) -> Behavior:
    async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            if isinstance(request, MalformedRequest):  # the bytes did not parse
                raise request
            # The call's deadline bounds the database work it starts (storage/deadline.py).
            with call_deadline(context.time_remaining()):
                response = behavior(request, context)
                if inspect.isawaitable(response):
                    response = await response
            return response
        except grpc.aio.AbortError:
            raise  # the handler ended the call itself
        except Exception as exc:  # CancelledError is a BaseException and propagates
            mapped = map_exception(exc)
            _log_failure(method, exc, mapped)
        # Aborted here, past the except block and with the request let go: gRPC keeps the
        # AbortError in its call state, which the error's own traceback reaches, a cycle only
        # a full collection frees. Raised inside the block, the error would chain ``exc`` and
        # with it every frame of the failed call; a refused 15 MiB Admit kept its request and
        # command (~30 MiB) that way until the next full collection.
        del request
        await abort_with(context, mapped)

    return guarded
