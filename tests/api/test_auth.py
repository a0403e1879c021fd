"""Authentication and tenancy over a real channel (SPEC §9).

A server with bearer tokens for two tenants, alpha and beta. Every RPC without a valid token is
UNAUTHENTICATED; every RPC beta aims at alpha's session is NOT_FOUND, exactly as for a session
that does not exist, and leaves alpha's session as it was.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from admission_service.api.tenancy import hash_token
from grpc_health.v1 import health_pb2, health_pb2_grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import (
    ApiClient,
    admit_request,
    async_stub,
    channel_with_metadata,
    new_session_id,
    rich_error,
    start_client,
)
from tests.auditing import snapshot

ALPHA_TOKEN = "alpha-" + uuid.uuid4().hex
BETA_TOKEN = "beta-" + uuid.uuid4().hex
# Tenant ids of this run only (the database is shared by the whole run, and reused by reruns).
RUN = uuid.uuid4().hex[:8]
TOKENS = {hash_token(ALPHA_TOKEN): f"alpha-{RUN}", hash_token(BETA_TOKEN): f"beta-{RUN}"}
if TYPE_CHECKING:
    Stub = api_grpc.AdmissionServiceAsyncStub


@dataclass
class Tenants:
    server: ApiClient
    channels: list[grpc.aio.Channel]

    def stub(self, *metadata: tuple[str, str]) -> Stub:
        channel = channel_with_metadata(self.server.server.target, *metadata)
        self.channels.append(channel)
        return async_stub(channel)

    def of(self, token: str) -> Stub:
        return self.stub(("authorization", f"Bearer {token}"))

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close(None)


@pytest.fixture(scope="module")
async def tenants(database_url: str) -> AsyncIterator[Tenants]:
    client = await start_client(database_url, token_tenants=TOKENS)
    tenants = Tenants(client, [])
    yield tenants
    await tenants.close()
    await client.close()


# ---- every RPC, keyed by name -----------------------------------------------------------------


@dataclass
class Alpha:
    """A session of alpha's with an admission and a compaction plan, to aim beta's calls at."""

    session_id: str
    admission_id: str
    plan_token: str


def calls(alpha: Alpha) -> dict[str, Callable[[Stub], Awaitable[Any]]]:
    """Every RPC of the service, aimed at alpha's session."""
    sid = alpha.session_id
    assistant = pb.Message(
        role=pb.MESSAGE_ROLE_ASSISTANT, content=[pb.ContentBlock(text=pb.TextBlock(text="a"))]
    )
    return {
        "CreateSession": lambda s: s.CreateSession(api.CreateSessionRequest(session_id=sid)),
        "GetSession": lambda s: s.GetSession(api.GetSessionRequest(session_id=sid)),
        "ListSessions": lambda s: s.ListSessions(api.ListSessionsRequest()),
        "DeleteSession": lambda s: s.DeleteSession(api.DeleteSessionRequest(session_id=sid)),
        "Admit": lambda s: s.Admit(admit_request(sid, "beta's prompt", "beta's user", turn=9)),
        "Reconcile": lambda s: s.Reconcile(
            api.ReconcileRequest(
                session_id=sid, admission_id=alpha.admission_id, route=admit_request("", "").route
            )
        ),
        "Record": lambda s: s.Record(
            api.RecordRequest(session_id=sid, admission_id=alpha.admission_id, assistant=assistant)
        ),
        "PlanCompaction": lambda s: s.PlanCompaction(
            api.PlanCompactionRequest(session_id=sid, retain_tokens=0)
        ),
        "Compact": lambda s: s.Compact(
            api.CompactRequest(session_id=sid, plan_token=alpha.plan_token, summary="s")
        ),
        "Inspect": lambda s: s.Inspect(api.InspectRequest(session_id=sid)),
        "ListEvents": lambda s: s.ListEvents(api.ListEventsRequest(session_id=sid)),
        "ListTrajectory": lambda s: s.ListTrajectory(api.ListTrajectoryRequest(session_id=sid)),
        # A streamed call's status comes with its first read.
        "StreamAdmit": lambda s: s.StreamAdmit(
            api.StreamAdmitRequest(
                request=admit_request(sid, "beta's prompt", "beta's user", turn=9)
            )
        ).read(),
        "StreamReconcile": lambda s: s.StreamReconcile(
            api.StreamReconcileRequest(
                request=api.ReconcileRequest(
                    session_id=sid,
                    admission_id=alpha.admission_id,
                    route=admit_request("", "").route,
                )
            )
        ).read(),
    }


RPCS = sorted(api.DESCRIPTOR.services_by_name["AdmissionService"].methods_by_name)


def test_the_tables_cover_every_rpc() -> None:
    assert sorted(calls(Alpha("s", "a", "p"))) == RPCS
    assert set(SESSION_RPCS) | {"CreateSession", "ListSessions"} == set(RPCS)


