"""Page tokens through the real server: bound to the session and tenant they were issued for,
valid on every replica sharing the configuration, and still valid across a key rotation."""

from __future__ import annotations

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

from tests.api.support import StartApi, admit_request, create_session, rich_error

OLD_KEY = "old-page-token-key-0123456789abcdef"
NEW_KEY = "new-page-token-key-0123456789abcdef"


async def first_events_token(stub: api_grpc.AdmissionServiceAsyncStub, session_id: str) -> str:
    page = await stub.ListEvents(api.ListEventsRequest(session_id=session_id, page_size=1))
    assert page.next_page_token
    return page.next_page_token


async def session_with_events(stub: api_grpc.AdmissionServiceAsyncStub) -> str:
    session_id = await create_session(stub)
    await stub.Admit(admit_request(session_id, "prompt", "hello"))
    return session_id


async def assert_refused(call: object) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    error = rich_error(caught.value)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD")
    assert error.violated_fields == ["page_token"]


async def test_a_token_of_another_session_is_invalid(
    stub: api_grpc.AdmissionServiceAsyncStub,
) -> None:
    first, second = await session_with_events(stub), await session_with_events(stub)
    token = await first_events_token(stub, first)
    await assert_refused(
        stub.ListEvents(api.ListEventsRequest(session_id=second, page_size=1, page_token=token))
    )
    # the ListSessions cursor is no ListEvents cursor either, and the reverse
    sessions = await stub.ListSessions(api.ListSessionsRequest(page_size=1))
    await assert_refused(
        stub.ListEvents(
            api.ListEventsRequest(session_id=first, page_token=sessions.next_page_token)
        )
    )
    await assert_refused(stub.ListSessions(api.ListSessionsRequest(page_token=token)))


async def test_replicas_accept_each_others_tokens_and_rotation_keeps_them(
    start_api: StartApi,
) -> None:
    """Two servers on one database agree on the stored key; a rotated server (new key first,
    the old one kept) accepts the tokens the old key signed; a server without the old key
    refuses them."""
    one, two = await start_api(), await start_api()
    session_id = await session_with_events(one.stub)
    token = await first_events_token(one.stub, session_id)
    request = api.ListEventsRequest(session_id=session_id, page_size=1, page_token=token)
    assert (await two.stub.ListEvents(request)).events

    old = await start_api(page_token_keys=(OLD_KEY,))
    rotated = await start_api(page_token_keys=(NEW_KEY, OLD_KEY))
    retired = await start_api(page_token_keys=(NEW_KEY,))
    in_flight = await first_events_token(old.stub, session_id)
    request = api.ListEventsRequest(session_id=session_id, page_size=1, page_token=in_flight)
    page = await rotated.stub.ListEvents(request)
    assert page.events and page.next_page_token
    await assert_refused(retired.stub.ListEvents(request))
    await assert_refused(one.stub.ListEvents(request))  # the stored key is another key
    # what the rotated server signs, the retired-old-key server reads
    follow = api.ListEventsRequest(
        session_id=session_id, page_size=1, page_token=page.next_page_token
    )
    assert (await retired.stub.ListEvents(follow)).events
