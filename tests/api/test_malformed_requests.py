"""Requests the reliability suite's hostile-input scenario broke (``docs/RELIABILITY.md``):
bytes that do not parse were answered UNKNOWN with the parser's text, and identifiers holding
NUL reached PostgreSQL (which cannot store NUL in text) and came back INTERNAL. Both are
INVALID_ARGUMENT naming the field now.

The crafted malformed AdmitRequests (invalid UTF-8 in a nested field, a length past the end, a
wrong wire type, nesting past the parser's limit) are ``CRAFTED_ADMITS`` in
tests/reliability/test_hostile.py; here are the cases of other methods only."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as messages
from promptadmission.v1 import session_pb2 as pb

from .support import ApiClient, admit_request, create_session, rich_error

SERVICE = "/promptadmission.v1.AdmissionService"


def ld(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


@pytest.mark.parametrize(
    ("method", "data", "field"),
    [
        ("Reconcile", ld(5, ld(2, b"\xc3")), "route.model"),  # truncated UTF-8
        ("GetSession", b"\xff\xff\xff", ""),  # no field to blame: the whole request
        ("ListEvents", ld(3, b"\xfe"), "page_token"),
    ],
)
async def test_bytes_that_do_not_parse_are_invalid_argument(
    api: ApiClient, method: str, data: bytes, field: str
) -> None:
    raw: Any = api.channel.unary_unary(
        f"{SERVICE}/{method}",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await raw(data, timeout=10)
    error = rich_error(failure.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.reason == "INVALID_FIELD"
    assert error.violated_fields == [field]
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
