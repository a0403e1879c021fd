"""The session lifecycle's handlers on the in-memory storage (``use_cases/sessions.py``):
CreateSession, GetSession, ListSessions, DeleteSession. Every refusal names its reason (and its
field) and leaves the storage as it was; a repeated request_id replays the first response's
bytes, within one lifetime of a session."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import pytest
from admission_service.app import handlers
from admission_service.app.hooks import Phase
from admission_service.app.limits import Limits, Quotas
from admission_service.domain.errors import (
    ConcurrentCallsQuotaExceeded,
    InvalidArgument,
    RequestIdReused,
    RevisionMismatch,
    SessionAlreadyExists,
    SessionNotFound,
    SessionsQuotaExceeded,
)

from tests.unit.app.steps import TENANT, App, key


@pytest.fixture
def app() -> App:
    return App.build()


async def listed(app: App, tenant: str = TENANT, **kwargs: object) -> list[str]:
    page = await handlers.list_sessions(app.deps, tenant, 100, "", **kwargs)  # type: ignore[arg-type]
    return [info.session_id for info in page.items]


# ---- CreateSession ------------------------------------------------------------------------


async def test_a_new_session_is_empty_at_revision_zero(app: App) -> None:
    reply = await handlers.create_session(app.deps, TENANT, "s", None)
    assert reply.result is not None and reply.encoded is None  # no key: the edge encodes it
    info = reply.result
    assert (info.session_id, info.revision, info.event_count, info.replace_generation) == (
        "s",
        0,
        0,
        0,
    )
    assert await app.info("s") == info


async def test_without_an_id_or_a_request_id_each_create_is_a_new_random_session(
    app: App,
) -> None:
    first, second = await app.create(""), await app.create("")
    assert first != second
    assert uuid.UUID(first).version == uuid.UUID(second).version == 4
    assert sorted(await listed(app)) == sorted([first, second])


async def test_a_retried_create_replays_its_bytes_and_creates_nothing_more(app: App) -> None:
    first = await handlers.create_session(app.deps, TENANT, "", key("c1"))
    commits = app.storage.commits
    again = await handlers.create_session(app.deps, TENANT, "", key("c1"))
    assert again.result is None and again.encoded == first.encoded
    assert app.storage.commits == commits
    assert len(await listed(app)) == 1


async def test_a_request_id_reused_for_another_create_is_refused(app: App) -> None:
    sid = await app.create("", key("c1"))
    error = await app.refused(
        sid,
        RequestIdReused,
        handlers.create_session(app.deps, TENANT, sid, key("c1", b"another body")),
    )
    assert error.metadata["request_id"] == "c1"


async def test_an_existing_session_is_not_created_again(app: App) -> None:
    await app.create("s")
    error = await app.refused(
        "s", SessionAlreadyExists, handlers.create_session(app.deps, TENANT, "s", key("c2"))
    )
    assert error.reason == "SESSION_ALREADY_EXISTS"


@pytest.mark.parametrize(
    ("session_id", "request_id", "field"),
    [
        ("x" * 129, None, "session_id"),
        ("a b", None, "session_id"),
        ("-leading", None, "session_id"),
        ("a\x00b", None, "session_id"),
        ("s", "r" * 129, "request_id"),
        ("s", "r\x00", "request_id"),
        ("", "r" * 129, "request_id"),  # checked before an id is derived from it
    ],
)
async def test_a_bad_identifier_is_refused_by_name_and_creates_nothing(
    app: App, session_id: str, request_id: str | None, field: str
) -> None:
    idempotency = key(request_id) if request_id is not None else None
    error = await app.refused(  # every row is compared: nothing was created under any id
        "s",
        InvalidArgument,
        handlers.create_session(app.deps, TENANT, session_id, idempotency),
    )
    assert (error.reason, error.field) == ("INVALID_FIELD", field)
    assert await listed(app) == []


async def test_the_sessions_quota_refuses_one_more_until_one_is_deleted() -> None:
    app = App.build(quotas=Quotas(sessions=2))
    await app.create("a")
    await app.create("b")
    error = await app.refused("c", SessionsQuotaExceeded, app.create("c"))
    assert error.metadata["quota"] == "sessions" and error.metadata["limit"] == "2"
    assert await listed(app) == ["a", "b"]
    other_tenant = await handlers.create_session(app.deps, "u", "c", None)  # its own quota
    assert other_tenant.result is not None
    await handlers.delete_session(app.deps, TENANT, "a", None, None)
    assert await app.create("c") == "c"


class HoldAt:
    """Holds the first ``method`` call reaching ``phase`` until released."""

    def __init__(self, method: str, phase: Phase) -> None:
        self.target = (method, phase)
        self.arrived, self.release = asyncio.Event(), asyncio.Event()

    async def reached(self, method: str, phase: Phase) -> None:
        if (method, phase) == self.target and not self.arrived.is_set():
            self.arrived.set()
            await self.release.wait()


async def test_the_concurrent_calls_quota_refuses_a_call_while_one_is_in_progress() -> None:
    hooks = HoldAt("Admit", Phase.LOAD)
    app = App.build(quotas=Quotas(concurrent_calls=1), hooks=hooks)
    await app.create("s")
    held = asyncio.ensure_future(app.admit("s", "P", "u"))
    await asyncio.wait_for(hooks.arrived.wait(), 10)
    with pytest.raises(ConcurrentCallsQuotaExceeded) as refused:
        await app.info("s")
    assert refused.value.metadata["quota"] == "concurrent_calls"
    with pytest.raises(ConcurrentCallsQuotaExceeded):
        await app.create("other")
    assert await handlers.list_sessions(app.deps, "u", 10, "")  # another tenant is served
    hooks.release.set()
    assert (await held).revision == 1
    assert (await app.info("s")).revision == 1  # the place is free again


# ---- GetSession ---------------------------------------------------------------------------


async def test_get_finds_only_the_tenants_own_session(app: App) -> None:
    await app.create("s")
    with pytest.raises(SessionNotFound):
        await handlers.get_session(app.deps, "other-tenant", "s")
    with pytest.raises(SessionNotFound) as missing:
        await app.info("nope")
    assert missing.value.metadata["session_id"] == "nope"
    with pytest.raises(InvalidArgument) as bad:
        await app.info("")
    assert bad.value.field == "session_id"


async def test_the_same_id_is_two_sessions_for_two_tenants(app: App) -> None:
    await app.create("s")
    await handlers.create_session(app.deps, "u", "s", None)
    await app.admit("s", "P", "u")
    assert (await app.info("s")).revision == 1
    assert (await handlers.get_session(app.deps, "u", "s")).revision == 0


# ---- ListSessions -------------------------------------------------------------------------


async def test_list_shows_only_the_tenants_sessions(app: App) -> None:
    await app.create("mine")
    await handlers.create_session(app.deps, "u", "theirs", None)
    assert await listed(app) == ["mine"]
    assert await listed(app, "u") == ["theirs"]


async def test_list_pages_oldest_or_newest_first_and_by_the_start_of_the_id(app: App) -> None:
    for sid in ("a1", "b1", "a2", "a3"):
        await app.create(sid)
    assert await listed(app) == ["a1", "b1", "a2", "a3"]
    assert await listed(app, newest_first=True) == ["a3", "a2", "b1", "a1"]
    assert await listed(app, id_prefix="a") == ["a1", "a2", "a3"]

    seen, token = [], ""
    while True:
        page = await handlers.list_sessions(
            app.deps, TENANT, 2, token, newest_first=True, id_prefix="a"
        )
        assert len(page.items) <= 2
        seen += [info.session_id for info in page.items]
        if not (token := page.next_page_token):
            break
    assert seen == ["a3", "a2", "a1"]


async def test_a_page_token_holds_only_for_the_order_and_prefix_it_was_issued_for(
    app: App,
) -> None:
    for sid in ("a1", "a2", "a3"):
        await app.create(sid)
    oldest = (await handlers.list_sessions(app.deps, TENANT, 1, "")).next_page_token
    assert oldest
    for kwargs in ({"newest_first": True}, {"id_prefix": "a"}):
        with pytest.raises(InvalidArgument) as refused:
            await handlers.list_sessions(app.deps, TENANT, 1, oldest, **kwargs)
        assert refused.value.field == "page_token"
    with pytest.raises(InvalidArgument):  # another tenant's listing
        await handlers.list_sessions(app.deps, "u", 1, oldest)
    with pytest.raises(InvalidArgument) as forged:
        await handlers.list_sessions(app.deps, TENANT, 1, "forged")
    assert forged.value.field == "page_token"


async def test_the_page_size_defaults_is_capped_and_must_not_be_negative() -> None:
    app = App.build(limits=replace(Limits(), default_page_size=2, max_page_size=3))
    for n in range(5):
        await app.create(f"s{n}")
    assert len((await handlers.list_sessions(app.deps, TENANT, 0, "")).items) == 2
    assert len((await handlers.list_sessions(app.deps, TENANT, 1000, "")).items) == 3
    with pytest.raises(InvalidArgument) as negative:
        await handlers.list_sessions(app.deps, TENANT, -1, "")
    assert negative.value.field == "page_size"
    with pytest.raises(InvalidArgument) as prefix:
        await handlers.list_sessions(app.deps, TENANT, 1, "", id_prefix="a b")
    assert prefix.value.field == "id_prefix"


# ---- DeleteSession ------------------------------------------------------------------------


async def test_a_deleted_session_is_gone_with_its_rows(app: App) -> None:
    sid, _ = await app.busy()
    await app.create("other")
    reply = await handlers.delete_session(app.deps, TENANT, sid, 3, None)
    assert reply.result is None and reply.encoded is None
    with pytest.raises(SessionNotFound):
        await app.info(sid)
    assert (TENANT, sid) not in app.storage.state.sessions
    assert await listed(app) == ["other"]
    await app.refused(
        sid, SessionNotFound, handlers.delete_session(app.deps, TENANT, sid, None, None)
    )


async def test_a_delete_at_another_revision_is_refused(app: App) -> None:
    sid, _ = await app.busy()
    error = await app.refused(
        sid, RevisionMismatch, handlers.delete_session(app.deps, TENANT, sid, 1, None)
    )
    assert error.metadata == {"expected_revision": "1", "actual_revision": "3"}


@pytest.mark.parametrize(
    ("session_id", "expected_revision", "field"),
    [("", None, "session_id"), ("s", -1, "expected_revision"), ("a\x00", None, "session_id")],
)
async def test_a_bad_delete_is_refused_by_name(
    app: App, session_id: str, expected_revision: int | None, field: str
) -> None:
    await app.create("s")
    error = await app.refused(
        "s",
        InvalidArgument,
        handlers.delete_session(app.deps, TENANT, session_id, expected_revision, None),
    )
    assert error.field == field


async def test_a_retried_delete_replays_and_keeps_only_its_own_key(app: App) -> None:
    sid = await app.create("s", key("c1"))
    await app.admit(sid, "P", "u", idempotency=key("a1"))
    assert set(app.storage.state.responses[(TENANT, sid)]) == {"c1", "a1"}
    deleted = await handlers.delete_session(app.deps, TENANT, sid, None, key("d1"))
    assert set(app.storage.state.responses[(TENANT, sid)]) == {"d1"}
    again = await handlers.delete_session(app.deps, TENANT, sid, None, key("d1"))
    assert again.result is None and again.encoded == deleted.encoded
    await app.refused(
        sid,
        RequestIdReused,
        handlers.delete_session(app.deps, TENANT, sid, None, key("d1", b"other")),
    )


async def test_a_request_id_of_a_deleted_session_is_new_in_its_next_lifetime(app: App) -> None:
    await app.create("s", key("r1"))
    await handlers.delete_session(app.deps, TENANT, "s", None, key("r2"))
    # The Delete's key names nothing in the new lifetime: the create runs (not a reuse).
    assert await app.create("s", key("r2")) == "s"
    # r2 now names this lifetime's CreateSession: a Delete with it is refused, not replayed.
    await app.refused(
        "s", RequestIdReused, handlers.delete_session(app.deps, TENANT, "s", None, key("r2"))
    )


async def test_an_old_delete_is_not_replayed_on_the_session_created_again(app: App) -> None:
    await app.create("s", key("r1"))
    await handlers.delete_session(app.deps, TENANT, "s", None, key("r2"))
    await app.create("s", key("r3"))
    await handlers.delete_session(app.deps, TENANT, "s", None, key("r2"))  # runs: deletes
    with pytest.raises(SessionNotFound):
        await app.info("s")


async def test_request_ids_are_scoped_to_the_tenant(app: App) -> None:
    """The same request_id from two tenants names two calls: neither replays the other's."""
    mine = await handlers.create_session(app.deps, TENANT, "", key("c1"))
    theirs = await handlers.create_session(app.deps, "u", "", key("c1"))
    assert mine.result is not None and theirs.result is not None
    assert mine.result.session_id != theirs.result.session_id  # derived with the tenant
    await handlers.create_session(app.deps, "u", "s", None)
    await app.create("s")
    admitted = await handlers.admit(app.deps, TENANT, app.admit_command("s", "P", "u"), key("a1"))
    other = await handlers.admit(app.deps, "u", app.admit_command("s", "Q", "v"), key("a1"))
    assert admitted.result is not None and other.result is not None  # both ran
    assert (await handlers.get_session(app.deps, "u", "s")).revision == 1


async def test_a_retried_create_is_never_refused_by_the_sessions_quota() -> None:
    app = App.build(quotas=Quotas(sessions=1))
    first = await handlers.create_session(app.deps, TENANT, "", key("c1"))
    again = await handlers.create_session(app.deps, TENANT, "", key("c1"))
    assert again.result is None and again.encoded == first.encoded


async def test_a_create_key_past_its_retention_is_new_and_the_session_exists() -> None:
    app = App.build(idempotency_retention_seconds=0.0)
    await app.create("s", key("c1"))
    await app.refused("s", SessionAlreadyExists, app.create("s", key("c1")))