async def alpha_session(stub: Stub) -> Alpha:
    session_id = new_session_id()
    await stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
    admitted = await stub.Admit(admit_request(session_id, "alpha's prompt", "alpha's user"))
    await stub.Admit(admit_request(session_id, "alpha's prompt", "more", turn=1))
    plan = await stub.PlanCompaction(
        api.PlanCompactionRequest(session_id=session_id, retain_tokens=0)
    )
    return Alpha(session_id, admitted.admission_id, plan.plan_token)


@pytest.fixture(scope="module")
async def shared_alpha(tenants: Tenants) -> Alpha:
    """One session of alpha's for the tests whose calls all fail (each checks it is unchanged)."""
    return await alpha_session(tenants.of(ALPHA_TOKEN))


# ---- authentication -------------------------------------------------------------------------


def credentials() -> Iterator[Any]:
    yield pytest.param((), "MISSING_CREDENTIALS", id="none")
    yield pytest.param((("authorization", "Bearer wrong"),), "INVALID_TOKEN", id="wrong-token")
    yield pytest.param(
        (("authorization", f"Bearer {hash_token(ALPHA_TOKEN)}"),),
        "INVALID_TOKEN",
        id="the-hash-itself",
    )
    yield pytest.param((("authorization", f"Basic {ALPHA_TOKEN}"),), "INVALID_TOKEN", id="basic")
    yield pytest.param((("authorization", "Bearer "),), "INVALID_TOKEN", id="empty")
    yield pytest.param((("authorization", ALPHA_TOKEN),), "INVALID_TOKEN", id="no-scheme")
    yield pytest.param(
        (("authorization", f"Bearer {ALPHA_TOKEN}"), ("authorization", f"Bearer {BETA_TOKEN}")),
        "INVALID_TOKEN",
        id="two-tokens",
    )


@pytest.mark.parametrize(("metadata", "reason"), credentials())
@pytest.mark.parametrize("rpc", RPCS)
async def test_every_rpc_needs_a_valid_token(
    tenants: Tenants,
    shared_alpha: Alpha,
    rpc: str,
    metadata: tuple[tuple[str, str], ...],
    reason: str,
) -> None:
    alpha = shared_alpha
    before = await snapshot(tenants.of(ALPHA_TOKEN), alpha.session_id)

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await calls(alpha)[rpc](tenants.stub(*metadata))

    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.UNAUTHENTICATED
    assert error.reason == reason
    assert ALPHA_TOKEN not in error.message
    assert await snapshot(tenants.of(ALPHA_TOKEN), alpha.session_id) == before


async def test_the_scheme_is_case_insensitive(tenants: Tenants) -> None:
    stub = tenants.stub(("authorization", f"bearer {ALPHA_TOKEN}"))
    await stub.ListSessions(api.ListSessionsRequest())


async def test_health_needs_no_token(tenants: Tenants) -> None:
    health = health_pb2_grpc.HealthStub(tenants.server.channel)
    response = await health.Check(health_pb2.HealthCheckRequest())
    assert response.status == health_pb2.HealthCheckResponse.SERVING


# ---- tenancy --------------------------------------------------------------------------------

# The RPCs that name a session: beta gets NOT_FOUND for alpha's, as for a missing one.
SESSION_RPCS = [
    "GetSession",
    "DeleteSession",
    "Admit",
    "Reconcile",
    "Record",
    "PlanCompaction",
    "Compact",
    "Inspect",
    "ListEvents",
    "ListTrajectory",
    "StreamAdmit",
    "StreamReconcile",
]


@pytest.mark.parametrize("rpc", SESSION_RPCS)
async def test_another_tenants_session_is_not_found(tenants: Tenants, rpc: str) -> None:
    alpha_stub, beta = tenants.of(ALPHA_TOKEN), tenants.of(BETA_TOKEN)
    alpha = await alpha_session(alpha_stub)
    before = await snapshot(alpha_stub, alpha.session_id)
    if rpc == "Compact":
        # Alpha's plan token is bound to alpha (INVALID_ARGUMENT, whether or not the session
        # exists); beta's own plan for a session of the same id, deleted since, reaches the
        # session lookup.
        alpha.plan_token = await orphaned_plan_token(beta, alpha.session_id)

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await calls(alpha)[rpc](beta)

    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.NOT_FOUND, error
    assert error.reason == "SESSION_NOT_FOUND"
    # Exactly what beta gets for a session that exists nowhere.
    missing = Alpha(new_session_id(), alpha.admission_id, alpha.plan_token)
    if rpc == "Compact":
        missing.plan_token = await orphaned_plan_token(beta, missing.session_id)
    with pytest.raises(grpc.aio.AioRpcError) as nowhere:
        await calls(missing)[rpc](beta)
    other = rich_error(nowhere.value)
    assert (other.code, other.reason) == (error.code, error.reason)
    assert other.message.replace(missing.session_id, "ID") == error.message.replace(
        alpha.session_id, "ID"
    )
    assert await snapshot(alpha_stub, alpha.session_id) == before


