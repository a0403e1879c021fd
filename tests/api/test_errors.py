"""Error mapping: the interceptor alone (a tiny servicer raising plain exceptions) and through
the real service (requests that provoke each kind of error)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import psycopg
import psycopg.errors
import pytest
import sqlalchemy.exc
from admission_service.api import tenancy
from admission_service.api.error_status import KNOWN_REASONS, ErrorInterceptor, map_exception
from admission_service.domain import errors as domain
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb
from promptadmission.v1.error_reasons import Reason as ClientReason

from tests.api.support import (
    StartApi,
    admit_request,
    create_session,
    rich_error,
)

# ---- the interceptor alone ----------------------------------------------------------------


class Raiser:
    """Behaviours of ``/test.Errors/Raise``, chosen by the request bytes."""

    def __init__(self) -> None:
        self.exceptions: dict[bytes, Callable[[], BaseException]] = {}
        self.started = asyncio.Event()
        self.saw_cancellation = asyncio.Event()

    async def raise_(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        if request == b"ok":
            return b"fine"
        if request == b"abort":
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "the handler's own abort")
        if request == b"hang":
            self.started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.saw_cancellation.set()
                raise
        raise self.exceptions[request]()

    def raise_sync(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        raise self.exceptions[request]()


@pytest.fixture(scope="module")
def raiser() -> Raiser:
    return Raiser()


@pytest.fixture(scope="module")
async def errors_channel(raiser: Raiser) -> AsyncIterator[grpc.aio.Channel]:
    server = grpc.aio.server(interceptors=[ErrorInterceptor()])
    handlers = {
        "Raise": grpc.unary_unary_rpc_method_handler(raiser.raise_),
        "RaiseSync": grpc.unary_unary_rpc_method_handler(raiser.raise_sync),
    }
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Errors", handlers)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel
    await server.stop(0)


async def call_raising(
    channel: grpc.aio.Channel,
    raiser: Raiser,
    exc: Callable[[], BaseException],
    method: str = "Raise",
) -> grpc.aio.AioRpcError:
    key = repr(exc).encode()
    raiser.exceptions[key] = exc
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary(f"/test.Errors/{method}", None, None)(key, timeout=10)
    return caught.value


def _sqlalchemy_operational() -> BaseException:
    return sqlalchemy.exc.OperationalError(
        "SELECT secret FROM sessions", {"p": "prompt text"}, psycopg.OperationalError("refused")
    )


def _invalidated() -> BaseException:
    return sqlalchemy.exc.DBAPIError(
        "SELECT 1", {}, Exception("server closed the connection"), connection_invalidated=True
    )


MAPPINGS: list[tuple[Callable[[], BaseException], grpc.StatusCode, str]] = [
    (lambda: domain.SessionNotFound("s1"), grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND"),
    (lambda: domain.AdmissionNotFound("a1"), grpc.StatusCode.NOT_FOUND, "ADMISSION_NOT_FOUND"),
    (
        lambda: domain.SessionAlreadyExists("s1"),
        grpc.StatusCode.ALREADY_EXISTS,
        "SESSION_ALREADY_EXISTS",
    ),
    (lambda: domain.RequestIdReused("r1"), grpc.StatusCode.ALREADY_EXISTS, "REQUEST_ID_REUSED"),
    (lambda: domain.RevisionMismatch(1, 2), grpc.StatusCode.ABORTED, "REVISION_MISMATCH"),
    (lambda: domain.StaleCompactionPlan(), grpc.StatusCode.ABORTED, "STALE_COMPACTION_PLAN"),
    (
        lambda: domain.WireFormatError("no user turn before the update"),
        grpc.StatusCode.FAILED_PRECONDITION,
        "UNSUPPORTED_WIRE_CONTENT",
    ),
    (lambda: domain.NothingToCompact(), grpc.StatusCode.FAILED_PRECONDITION, "NOTHING_TO_COMPACT"),
    (
        lambda: domain.UnansweredToolCall(("call-1", "call-2")),
        grpc.StatusCode.FAILED_PRECONDITION,
        "UNANSWERED_TOOL_CALL",
    ),
    (lambda: domain.Unavailable("db down"), grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE"),
    (
        lambda: psycopg.errors.DeadlockDetected("deadlock detected"),
        grpc.StatusCode.ABORTED,
        "CONCURRENT_MODIFICATION",
    ),
    (
        lambda: sqlalchemy.exc.OperationalError(
            "UPDATE sessions", {}, psycopg.errors.SerializationFailure("could not serialize")
        ),
        grpc.StatusCode.ABORTED,
        "CONCURRENT_MODIFICATION",
    ),
    # The timeouts a call's deadline sets on its transaction (storage/deadline.py).
    (
        lambda: sqlalchemy.exc.OperationalError(
            "SELECT … FOR UPDATE", {}, psycopg.errors.LockNotAvailable("lock timeout")
        ),
        grpc.StatusCode.DEADLINE_EXCEEDED,
        "DATABASE_TIMEOUT",
    ),
    (
        lambda: psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
        grpc.StatusCode.DEADLINE_EXCEEDED,
        "DATABASE_TIMEOUT",
    ),
    (
        lambda: psycopg.errors.IdleInTransactionSessionTimeout("idle-in-transaction timeout"),
        grpc.StatusCode.DEADLINE_EXCEEDED,
        "DATABASE_TIMEOUT",
    ),
    (_sqlalchemy_operational, grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE"),
    (_invalidated, grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE"),
    (
        lambda: psycopg.OperationalError("refused"),
        grpc.StatusCode.UNAVAILABLE,
        "DATABASE_UNAVAILABLE",
    ),
    (
        lambda: sqlalchemy.exc.TimeoutError("QueuePool limit reached"),
        grpc.StatusCode.UNAVAILABLE,
        "DATABASE_UNAVAILABLE",
    ),
    (
        lambda: sqlalchemy.exc.InterfaceError("SELECT 1", {}, Exception("closed")),
        grpc.StatusCode.UNAVAILABLE,
        "DATABASE_UNAVAILABLE",
    ),
    (
        # Citus, a worker lost at COMMIT (outcome unknown; tests/citus/test_worker_restart.py)
        lambda: sqlalchemy.exc.InternalError(
            "COMMIT",
            {},
            psycopg.errors.InternalError_(
                "could not commit transaction for shard 102139 on at least one active node"
            ),
        ),
        grpc.StatusCode.UNAVAILABLE,
        "DATABASE_UNAVAILABLE",
    ),
    (
        lambda: psycopg.errors.InternalError_("could not open relation"),
        grpc.StatusCode.INTERNAL,
        "INTERNAL",
    ),
    (
        lambda: domain.SurfaceViolation("replace covers a later event"),
        grpc.StatusCode.INTERNAL,
        "INTERNAL",
    ),
    (lambda: RuntimeError("SELECT secret FROM sessions"), grpc.StatusCode.INTERNAL, "INTERNAL"),
    (lambda: KeyError("x"), grpc.StatusCode.INTERNAL, "INTERNAL"),
]


@pytest.mark.parametrize(("exc", "code", "reason"), MAPPINGS)
async def test_exceptions_map_to_one_error_info(
    errors_channel: grpc.aio.Channel,
    raiser: Raiser,
    exc: Callable[[], BaseException],
    code: grpc.StatusCode,
    reason: str,
) -> None:
    error = rich_error(await call_raising(errors_channel, raiser, exc))
    assert error.code is code
    assert error.reason == reason  # asserts there is exactly one ErrorInfo
    assert error.bad_requests == []
    assert "SELECT" not in error.message and "Traceback" not in error.message
    for value in error.error_infos[0].metadata.values():
        assert value in error.message


async def test_invalid_argument_names_the_field(
    errors_channel: grpc.aio.Channel, raiser: Raiser
) -> None:
    error = rich_error(
        await call_raising(
            errors_channel,
            raiser,
            lambda: domain.InvalidArgument(
                "users[2].content[0]", "is empty ({kind!r}, {limit} at most)", kind="t", limit=4
            ),
        )
    )
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.reason == "INVALID_FIELD"
    assert error.violated_fields == ["users[2].content[0]"]
    described = "is empty ('t', 4 at most)"
    assert error.bad_requests[0].field_violations[0].description == described
    # the values the message names are in the metadata too
    assert dict(error.error_infos[0].metadata) == {
        "field": "users[2].content[0]",
        "kind": "t",
        "limit": "4",
    }
    assert error.message == f"INVALID_FIELD: users[2].content[0]: {described}"


# Raised only as their subclasses, whose reasons are specific.
_ABSTRACT_ERRORS = {
    domain.DomainError,
    domain.FailedPrecondition,
    domain.NotFound,
    domain.AlreadyExists,
    domain.Aborted,
    domain.ResourceExhausted,
}


def _all_subclasses(cls: type[domain.DomainError]) -> set[type[domain.DomainError]]:
    direct = set(cls.__subclasses__())
    return direct.union(*(_all_subclasses(sub) for sub in direct))


def _takes_its_reason(cls: type[domain.DomainError]) -> bool:
    """Errors told their reason when raised (the interceptor's runtime check covers those)."""
    parameter = inspect.signature(cls.__init__).parameters.get("reason")
    return parameter is not None and parameter.default is inspect.Parameter.empty


def _raised_reasons() -> set[str]:
    """Every reason the server can send: the domain errors' (domain/errors.py), authentication's
    and the interceptor's own (a database conflict, timeout or outage; INTERNAL)."""
    service_errors = {
        sub
        for sub in _all_subclasses(domain.DomainError) - _ABSTRACT_ERRORS
        if sub.__module__.startswith("admission_service.") and not _takes_its_reason(sub)
    }
    # A SurfaceViolation is a bug in the caller of the domain: it is sent as INTERNAL.
    assert map_exception(domain.SurfaceViolation("x")).reason == "INTERNAL"
    raised = {sub.reason for sub in service_errors - {domain.SurfaceViolation}}
    raised |= {tenancy.MISSING_CREDENTIALS, tenancy.INVALID_TOKEN}
    return raised | {reason for _, _, reason in MAPPINGS}


REPO = Path(__file__).resolve().parents[2]
# One enum value a line: `  NAME = 6;` in the proto, `  NAME = 6,` in protobuf-es' TypeScript.
_ENUM_VALUE = re.compile(r"^\s+([A-Z][A-Z0-9_]*) = \d+[;,]$", re.MULTILINE)


def _enum_values(path: str, opening: str) -> set[str]:
    """The value names of the enum that ``opening`` starts in the file at ``path``."""
    text = (REPO / path).read_text()
    body = text[text.index(opening) :].split("}", 1)[0]
    return set(_ENUM_VALUE.findall(body)) - {"ERROR_REASON_UNSPECIFIED"}


# Where a reason has to be for a client to know it: the proto's enum itself, and the constants
# each client has from it (Python's generated Reason; TypeScript's Reason is built from the
# generated ErrorReason enum). tests/test_generated_code.py keeps the generated files current.
REASON_SOURCES: dict[str, Callable[[], set[str]]] = {
    "proto/promptadmission/v1/error_reason.proto": lambda: _enum_values(
        "proto/promptadmission/v1/error_reason.proto", "enum ErrorReason {"
    ),
    "the Python client's Reason": lambda: {str(member) for member in ClientReason},
    "the TypeScript client's ErrorReason": lambda: _enum_values(
        "clients/typescript/src/gen/promptadmission/v1/error_reason_pb.ts",
        "export enum ErrorReason {",
    ),
}


@pytest.mark.parametrize("source", REASON_SOURCES)
def test_every_reason_the_server_raises_is_an_error_reason(source: str) -> None:
    """A reason the server raises is in the proto's ErrorReason and in both clients' constants
    (a new reason is one line in the enum, then `make generate`), and none of them lists a
    reason the server never sends."""
    known = REASON_SOURCES[source]()
    raised = _raised_reasons()
    assert raised - known == set(), f"raised by the server but missing from {source}"
    assert known - raised == set(), f"in {source} but never sent by the server"


def test_the_interceptor_knows_the_reasons_of_the_proto() -> None:
    assert REASON_SOURCES["proto/promptadmission/v1/error_reason.proto"]() == KNOWN_REASONS


class _MadeUp(domain.FailedPrecondition):
    reason = "NOT_IN_THE_PROTO"


async def test_an_unknown_reason_is_logged_as_a_bug(
    errors_channel: grpc.aio.Channel, raiser: Raiser, unknown_error_reasons: list[str]
) -> None:
    error = await call_raising(errors_channel, raiser, lambda: _MadeUp("made up"))
    assert error.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert unknown_error_reasons == ["NOT_IN_THE_PROTO"]  # every other test fails on this
    unknown_error_reasons.clear()


async def test_subclasses_keep_their_reason(
    errors_channel: grpc.aio.Channel, raiser: Raiser
) -> None:
    error = rich_error(
        await call_raising(errors_channel, raiser, lambda: domain.SummaryNotSmaller(10, 5))
    )
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "SUMMARY_NOT_SMALLER")
    assert error.violated_fields == ["summary"]


