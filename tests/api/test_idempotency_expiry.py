"""A request_id past its retention is expired when it is read, not only once the sweeper has
deleted it (issue 21, item 6), through the real server on PostgreSQL.

Before, a key older than ``PAS_IDEMPOTENCY_RETENTION_SECONDS`` still replayed its stored
response until the sweeper happened to run (every ``PAS_IDEMPOTENCY_SWEEP_SECONDS``, or never
with 0). Here the sweeper never runs and the key is aged in the database.
"""

from __future__ import annotations

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as messages
from sqlalchemy import text

from tests.api.support import ApiClient, StartApi, admit_request, new_session_id, rich_error


async def age_keys(client: ApiClient, session_id: str, seconds: int) -> None:
    async with client.server.engine.begin() as connection:
        await connection.execute(
            text(
                "UPDATE idempotency_keys SET create_time = now() - make_interval(secs => :s)"
                " WHERE session_id = :sid"
            ),
            {"s": seconds, "sid": session_id},
        )


async def test_an_expired_request_id_is_new_again_before_any_sweep(start_api: StartApi) -> None:
    client = await start_api(idempotency_retention_seconds=60.0, idempotency_sweep_seconds=0.0)
    sid = new_session_id()
    create = messages.CreateSessionRequest(session_id=sid, request_id="create-1")
    await client.stub.CreateSession(create)
    admit = admit_request(sid, "P", "u", turn=1, request_id="admit-1")
    first = await client.stub.Admit(admit)
    assert (await client.stub.Admit(admit)).admission_id == first.admission_id  # a replay

    await age_keys(client, sid, 59)  # still inside the window: replays
    assert (await client.stub.Admit(admit)).admission_id == first.admission_id
    await age_keys(client, sid, 61)
    again = await client.stub.Admit(admit)  # executed anew: a new admission
    assert again.admission_id != first.admission_id
    assert (await client.stub.Admit(admit)).admission_id == again.admission_id  # stored anew
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await client.stub.CreateSession(create)  # not a replay any more: the session exists
    assert rich_error(caught.value).reason == "SESSION_ALREADY_EXISTS"