async def orphaned_plan_token(stub: Stub, session_id: str) -> str:
    await stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
    await stub.Admit(admit_request(session_id, "beta's prompt", "beta's user"))
    await stub.Admit(admit_request(session_id, "beta's prompt", "more", turn=1))
    plan = await stub.PlanCompaction(
        api.PlanCompactionRequest(session_id=session_id, retain_tokens=0)
    )
    await stub.DeleteSession(api.DeleteSessionRequest(session_id=session_id))
    return plan.plan_token


async def test_a_stolen_plan_token_does_not_reveal_the_session(tenants: Tenants) -> None:
    alpha_stub, beta = tenants.of(ALPHA_TOKEN), tenants.of(BETA_TOKEN)
    alpha = await alpha_session(alpha_stub)
    before = await snapshot(alpha_stub, alpha.session_id)
    errors = []
    for session_id in (alpha.session_id, new_session_id()):
        request = api.CompactRequest(session_id=session_id, plan_token=alpha.plan_token)
        request.summary = "s"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await beta.Compact(request)
        errors.append(rich_error(caught.value))
    assert {(e.code, e.reason, tuple(e.violated_fields)) for e in errors} == {
        (grpc.StatusCode.INVALID_ARGUMENT, errors[0].reason, ("plan_token",))
    }
    assert await snapshot(alpha_stub, alpha.session_id) == before


async def session_ids(stub: Stub) -> set[str]:
    ids: set[str] = set()
    token = ""
    while True:
        page = await stub.ListSessions(api.ListSessionsRequest(page_size=100, page_token=token))
        ids |= {s.session_id for s in page.sessions}
        token = page.next_page_token
        if not token:
            return ids


async def test_tenants_list_only_their_own_sessions(tenants: Tenants) -> None:
    alpha_stub, beta = tenants.of(ALPHA_TOKEN), tenants.of(BETA_TOKEN)
    alpha = await alpha_session(alpha_stub)
    beta_session = new_session_id()
    await beta.CreateSession(api.CreateSessionRequest(session_id=beta_session))

    alpha_ids, beta_ids = await session_ids(alpha_stub), await session_ids(beta)
    assert alpha.session_id in alpha_ids and beta_session not in alpha_ids
    assert beta_session in beta_ids and alpha.session_id not in beta_ids

    # Alpha's page token does not page through alpha's sessions for beta.
    page = await alpha_stub.ListSessions(api.ListSessionsRequest(page_size=1))
    assert page.next_page_token
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await beta.ListSessions(api.ListSessionsRequest(page_token=page.next_page_token))
    assert rich_error(caught.value).code is grpc.StatusCode.INVALID_ARGUMENT


async def test_the_same_session_id_is_two_sessions_for_two_tenants(tenants: Tenants) -> None:
    alpha_stub, beta = tenants.of(ALPHA_TOKEN), tenants.of(BETA_TOKEN)
    alpha = await alpha_session(alpha_stub)
    before = await snapshot(alpha_stub, alpha.session_id)

    # No ALREADY_EXISTS (that would leak alpha's session): beta gets a session of its own.
    created = await beta.CreateSession(api.CreateSessionRequest(session_id=alpha.session_id))
    assert created.session.revision == 0 and created.session.event_count == 0
    admitted = await beta.Admit(admit_request(alpha.session_id, "beta's prompt", "beta's user"))
    assert [m.content[0].text.text for m in admitted.request.messages] == [
        "beta's prompt",
        "beta's user",
    ]
    await beta.DeleteSession(api.DeleteSessionRequest(session_id=alpha.session_id))
    assert await snapshot(alpha_stub, alpha.session_id) == before


async def test_request_ids_are_scoped_to_the_tenant(tenants: Tenants) -> None:
    alpha_stub, beta = tenants.of(ALPHA_TOKEN), tenants.of(BETA_TOKEN)
    request_id = str(uuid.uuid4())
    # Without a session id the id is derived from the request id: per tenant, so beta's retry
    # under the same request id neither replays nor collides with alpha's.
    first = await alpha_stub.CreateSession(api.CreateSessionRequest(request_id=request_id))
    second = await beta.CreateSession(api.CreateSessionRequest(request_id=request_id))
    assert first.session.session_id != second.session.session_id
    replayed = await alpha_stub.CreateSession(api.CreateSessionRequest(request_id=request_id))
    assert replayed == first

    admit = admit_request(first.session.session_id, "p", "u", request_id=str(uuid.uuid4()))
    await alpha_stub.Admit(admit)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await beta.Admit(admit)
    assert rich_error(caught.value).code is grpc.StatusCode.NOT_FOUND
