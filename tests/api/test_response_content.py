"""What a derived request's response carries, and responses of any size (issue 23 items 1, 2),
through the real server.

A response carries the typed messages or the rendered provider body — the wire format's one
form by default, both only when asked — and the response bound counts only what is sent.
StreamAdmit and StreamReconcile send the response in chunks of at most 1 MiB: a FULL request
far over gRPC's 4 MiB default reaches the Python client (default channel limits) whole, its
SHA-256 checked, on a NEUTRAL and an Anthropic route; a repeated request_id replays it byte for
byte, on either RPC.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import cast

import grpc
import pytest
from admission_service.app.limits import Limits
from promptadmission import AdmissionClient, AdmissionError, Reason
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import (
    REPLACE_ROUTE,
    StartApi,
    admit_request,
    create_session,
    grown_by_tool_outputs,
    new_session_id,
    rich_error,
    tool_step,
)

MIB = 1 << 20
ANTHROPIC_ROUTE = pb.Route(provider="anthropic", model="claude-test", context_window=1_000_000)
OTHER_ROUTE = pb.Route(provider="other", model="big", context_window=10_000_000)


async def test_the_default_is_the_wire_formats_one_form(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    neutral = await stub.Admit(admit_request(session_id, "Be terse.", "hi", route=REPLACE_ROUTE))
    assert neutral.request.content == pb.REQUEST_CONTENT_MESSAGES
    assert len(neutral.request.messages) == 2 and not neutral.request.body_json

    chat = await stub.Admit(
        admit_request(
            session_id,
            "Be terse.",
            "again",
            route=REPLACE_ROUTE,
            wire_format=pb.WIRE_FORMAT_OPENAI_CHAT,
        )
    )
    assert chat.request.content == pb.REQUEST_CONTENT_BODY
    assert not chat.request.messages
    assert [m["role"] for m in json.loads(chat.request.body_json)["messages"]] == [
        "system",
        "user",
        "user",
    ]
    assert chat.request.total_messages == 3


@pytest.mark.parametrize(
    ("content", "messages", "body"),
    [
        (pb.REQUEST_CONTENT_MESSAGES, True, False),
        (pb.REQUEST_CONTENT_BODY, False, True),
        (pb.REQUEST_CONTENT_BOTH, True, True),
    ],
)
async def test_each_content_replays_byte_for_byte(
    stub: api_grpc.AdmissionServiceAsyncStub,
    content: pb.RequestContent.ValueType,
    messages: bool,
    body: bool,
) -> None:
    session_id = await create_session(stub)
    request = admit_request(
        session_id,
        "Be terse.",
        "hi",
        route=REPLACE_ROUTE,
        wire_format=pb.WIRE_FORMAT_OPENAI_RESPONSES,
        content=content,
        request_id=new_session_id(),
    )
    first = await stub.Admit(request)
    assert first.request.content == content
    assert bool(first.request.messages) is messages
    assert bool(first.request.body_json) is body
    again = await stub.Admit(request)
    assert again.SerializeToString(deterministic=True) == first.SerializeToString(
        deterministic=True
    )
    reconciled = await stub.Reconcile(
        api.ReconcileRequest(
            session_id=session_id,
            admission_id=first.admission_id,
            route=REPLACE_ROUTE,
            wire_format=pb.WIRE_FORMAT_OPENAI_RESPONSES,
            content=content,
        )
    )
    assert reconciled.request.content == content
    inspected = await stub.Inspect(
        api.InspectRequest(
            session_id=session_id, wire_format=pb.WIRE_FORMAT_OPENAI_RESPONSES, content=content
        )
    )
    assert bool(inspected.request.messages) is messages
    assert inspected.request.body_json == (first.request.body_json if body else "")


async def test_a_body_alone_needs_a_provider_format(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    session_id = await create_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Admit(admit_request(session_id, "p", "hi", content=pb.REQUEST_CONTENT_BODY))
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.violated_fields == ["content"]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.StreamAdmit(
            api.StreamAdmitRequest(
                request=admit_request(session_id, "p", "hi", content=pb.REQUEST_CONTENT_BODY)
            )
        ).read()
    assert rich_error(caught.value).violated_fields == ["request.content"]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Inspect(
            api.InspectRequest(session_id=session_id, content=7)  # type: ignore[arg-type]
        )
    assert rich_error(caught.value).violated_fields == ["content"]


async def test_the_bound_counts_only_what_is_sent(start_api: StartApi) -> None:
    """A request whose messages and body together pass the bound, either alone not."""
    limits = replace(Limits(), max_response_bytes=300_000)
    client = await start_api(limits=limits)
    stub = client.stub
    session_id = await create_session(stub)
    text = "x" * 200_000
    chat = pb.WIRE_FORMAT_OPENAI_CHAT
    request = admit_request(
        session_id, "p", text, route=REPLACE_ROUTE, wire_format=chat, validate_only=True
    )
    request.content = pb.REQUEST_CONTENT_BOTH
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Admit(request)
    error = rich_error(caught.value)
    assert error.reason == "RESPONSE_TOO_LARGE"
    assert "StreamAdmit" in error.message
    one = await stub.Admit(
        admit_request(session_id, "p", text, route=REPLACE_ROUTE, wire_format=chat)
    )
    assert json.loads(one.request.body_json)["messages"][1]["content"] == text


@pytest.mark.parametrize("wire_format", [pb.WIRE_FORMAT_NEUTRAL, pb.WIRE_FORMAT_ANTHROPIC_MESSAGES])
async def test_a_full_request_over_4_mib_arrives_streamed(
    start_api: StartApi, wire_format: pb.WireFormat.ValueType
) -> None:
    """Three 2 MiB tool outputs: the unary Admit is refused (a 6 MiB response), StreamAdmit's
    chunks reach the client through its default 4 MiB receive limit, whole and verified; a
    retry under the same request_id replays the same bytes, by either RPC."""
    server = await start_api(limits=replace(Limits(), max_message_bytes=3 * MIB))
    async with AdmissionClient(server.server.target, timeout=120) as client:
        session_id, step = await grown_by_tool_outputs(client, OTHER_ROUTE, 3, 2 * MIB)
        last = tool_step(session_id, 3, step.admission_id, 2 * MIB, OTHER_ROUTE)
        last.wire_format = wire_format
        last.request_id = new_session_id()
        with pytest.raises(AdmissionError) as refused:
            await client.admit(last)
        assert refused.value.reason == Reason.RESPONSE_TOO_LARGE

        streamed = await client.admit_streamed(last)
        size = streamed.ByteSize()
        assert size > 6 * MIB
        if wire_format == pb.WIRE_FORMAT_NEUTRAL:
            results = [
                m.content[0].tool_result.content[0].text.text
                for m in streamed.request.messages
                if m.role == pb.MESSAGE_ROLE_TOOL
            ]
        else:
            body = json.loads(streamed.request.body_json)
            results = [
                block["content"][0]["text"]
                for message in body["messages"]
                if message["role"] == "user" and isinstance(message["content"], list)
                for block in message["content"]
                if block["type"] == "tool_result"
            ]
        assert results == [chr(97 + n) * 2 * MIB for n in (1, 2, 3)]

        # The replay's chunks as the raw stub sees them: at most 1 MiB each, the first
        # announcing the whole, its SHA-256 in the first or, asked for, in the last; each
        # replay sends the same bytes.
        replays = []
        for sha256_last in (False, True):
            call = client.stub.StreamAdmit(
                api.StreamAdmitRequest(request=last, sha256_in_last_chunk=sha256_last)
            )
            chunks = [chunk async for chunk in cast("AsyncIterator[api.StreamAdmitResponse]", call)]
            assert all(len(chunk.data) <= MIB for chunk in chunks) and len(chunks) > 6
            data = b"".join(chunk.data for chunk in chunks)
            assert chunks[0].total_bytes == len(data)
            assert not any(chunk.total_bytes for chunk in chunks[1:])
            carrier = -1 if sha256_last else 0
            assert chunks[carrier].sha256 == hashlib.sha256(data).digest()
            assert sum(bool(chunk.sha256) for chunk in chunks) == 1
            replays.append(data)
        assert replays[0] == replays[1]
        assert api.AdmitResponse.FromString(replays[0]) == streamed

        reconciled = await client.reconcile_streamed(
            api.ReconcileRequest(
                session_id=session_id,
                admission_id=streamed.admission_id,
                route=OTHER_ROUTE,
                wire_format=wire_format,
            )
        )
        assert reconciled.request.total_messages == streamed.request.total_messages
