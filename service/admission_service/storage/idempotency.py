"""The SQL of the ``idempotency_keys`` table: the responses stored for idempotent calls
(read, stored, forgotten within a session's transaction) and their expiry (AIP-155), which the
sweeper (app/sweeper.py) runs."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import Delete, Float, delete, literal_column, select
from sqlalchemy.ext.asyncio import AsyncEngine

from admission_service.domain.stored import StoredResponse
from admission_service.storage.raw import RawStatement, execute_flight
from admission_service.storage.scope import NOT_READ, SessionScope
from admission_service.storage.tables import idempotency_keys

# A separate statement after the lock, not a join: it runs once the lock is held, with a
# snapshot of its own, so it sees the response of the call it waited for (READ COMMITTED).
_STORED_RESPONSE = (
    "SELECT method, request_digest, response, derived_request, "
    "extract(epoch FROM now() - create_time)::float8 FROM idempotency_keys"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s AND request_id = %(r)s"
)


def stored_response_statement(params: dict[str, str], request_id: str) -> RawStatement:
    """The read of the response stored for ``request_id`` (``params``: the session's key as
    ``t`` and ``s``), sent with the session row's lock (``session_rows.py``); its row, if any,
    is a ``StoredResponse``'s fields."""
    return RawStatement(_STORED_RESPONSE, {**params, "r": request_id}, binary=True)


def forget_responses(tenant: str, session_id: str) -> Delete:
    """The deletion of every response stored for the session: a created session's id is new
    again for request ids (issue 13, finding 6), a deleted one keeps none."""
    keys = idempotency_keys
    return delete(keys).where(keys.c.tenant_id == tenant, keys.c.session_id == session_id)


class StoredResponses(SessionScope):
    """The session's stored responses."""

    async def stored_response(self, request_id: str) -> StoredResponse | None:
        """The response stored for ``request_id``. On a cached session none is assumed: the
        commit's insert of the new one fails on the stored one's key, and the call runs again
        on a fresh read, which finds it."""
        if self.warm:
            self.response_assumed_absent = True
            return None
        if (kept := self._kept("response", request_id)) is not NOT_READ:
            return kept  # type: ignore[no-any-return]
        await self.flush()
        keys = idempotency_keys
        age = literal_column("extract(epoch FROM now() - idempotency_keys.create_time)", Float)
        statement = select(
            keys.c.method, keys.c.request_digest, keys.c.response, keys.c.derived_request, age
        ).where(self._mine(keys), keys.c.request_id == request_id)
        row = (await self._execute(statement)).first()
        return StoredResponse(*row) if row is not None else None

    async def forget_response(self, request_id: str) -> None:
        """Delete the (expired) response stored for ``request_id``: the id is new again."""
        keys = idempotency_keys
        await self._execute(delete(keys).where(self._mine(keys), keys.c.request_id == request_id))

    async def store_response(
        self,
        request_id: str,
        method: str,
        request_digest: bytes,
        response: bytes,
        derived_request: bytes | None = None,
    ) -> None:
        self.batch.insert(
            "idempotency_keys",
            [
                {
                    **self._keys(),
                    "request_id": request_id,
                    "method": method,
                    "request_digest": request_digest,
                    "response": response,
                    "derived_request": derived_request,
                }
            ],
        )


# The oldest expired keys, by the create_time index.
_EXPIRED = (
    "SELECT tenant_id, session_id, request_id FROM idempotency_keys"
    " WHERE create_time < now() - make_interval(secs => %(retention)s)"
    " ORDER BY create_time LIMIT %(batch)s"
)
# Deleted session by session: each statement stays inside one session's rows, as every other
# statement does (a distributed deployment routes it to one shard; docs/SCALING.md), and they
# go in one round trip (a flight). Keys are never updated, so no call holds a lock on an
# expired one: the sweep never waits on a call.
_DELETE = (
    "DELETE FROM idempotency_keys WHERE tenant_id = %(t)s AND session_id = %(s)s"
    " AND request_id = ANY(%(ids)s)"
    " AND create_time < now() - make_interval(secs => %(retention)s)"
)


async def sweep_expired_keys(engine: AsyncEngine, retention_seconds: float, batch: int) -> int:
    """Delete up to ``batch`` keys older than the retention window, in one short transaction;
    how many were found expired."""
    async with engine.begin() as connection:
        expired = RawStatement(
            _EXPIRED, {"retention": retention_seconds, "batch": batch}, all_rows=True
        )
        (rows,) = await execute_flight(connection, (expired,))
        by_session: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
        for tenant, session_id, request_id in rows:
            by_session[tenant, session_id].append(request_id)
        if by_session:
            await execute_flight(
                connection,
                [
                    RawStatement(
                        _DELETE,
                        {"t": tenant, "s": session_id, "ids": ids, "retention": retention_seconds},
                    )
                    for (tenant, session_id), ids in by_session.items()
                ],
            )
    return len(rows)
