"""The reads' one shape: one session in one snapshot, no lock.

    async with snapshot(deps, tenant, session_id) as (sessions, session):
        ...  # every read sees the same committed state

and, for a page of one session's rows, its cursor (``PageCursor``: the position after which the
page starts, decoded from the caller's token, and the token of the next page).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

from admission_service.app import validation
from admission_service.app.commands import Page
from admission_service.app.deps import Deps
from admission_service.app.page_tokens import Shape
from admission_service.app.ports import SessionRepository
from admission_service.domain.errors import SessionNotFound
from admission_service.domain.session import Session

T = TypeVar("T")
_AFTER: Shape = {"after": int}  # the cursor of a session's pages: the position of the last item


@asynccontextmanager
async def snapshot(
    deps: Deps, tenant: str, session_id: str
) -> AsyncIterator[tuple[SessionRepository, Session]]:
    """The session's rows and the session, in one ``REPEATABLE READ`` snapshot (a place in the
    tenant's concurrent-calls quota held meanwhile)."""
    validation.check_session_id(session_id, deps.limits)
    async with (
        deps.quotas.call(tenant),
        deps.storage.unit(tenant, session_id, snapshot=True) as unit,
    ):
        session = await unit.store.read()
        if session is None:
            raise SessionNotFound(session_id)
        yield unit.store, session


@dataclass(frozen=True, slots=True)
class PageCursor:
    """A page of one session's ``kind`` of rows: at most ``limit`` items after the position
    ``after`` (-1 for the first page)."""

    scope: str
    limit: int
    after: int

    @classmethod
    def of(
        cls, deps: Deps, kind: str, tenant: str, session_id: str, page_size: int, token: str
    ) -> PageCursor:
        limit = validation.check_page_size(page_size, deps.limits)
        # Before the token is checked: its scope holds the session id (a 64 KiB one broke the
        # token's signature, INTERNAL; found by the fuzzer).
        validation.check_session_id(session_id, deps.limits)
        scope = f"{kind}/{tenant}/{session_id}"
        after = -1
        if token:
            after = deps.page_tokens.decode(scope, token, "page_token", _AFTER)["after"]
        return cls(scope, limit, after)

    def page(self, deps: Deps, items: tuple[T, ...], last: int | None) -> Page[T]:
        """The page of ``items``; ``last``: the position of its last item when more follow
        (the next page token's cursor)."""
        token = deps.page_tokens.encode(self.scope, {"after": last}) if last is not None else ""
        return Page(items, token)