async def test_internal_errors_are_generic_and_logged_with_an_id(
    errors_channel: grpc.aio.Channel, raiser: Raiser, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="admission_service.api.error_status"):
        error = rich_error(
            await call_raising(errors_channel, raiser, lambda: ValueError("prompt: be evil"))
        )
    assert error.code is grpc.StatusCode.INTERNAL
    assert "be evil" not in error.message
    error_id = error.error_infos[0].metadata["error_id"]
    assert error_id in error.message
    [record] = [r for r in caplog.records if error_id in r.getMessage()]
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)


async def test_sync_handlers_are_mapped_too(
    errors_channel: grpc.aio.Channel, raiser: Raiser
) -> None:
    error = rich_error(
        await call_raising(
            errors_channel, raiser, lambda: domain.SessionNotFound("s"), method="RaiseSync"
        )
    )
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")


async def test_a_handlers_own_abort_passes_through(errors_channel: grpc.aio.Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await errors_channel.unary_unary("/test.Errors/Raise", None, None)(b"abort", timeout=10)
    assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert caught.value.details() == "the handler's own abort"


async def test_success_passes_through(errors_channel: grpc.aio.Channel) -> None:
    response = await errors_channel.unary_unary("/test.Errors/Raise", None, None)(b"ok")
    assert response == b"fine"


async def test_cancellation_reaches_the_handler_and_is_not_mapped(
    errors_channel: grpc.aio.Channel, raiser: Raiser
) -> None:
    call = errors_channel.unary_unary("/test.Errors/Raise", None, None)(b"hang")
    await asyncio.wait_for(raiser.started.wait(), 10)
    call.cancel()
    await asyncio.wait_for(raiser.saw_cancellation.wait(), 10)
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_a_deadline_cancels_the_handler(
    errors_channel: grpc.aio.Channel, raiser: Raiser
) -> None:
    raiser.started.clear()
    raiser.saw_cancellation.clear()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await errors_channel.unary_unary("/test.Errors/Raise", None, None)(b"hang", timeout=0.5)
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(raiser.saw_cancellation.wait(), 10)


# ---- through the real service -------------------------------------------------------------


async def expect_error(call: Any) -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return rich_error(caught.value)


async def test_unknown_system_prompt_update_is_invalid_model_info(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    request = admit_request(session_id, "p", "hi")
    request.route.system_prompt_update = 7  # type: ignore[assignment]  # an open enum
    error = await expect_error(stub.Admit(request))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_MODEL_INFO")
    assert error.violated_fields == ["route.system_prompt_update"]
    await assert_untouched(stub, session_id)


async def test_unknown_tool_update_is_invalid_model_info(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    request = admit_request(session_id, "p", "hi")
    request.route.tool_update = 3  # type: ignore[assignment]
    error = await expect_error(stub.Admit(request))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_MODEL_INFO")
    assert error.violated_fields == ["route.tool_update"]


async def test_reconcile_checks_the_capability_too(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    route = pb.Route(provider="p", model="m", system_prompt_update=9)  # type: ignore[arg-type]
    request = api.ReconcileRequest(session_id=session_id, admission_id="a", route=route)
    error = await expect_error(stub.Reconcile(request))
    assert error.reason == "INVALID_MODEL_INFO"
    assert error.violated_fields == ["route.system_prompt_update"]


def _with_user_content(session_id: str, *blocks: pb.ContentBlock) -> api.AdmitRequest:
    request = admit_request(session_id, "p", "first", "second", "third")
    del request.users[2].content[:]
    request.users[2].content.extend(blocks)
    return request


def _with_role(session_id: str, role: pb.MessageRole.ValueType) -> api.AdmitRequest:
    request = admit_request(session_id, "p", "hi")
    request.users[0].role = role
    return request


INVALID_ADMITS: list[tuple[str, Callable[[str], api.AdmitRequest], str]] = [
    (
        "an empty content block",
        lambda s: _with_user_content(
            s, pb.ContentBlock(text=pb.TextBlock(text="x")), pb.ContentBlock()
        ),
        "users[2].content[1]",
    ),
    (
        "a reasoning block from the user",
        lambda s: _with_user_content(s, pb.ContentBlock(reasoning=pb.ReasoningBlock(text="x"))),
        "users[2].content[0]",
    ),
    (
        "a user with the assistant's role",
        lambda s: _with_role(s, pb.MESSAGE_ROLE_ASSISTANT),
        "users[0].role",
    ),
    ("no route", lambda s: admit_request(s, "p", "hi", route=None), "route"),
    (
        "an unknown wire format",
        lambda s: admit_request(s, "p", "hi", wire_format=42),
        "wire_format",
    ),
    ("a negative turn", lambda s: admit_request(s, "p", "hi", turn=-1), "turn"),
]


@pytest.mark.parametrize(
    ("build", "field"), [pytest.param(b, f, id=i) for i, b, f in INVALID_ADMITS]
)
async def test_invalid_admits_name_the_field(
    stub: api_grpc.AdmissionServiceAsyncStub,
    build: Callable[[str], api.AdmitRequest],
    field: str,
) -> None:
    session_id = await create_session(stub)
    error = await expect_error(stub.Admit(build(session_id)))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD")
    assert error.violated_fields == [field]
    await assert_untouched(stub, session_id)


async def test_a_negative_page_size_is_invalid(stub: api_grpc.AdmissionServiceAsyncStub) -> None:
    error = await expect_error(stub.ListSessions(api.ListSessionsRequest(page_size=-1)))
    assert error.violated_fields == ["page_size"]


async def test_a_foreign_page_token_is_invalid(stub: api_grpc.AdmissionServiceAsyncStub) -> None:
    error = await expect_error(stub.ListSessions(api.ListSessionsRequest(page_token="forged")))
    assert error.violated_fields == ["page_token"]


async def test_an_empty_compaction_selection_is_invalid(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    error = await expect_error(
        stub.PlanCompaction(api.PlanCompactionRequest(session_id=session_id))
    )
    assert error.violated_fields == ["selection"]


async def test_a_service_error_leaves_the_server_serving(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    await expect_error(stub.GetSession(api.GetSessionRequest(session_id="")))
    session_id = await create_session(stub)
    response = await stub.GetSession(api.GetSessionRequest(session_id=session_id))
    assert response.session.session_id == session_id


async def test_an_unreachable_database_is_unavailable(start_api: StartApi) -> None:
    client = await start_api(database_url="postgresql+psycopg://nobody:x@127.0.0.1:9/none")
    error = await expect_error(
        client.stub.GetSession(api.GetSessionRequest(session_id="s"), timeout=30)
    )
    assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE")
    assert "127.0.0.1" not in error.message and "nobody" not in error.message


async def assert_untouched(stub: api_grpc.AdmissionServiceAsyncStub, session_id: str) -> None:
    """The session is as ``create_session`` left it: no event was committed."""
    response = await stub.GetSession(api.GetSessionRequest(session_id=session_id))
    assert response.session.event_count == 0
