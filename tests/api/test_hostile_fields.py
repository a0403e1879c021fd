"""Client-controlled input never yields INTERNAL (issue 13, finding 4): hostile tokens and
deeply nested JSON are INVALID_ARGUMENT naming the field, and the session is untouched.

Before: JSON nested ~1 000 deep in Tool.parameters_json or ToolCallBlock.arguments_json raised
RecursionError (INTERNAL: a model that emits deeply nested arguments broke Record), and plan or
page tokens that decoded to an unexpected shape raised KeyError or TypeError.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as messages
from promptadmission.v1 import session_pb2 as pb

from .support import (
    ApiClient,
    StartApi,
    admit_request,
    create_session,
    rich_error,
)


def nested_json(depth: int) -> str:
    """A JSON object whose innermost value sits ``depth`` levels deep (arrays inside)."""
    return '{"a":' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"


def tool(parameters_json: str) -> pb.Tool:
    return pb.Tool(name="t", description="d", parameters_json=parameters_json)


def tool_call(arguments_json: str) -> pb.Message:
    block = pb.ToolCallBlock(call_id="c1", name="read", arguments_json=arguments_json)
    return pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=[pb.ContentBlock(tool_call=block)])


async def refused(call: Any, field: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call
    error = rich_error(failure.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT, error.message
    assert error.violated_fields == [field]
    return error.message


async def revision(client: ApiClient, sid: str) -> int:
    reply = await client.stub.GetSession(messages.GetSessionRequest(session_id=sid), timeout=10)
    return reply.session.revision


@pytest.mark.parametrize("depth", [65, 1000, 100_000])
async def test_deep_json_is_invalid_argument_naming_the_limit(api: ApiClient, depth: int) -> None:
    stub = api.stub
    sid = await create_session(stub)
    deep = nested_json(depth)
    message = await refused(
        stub.Admit(admit_request(sid, "P", "u", tools=[tool(deep)]), timeout=30),
        "tools[0].parameters_json",
    )
    assert "nested deeper than 64 levels" in message and "max_json_depth" in message
    admitted = await stub.Admit(admit_request(sid, "P", "u"), timeout=30)
    before = await revision(api, sid)
    await refused(
        stub.Record(
            messages.RecordRequest(
                session_id=sid, admission_id=admitted.admission_id, assistant=tool_call(deep)
            ),
            timeout=30,
        ),
        "assistant.content[0].tool_call.arguments_json",
    )
    assert await revision(api, sid) == before  # nothing committed


async def test_json_at_the_depth_limit_is_accepted(api: ApiClient) -> None:
    sid = await create_session(api.stub)
    request = admit_request(sid, "P", "u", tools=[tool(nested_json(64))])
    await api.stub.Admit(request, timeout=30)


async def test_the_json_depth_limit_is_configurable(start_api: StartApi) -> None:
    from admission_service.app.limits import Limits

    client = await start_api(limits=Limits(max_json_depth=8))
    sid = await create_session(client.stub)
    await client.stub.Admit(admit_request(sid, "P", "u", tools=[tool(nested_json(8))]))
    message = await refused(
        client.stub.Admit(admit_request(sid, "P", "u", tools=[tool(nested_json(9))])),
        "tools[0].parameters_json",
    )
    assert "deeper than 8 levels" in message


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


# The hostile tokens: base64 of unexpected JSON, huge or odd offsets, NUL, surrogates,
# plus plain garbage.
HOSTILE_TOKENS = [
    b64(b'{"b":5,"c":"x"}'),
    b64(b"[" * 100_000),
    b64(json.dumps({"b": json.dumps({"after": 10**30}), "c": "0" * 16}).encode()),
    b64(json.dumps({"b": json.dumps({"after": "x"}), "c": "0" * 16}).encode()),
    b64(json.dumps({"b": json.dumps({"after": 1.5}), "c": "0" * 16}).encode()),
    b64(b'{"b":"\\u0000","c":"\\ud800"}'),
    b64(b"\x00" * 64),
    "!!!not base64!!!",
    "a" * 5000,
    "\x00",
]


@pytest.mark.parametrize("token", HOSTILE_TOKENS, ids=range(len(HOSTILE_TOKENS)))
async def test_hostile_plan_tokens_are_invalid_argument(api: ApiClient, token: str) -> None:
    sid = await create_session(api.stub)
    await refused(
        api.stub.Compact(
            api_compact(sid, token),
            timeout=10,
        ),
        "plan_token",
    )
    assert await revision(api, sid) == 0


def api_compact(sid: str, token: str) -> messages.CompactRequest:
    return messages.CompactRequest(session_id=sid, plan_token=token, summary="s")


async def test_a_signed_plan_token_of_another_shape_is_invalid_argument(api: ApiClient) -> None:
    """Minted with the server's own key for the right scope, but missing fields or with a
    string where a number belongs (an older version's token): INVALID_ARGUMENT, not KeyError."""
    sid = await create_session(api.stub)
    tokens = await api.server.deps.page_tokens.ready()
    scope = f"compaction/default/{sid}"
    cursors: list[dict[str, int | str]] = [
        {},
        {"generation": 0, "next_seq": 1},
        {"generation": 0, "next_seq": 1, "start": "x", "end": 1},
    ]
    for cursor in cursors:
        await refused(
            api.stub.Compact(api_compact(sid, tokens.encode(scope, cursor))), "plan_token"
        )


@pytest.mark.parametrize("token", HOSTILE_TOKENS, ids=range(len(HOSTILE_TOKENS)))
async def test_hostile_page_tokens_are_invalid_argument(api: ApiClient, token: str) -> None:
    sid = await create_session(api.stub)
    await refused(
        api.stub.ListSessions(messages.ListSessionsRequest(page_token=token), timeout=10),
        "page_token",
    )
    await refused(
        api.stub.ListEvents(
            messages.ListEventsRequest(session_id=sid, page_token=token), timeout=10
        ),
        "page_token",
    )


async def test_a_page_token_with_a_huge_session_id_is_invalid_argument(api: ApiClient) -> None:
    """Found by the fuzzer's long run: a 64 KiB session_id with a page token made the token's
    scope too long to sign (struct.error, INTERNAL)."""
    sid = await create_session(api.stub)
    await api.stub.Admit(admit_request(sid, "P", "u"))
    page = await api.stub.ListEvents(messages.ListEventsRequest(session_id=sid, page_size=1))
    token = page.next_page_token
    assert token
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await api.stub.ListEvents(
            messages.ListEventsRequest(session_id="x" * 65537, page_token=token), timeout=10
        )
    assert failure.value.code() is grpc.StatusCode.INVALID_ARGUMENT
