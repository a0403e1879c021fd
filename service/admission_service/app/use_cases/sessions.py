"""The session lifecycle: create, get, list, delete."""

from __future__ import annotations

import uuid
from datetime import datetime

from admission_service.app import validation
from admission_service.app.commands import Idempotency, Page, SessionInfo, session_info
from admission_service.app.deps import Deps
from admission_service.app.page_tokens import Shape, not_issued
from admission_service.app.snapshot import snapshot
from admission_service.app.unit_of_work import Call, Reply, UnitOfWork, runs_again_if_moved

_SESSION_NAMESPACE = uuid.UUID("6f1d8a52-3c1e-4c55-9a7e-8e0f1f3b7a10")

# The last session of a page: its create_time (ISO 8601) and id.
_SESSIONS_CURSOR: Shape = {"t": str, "i": str}


def _create_time(text: str) -> datetime:
    """A cursor's create_time; only a well-signed token of another version could fail here."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise not_issued("page_token") from None


async def create_session(
    deps: Deps, tenant: str, session_id: str, idempotency: Idempotency | None
) -> Reply[SessionInfo]:
    if idempotency is not None:
        validation.check_request_id(idempotency.request_id, deps.limits)
    if not session_id:
        # A retried create without an id must land on the same session: derive the id from
        # the request id when there is one.
        session_id = (
            str(uuid.uuid5(_SESSION_NAMESPACE, f"{tenant}\x00{idempotency.request_id}"))
            if idempotency is not None
            else str(uuid.uuid4())
        )
    validation.check_session_id(session_id, deps.limits)
    call = Call("CreateSession", tenant, session_id, idempotency, create=True)
    async with UnitOfWork(deps, call) as uow:
        if (replayed := await uow.replayed()) is not None:
            return replayed
        created = uow.load()
        await uow.check_new_session()
        return await uow.commit(session_info(created.session))


async def get_session(deps: Deps, tenant: str, session_id: str) -> SessionInfo:
    async with snapshot(deps, tenant, session_id) as (_, session):
        return session_info(session)


async def list_sessions(
    deps: Deps,
    tenant: str,
    page_size: int,
    page_token: str,
    *,
    newest_first: bool = False,
    id_prefix: str = "",
) -> Page[SessionInfo]:
    """The tenant's sessions, oldest first (ListSessions) or ``newest_first`` (the inspector),
    only those whose id starts with ``id_prefix``; a token holds for the order and prefix it was
    issued for."""
    limit = validation.check_page_size(page_size, deps.limits)
    if id_prefix:
        validation.check_session_id(id_prefix, deps.limits, "id_prefix")
    scope = f"sessions/{tenant}"
    if newest_first or id_prefix:
        scope += f"/{'newest' if newest_first else 'oldest'}/{id_prefix}"
    after = None
    await deps.page_tokens.ready()
    if page_token:
        cursor = deps.page_tokens.decode(scope, page_token, "page_token", _SESSIONS_CURSOR)
        after = (_create_time(cursor["t"]), cursor["i"])
    async with deps.quotas.call(tenant), deps.storage.unit(tenant, snapshot=True) as unit:
        sessions = await unit.list_sessions(
            after, limit + 1, newest_first=newest_first, id_prefix=id_prefix
        )
    items = tuple(session_info(s) for s in sessions[:limit])
    token = ""
    if len(sessions) > limit:
        last = sessions[limit - 1]
        cursor = {"t": last.create_time.isoformat(), "i": last.session_id}
        token = deps.page_tokens.encode(scope, cursor)
    return Page(items, token)


@runs_again_if_moved
async def delete_session(
    deps: Deps,
    tenant: str,
    session_id: str,
    expected_revision: int | None,
    idempotency: Idempotency | None,
) -> Reply[None]:
    validation.check_session_id(session_id, deps.limits)
    validation.check_expected_revision(expected_revision)
    async with UnitOfWork(deps, Call("DeleteSession", tenant, session_id, idempotency)) as uow:
        if (replayed := await uow.replayed()) is not None:
            return replayed
        uow.load(expected_revision)
        await uow.sessions.delete()
        return await uow.commit(None)
