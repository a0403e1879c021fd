"""Requests the reliability suite's hostile-input scenario broke (``docs/RELIABILITY.md``):
bytes that do not parse were answered UNKNOWN with the parser's text, and identifiers holding
NUL reached PostgreSQL (which cannot store NUL in text) and came back INTERNAL. Both are
INVALID_ARGUMENT naming the field now. The malformed bytes are the crafted ones of
``malformed_bytes.MALFORMED`` (which the reliability scenario also sends to a real process)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as messages
from promptadmission.v1 import session_pb2 as pb

from .malformed_bytes import MALFORMED, Malformed
from .support import ApiClient, admit_request, create_session, rich_error

SERVICE = "/promptadmission.v1.AdmissionService"


@pytest.mark.parametrize("case", MALFORMED, ids=lambda case: f"{case.method}: {case.what}")
async def test_bytes_that_do_not_parse_are_invalid_argument(
    api: ApiClient, case: Malformed
) -> None:
    raw: Any = api.channel.unary_unary(
        f"{SERVICE}/{case.method}",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await raw(case.data, timeout=10)
    error = rich_error(failure.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.reason == "INVALID_FIELD"
    assert error.violated_fields == [case.field]
    assert "DecodeError" not in error.message
    await api.stub.ListSessions(messages.ListSessionsRequest(page_size=1), timeout=10)


async def test_identifiers_with_nul_are_invalid_argument(api: ApiClient) -> None:
    stub = api.stub
    sid = await create_session(stub)
    admitted = await stub.Admit(admit_request(sid, "A", "hello"))
    call = pb.ContentBlock(tool_call=pb.ToolCallBlock(call_id="c\x00", name="read"))
    cases: list[tuple[Any, Any, str]] = [
        (stub.CreateSession, messages.CreateSessionRequest(request_id="r\x00"), "request_id"),
        (stub.Admit, admit_request(sid, "A", "x", request_id="\x00"), "request_id"),
        (
            stub.Reconcile,
            messages.ReconcileRequest(
                session_id=sid, admission_id="a\x00", route=admit_request(sid, "A").route
            ),
            "admission_id",
        ),
        (
            stub.Record,
            messages.RecordRequest(
                session_id=sid,
                admission_id=admitted.admission_id,
                assistant=pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=[call]),
            ),
            "assistant.content[0].tool_call.call_id",
        ),
        (
            stub.Record,
            messages.RecordRequest(
                session_id=sid,
                admission_id=admitted.admission_id,
                tool_results=[pb.ToolResult(call_id="\x00")],
            ),
            "tool_results[0].call_id",
        ),
    ]
    for rpc, request, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await rpc(request, timeout=10)
        assert failure.value.code() is grpc.StatusCode.INVALID_ARGUMENT, field
        assert rich_error(failure.value).violated_fields == [field]
