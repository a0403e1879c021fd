"""Every client string that reaches an index or a key has a length bound checked at the edge
(issue 21, item 5), through the real server on PostgreSQL: each field at its bound is served,
one character past it is INVALID_ARGUMENT naming the field, and the session is untouched.

Before, a tool call id longer than about 2.7 KB reached PostgreSQL's b-tree row limit (SQLSTATE
54000, which psycopg files under OperationalError) and came back as UNAVAILABLE /
DATABASE_UNAVAILABLE "retry with backoff": a request that can never succeed, retried forever.
A database refusal of a value is now INVALID_ARGUMENT too (the last test: the edge bound raised
past the row limit on purpose).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from admission_service.app.limits import Limits
from promptadmission.v1 import admission_service_pb2 as messages
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import ApiClient, StartApi, admit_request, create_session, rich_error

LIMITS = Limits()
# Four UTF-8 bytes a character: the bound in bytes is the worst case an index sees.
WIDE = "😀"


def tool_call(call_id: str, name: str = "search") -> pb.ContentBlock:
    return pb.ContentBlock(
        tool_call=pb.ToolCallBlock(call_id=call_id, name=name, arguments_json="{}")
    )


def assistant(*blocks: pb.ContentBlock) -> pb.Message:
    return pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=list(blocks))


def result(call_id: str) -> pb.ToolResult:
    return pb.ToolResult(call_id=call_id, content=[pb.ContentBlock(text=pb.TextBlock(text="ok"))])


async def admitted(client: ApiClient, **fields: Any) -> tuple[str, str]:
    sid = await create_session(client.stub)
    reply = await client.stub.Admit(admit_request(sid, "P", "u", turn=1, **fields))
    return sid, reply.admission_id


async def revision(client: ApiClient, sid: str) -> int:
    info = await client.stub.GetSession(messages.GetSessionRequest(session_id=sid))
    return info.session.revision


# Each case: the field's name, its bound, and a call sending a value of the given length
# (returning the session it touched, "" when none).
Case = Callable[[ApiClient, int], Awaitable[str]]


async def session_id_case(client: ApiClient, length: int) -> str:
    sid = ("s" + uuid.uuid4().hex + "x" * length)[:length]
    await client.stub.CreateSession(messages.CreateSessionRequest(session_id=sid))
    return ""


async def request_id_case(client: ApiClient, length: int) -> str:
    request_id = (uuid.uuid4().hex + WIDE * length)[:length]
    await client.stub.CreateSession(messages.CreateSessionRequest(request_id=request_id))
    return ""


async def tool_name_case(client: ApiClient, length: int) -> str:
    sid = await create_session(client.stub)
    tool = pb.Tool(name="t" * length, parameters_json="{}")
    await client.stub.Admit(admit_request(sid, "P", "u", turn=1, tools=[tool]))
    return sid


async def config_key_case(client: ApiClient, length: int) -> str:
    sid = await create_session(client.stub)
    await client.stub.Admit(admit_request(sid, "P", "u", turn=1, config={WIDE * length: "v"}))
    return sid


async def route_model_case(client: ApiClient, length: int) -> str:
    sid = await create_session(client.stub)
    route = pb.Route(provider="openai", model="m" * length)
    await client.stub.Admit(admit_request(sid, "P", "u", turn=1, route=route))
    return sid


async def record_admission_id_case(client: ApiClient, length: int) -> str:
    sid, admission_id = await admitted(client)
    wanted = (admission_id + "a" * length)[:length]
    request = messages.RecordRequest(
        session_id=sid,
        admission_id=wanted,
        assistant=assistant(pb.ContentBlock(text=pb.TextBlock(text="hi"))),
    )
    try:
        await client.stub.Record(request)
    except grpc.aio.AioRpcError as error:
        if rich_error(error).reason != "ADMISSION_NOT_FOUND":  # at the bound: looked up
            raise
    return sid


async def call_id_case(client: ApiClient, length: int) -> str:
    """The call id of an assistant's tool call (Record), then its result (the next Admit's
    previous_output): the key of tool_calls."""
    sid, admission_id = await admitted(client)
    call_id = WIDE * length
    await client.stub.Record(
        messages.RecordRequest(
            session_id=sid, admission_id=admission_id, assistant=assistant(tool_call(call_id))
        )
    )
    return sid


async def result_call_id_case(client: ApiClient, length: int) -> str:
    sid, admission_id = await admitted(client)
    call_id = WIDE * LIMITS.max_tool_call_id_length
    output = messages.StepOutput(
        admission_id=admission_id,
        assistant=assistant(tool_call(call_id)),
        tool_results=[result((call_id + "x")[:length] if length > len(call_id) else call_id)],
    )
    await client.stub.Admit(admit_request(sid, "P", turn=1, step=2, previous_output=output))
    return sid


async def previous_output_call_id_case(client: ApiClient, length: int) -> str:
    sid, admission_id = await admitted(client)
    call_id = WIDE * length
    output = messages.StepOutput(
        admission_id=admission_id,
        assistant=assistant(tool_call(call_id)),
        tool_results=[result(call_id)],
    )
    await client.stub.Admit(admit_request(sid, "P", turn=1, step=2, previous_output=output))
    return sid


async def tool_call_name_case(client: ApiClient, length: int) -> str:
    sid, admission_id = await admitted(client)
    await client.stub.Record(
        messages.RecordRequest(
            session_id=sid,
            admission_id=admission_id,
            assistant=assistant(tool_call("call_1", name="n" * length)),
        )
    )
    return sid


CASES: list[tuple[str, int, Case]] = [
    ("session_id", LIMITS.max_session_id_length, session_id_case),
    ("request_id", LIMITS.max_request_id_length, request_id_case),
    ("tools[0].name", LIMITS.max_tool_name_length, tool_name_case),
    ("config", LIMITS.max_config_key_length, config_key_case),
    ("route.model", LIMITS.max_route_name_length, route_model_case),
    ("admission_id", LIMITS.max_admission_id_length, record_admission_id_case),
    ("assistant.content[0].tool_call.call_id", LIMITS.max_tool_call_id_length, call_id_case),
    (
        "previous_output.tool_results[0].call_id",
        LIMITS.max_tool_call_id_length,
        result_call_id_case,
    ),
    (
        "previous_output.assistant.content[0].tool_call.call_id",
        LIMITS.max_tool_call_id_length,
        previous_output_call_id_case,
    ),
    ("assistant.content[0].tool_call.name", LIMITS.max_tool_name_length, tool_call_name_case),
]


@pytest.mark.parametrize(("field", "bound", "case"), CASES, ids=[c[0] for c in CASES])
async def test_each_field_is_served_at_its_bound_and_refused_past_it(
    api: ApiClient, field: str, bound: int, case: Case
) -> None:
    await case(api, bound)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await case(api, bound + 1)
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT, error.message
    assert error.violated_fields == [field], error.message


async def test_a_refused_call_id_leaves_the_session_untouched(api: ApiClient) -> None:
    sid, admission_id = await admitted(api)
    before = await revision(api, sid)
    request = messages.RecordRequest(
        session_id=sid, admission_id=admission_id, assistant=assistant(tool_call("c" * 3000))
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await api.stub.Record(request)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert await revision(api, sid) == before


async def test_a_value_the_database_cannot_store_is_not_retryable(start_api: StartApi) -> None:
    """With the edge bound raised past PostgreSQL's index row limit, a 6 000-character random
    call id (PostgreSQL compresses index entries: a repetitive one would fit) reaches the
    database: its refusal (SQLSTATE 54000) is INVALID_ARGUMENT, never UNAVAILABLE, and
    nothing is written."""
    client = await start_api(limits=Limits(max_tool_call_id_length=10_000))
    sid, admission_id = await admitted(client)
    call_id = secrets.token_urlsafe(4500)[:6000]
    request = messages.RecordRequest(
        session_id=sid, admission_id=admission_id, assistant=assistant(tool_call(call_id))
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await client.stub.Record(request)
    error = rich_error(caught.value)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD")
    assert error.error_infos[0].metadata["sqlstate"] == "54000"
    assert await revision(client, sid) == 1
