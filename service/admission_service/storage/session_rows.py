"""The SQL of the ``sessions`` table: the session row (counters, series state, the previous
request's prefix, running sizes), the tenant's session list, and what a tenant holds for its
quotas (app/quotas.py: read only when a quota is configured). Its stored responses are
``idempotency.py``'s."""

from __future__ import annotations

import secrets
from collections import namedtuple
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, literal, select, tuple_
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from admission_service.domain.accounting import PreviousRequest, RequestKey
from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.series import SeriesState
from admission_service.domain.session import RequestPrefix, Session, Shadowed
from admission_service.domain.stored import StoredResponse
from admission_service.storage import codec
from admission_service.storage.admissions import admission_statement, stored_admission
from admission_service.storage.batch import param
from admission_service.storage.idempotency import forget_responses, stored_response_statement
from admission_service.storage.log_and_surface import (
    known_calls_statement,
    system_and_open,
    system_and_open_statement,
)
from admission_service.storage.raw import RawStatement, execute_raw
from admission_service.storage.scope import SessionScope, where_session
from admission_service.storage.tables import sessions

_RUNNING_SIZES = ("surface_bytes", "surface_nodes", "log_bytes")
# Bits of a new lifetime's first ``row_version``: far below the column's 63, so a lifetime can
# count up for ever, and random, so no two lifetimes of one session id share a version a
# worker may hold cached (``first_row_version``).
_ROW_VERSION_START_BITS = 62

# The session row under its lock, as the first statement of a mutation's first round trip
# (``lock``); the row comes back as a ``_SessionRow``.
_SessionRow = namedtuple("_SessionRow", [column.name for column in sessions.c])  # type: ignore[misc]
_LOCK = (
    f"SELECT {', '.join(_SessionRow._fields)} FROM sessions"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s FOR UPDATE"
)
# Serialises a tenant's session creations (transaction-scoped), so a session quota is exact
# across replicas. Only taken when that quota is configured.
_LOCK_TENANT = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))"
_ROW_VERSION = "SELECT row_version FROM sessions WHERE tenant_id = %(t)s AND session_id = %(s)s"


def previous_request_to_json(value: PreviousRequest, prefix: RequestPrefix) -> dict[str, Any]:
    key = value.key
    return {
        "provider": key.provider,
        "model": key.model,
        "tools_digest": key.tools_digest,
        "tools_tokens": key.tools_tokens,
        "message_count": value.message_count,
        "message_tokens": prefix.tokens,
        "size": prefix.size,
        "digest": prefix.digest.hex(),
        "end_position": prefix.end_position,
        **(
            {"body_end": codec.messages_end_to_json(prefix.body_end)}
            if prefix.body_end is not None
            else {}
        ),
    }


def previous_request_from_json(
    data: dict[str, Any],
) -> tuple[PreviousRequest, RequestPrefix] | None:
    """None for a request stored before prefixes were kept (migration 0002): the next forecast
    then treats it as the first, the cautious side."""
    if "digest" not in data:
        return None
    key = RequestKey(data["provider"], data["model"], data["tools_digest"], data["tools_tokens"])
    prefix = RequestPrefix(
        data["message_count"],
        data["message_tokens"],
        data["size"],
        bytes.fromhex(data["digest"]),
        data["end_position"],
        codec.messages_end_from_json(data["body_end"]) if "body_end" in data else None,
    )
    return PreviousRequest(key, data["message_count"]), prefix


def _record(row: Any) -> Session:
    """A session row (SQLAlchemy's, or a ``_SessionRow``) as a ``Session``."""
    series = SeriesState(
        replace_generation=row.replace_generation,
        last_request_generation=row.last_request_generation,
        last_header=codec.header_from_json(codec.loads(row.last_header))
        if row.last_header is not None
        else None,
        last_context=codec.context_from_json(codec.loads(row.last_context))
        if row.last_context is not None
        else None,
    )
    previous = (
        previous_request_from_json(codec.loads(row.last_request))
        if row.last_request is not None
        else None
    )
    return Session(
        session_id=row.session_id,
        revision=row.revision,
        next_seq=row.next_seq,
        next_position=row.next_position,
        series=series,
        last_request=previous[0] if previous else None,
        prefix=previous[1] if previous else None,
        shadowed=Shadowed(row.shadowed_position, row.shadowed_system)
        if row.shadowed_position is not None
        else None,
        request_count=row.request_count,
        surface_tokens=row.surface_tokens,
        create_time=row.create_time,
        update_time=row.update_time,
        surface_bytes=row.surface_bytes,
        surface_nodes=row.surface_nodes,
        log_bytes=row.log_bytes,
    )


def first_row_version() -> int:
    """Where a new lifetime of a session id starts counting its row's versions.

    A worker may still cache a deleted session (another replica deleted it): the commit's
    version check is all that stands between that copy and the new session under the same id.
    Counting every lifetime from 0 would let the new one reach the cached version after as
    many writes and pass the check with another session's seqs, positions and prompt. A random
    start makes that a chance of writes / 2**62."""
    return secrets.randbits(_ROW_VERSION_START_BITS)


class SessionRows(SessionScope):
    """The session row."""

    async def create(self) -> SessionAggregate | None:
        """Insert the session; None when it already exists (the caller decides what that means)."""
        statement = (
            pg_insert(sessions)
            .values(**self._keys(), row_version=first_row_version())
            .on_conflict_do_nothing()
            .returning(*sessions.c)
        )
        row = (await self._execute(statement)).first()
        if row is None:
            return None
        # A new lifetime of this session id: request ids of an earlier one (the DeleteSession
        # key that outlived it) are new again for this one (issue 13, finding 6).
        await self._execute(forget_responses(self.tenant, self.session_id))
        self.read_version = row.row_version
        self.created = SessionAggregate.read(_record(row), (), (), None)
        self.found = self.created.session
        return self.created

    async def read(self) -> Session | None:
        """The session row, not locked."""
        row = (await self._execute(select(sessions).where(self._mine(sessions)))).first()
        return _record(row) if row is not None else None

    async def lock(
        self,
        *,
        request_id: str | None = None,
        admission_id: str | None = None,
        tool_call_ids: Sequence[str] = (),
    ) -> SessionAggregate | None:
        """The session under the row lock that serialises writers of one session.

        A session this worker cached (``session_cache.py``) is not read at all when the cache
        answers what the call reads (the admission ``admission_id``): the commit checks the
        row instead. Otherwise the row is read under its lock with, in the same round trip,
        the system nodes and open calls, the response stored for ``request_id``, the admission
        ``admission_id`` and which of ``tool_call_ids`` the session already made, kept for
        ``stored_response``, ``admission`` and ``known_tool_calls`` to answer without
        another."""
        # The cache answers only for a transaction that has sent and deferred nothing yet.
        fresh = not self.batch and bool(self._prelude)
        key = (self.tenant, self.session_id)
        entry = self.cache.take(key) if self.cache is not None and fresh else None
        if entry is not None and (
            admission_id is None or entry.aggregate.admission_named(admission_id) is not None
        ):
            self.entry, self.warm = entry, True
            self.read_version = entry.row_version
            self.known_inputs = entry.inputs
            self.found = entry.aggregate.session
            return entry.aggregate
        params = {"t": self.tenant, "s": self.session_id}
        statements = [RawStatement(_LOCK, params, binary=True), system_and_open_statement(params)]
        if request_id is not None:
            statements.append(stored_response_statement(params, request_id))
        if admission_id is not None:
            statements.append(admission_statement(self.tenant, self.session_id, admission_id))
        if tool_call_ids:
            statements.append(known_calls_statement(self.tenant, self.session_id, tool_call_ids))
        locked, indexed, *prefetched = await self._flight(*statements)
        if request_id is not None:
            stored = prefetched.pop(0)
            self._keep("response", request_id, StoredResponse(*stored) if stored else None)
        admission = None
        if admission_id is not None:
            self.known_inputs = stored_admission(prefetched.pop(0))
            admission = self.known_inputs.admission if self.known_inputs is not None else None
            self._keep("admission", admission_id, admission)
        if tool_call_ids:
            known = {call_id for (call_id,) in prefetched.pop(0)}
            self._keep("known_calls", tuple(tool_call_ids), known)
        if locked is None:
            return None
        locked_row: Any = _SessionRow(*locked)
        session = _record(locked_row)
        system_nodes, open_calls = system_and_open(indexed)
        self.read_version = locked_row.row_version
        self.found = session
        return SessionAggregate.read(session, system_nodes, open_calls, admission)

    async def row_version(self) -> int | None:
        """The stored row's version (None: no row), after the deferred writes."""
        row = await self._execute_raw(_ROW_VERSION, {"t": self.tenant, "s": self.session_id})
        return row[0] if row is not None else None

    async def save(self, aggregate: SessionAggregate) -> None:
        """Write the new counters, series state and revision, as the domain's transitions left
        them (``aggregate.session``); the running sizes move by what this transaction's writes
        moved (``growth``). The row's UPDATE goes last, with the ``COMMIT``, and fails unless
        the row is at the version this transaction read or cached (``flush_and_commit``).
        Committed, ``aggregate`` is what the worker keeps for the session's next step."""
        row_version = self.read_version
        assert row_version is not None, "a session is saved after it was read under its lock"
        self.saved, session = aggregate, aggregate.session
        series, shadowed = session.series, session.shadowed
        last_request = (
            (session.last_request, session.prefix)
            if session.last_request is not None and session.prefix is not None
            else None
        )
        values: dict[str, Any] = {
            "revision": session.revision,
            "next_seq": session.next_seq,
            "next_position": session.next_position,
            "replace_generation": series.replace_generation,
            "last_request_generation": series.last_request_generation,
            "last_request": codec.dumps(previous_request_to_json(*last_request))
            if last_request
            else None,
            "shadowed_position": shadowed.position if shadowed else None,
            "shadowed_system": shadowed.system if shadowed else False,
            "request_count": session.request_count,
            "surface_tokens": session.surface_tokens,
        }
        # The last header carries the whole tool set (a harness's can be megabytes) and rarely
        # changes: the row keeps it unless it did, as the last context.
        found = self.found.series if self.found is not None else None
        if found is None or series.last_header != found.last_header:
            values["last_header"] = (
                codec.dumps(codec.header_to_json(series.last_header))
                if series.last_header
                else None
            )
        if found is None or series.last_context != found.last_context:
            values["last_context"] = (
                codec.dumps(codec.context_to_json(series.last_context))
                if series.last_context
                else None
            )
        growth, key = self.growth, self.key

        def build(params: list[Any]) -> str:
            assignments = ", ".join(f"{name} = {param(params, v)}" for name, v in values.items())
            assignments += "".join(
                f", {name} = {name} + {param(params, getattr(growth, name))}"
                for name in _RUNNING_SIZES
            )
            # The check: at another version, 0 / 0 fails the statement (SQLSTATE 22012) and so
            # the whole transaction; a deleted row fails the other writes' foreign keys.
            version = param(params, row_version)
            return (
                f"UPDATE sessions SET {assignments},"
                f" row_version = row_version + 1 + 0 / (row_version = {version})::int,"
                f" update_time = now() WHERE {where_session(params, key)}"
            )

        self._saved_row = build

    async def delete(self) -> None:
        """Delete the session; its events, surface, admissions and ledger cascade."""
        self.saved = self.created = None  # nothing to keep
        if self.cache is not None:
            self.cache.evict(self.key)
        if self.held_frames is not None:
            self.held_frames.evict(self.key)
        await self._execute(delete(sessions).where(self._mine(sessions)))
        await self._execute(forget_responses(self.tenant, self.session_id))


async def list_sessions(
    connection: AsyncConnection,
    tenant: str,
    after: tuple[datetime, str] | None,
    limit: int,
    *,
    newest_first: bool = False,
    id_prefix: str = "",
) -> list[Session]:
    """A tenant's sessions in creation order (``newest_first``: the reverse), keyset-paginated
    after ``after``; only those whose id starts with ``id_prefix``."""
    statement = select(sessions).where(sessions.c.tenant_id == tenant)
    if id_prefix:
        statement = statement.where(sessions.c.session_id.startswith(id_prefix, autoescape=True))
    key = tuple_(sessions.c.create_time, sessions.c.session_id)
    if after is not None:
        cursor = tuple_(literal(after[0]), literal(after[1]))
        statement = statement.where(key < cursor if newest_first else key > cursor)
    order = (
        (sessions.c.create_time.desc(), sessions.c.session_id.desc())
        if newest_first
        else (sessions.c.create_time, sessions.c.session_id)
    )
    statement = statement.order_by(*order).limit(limit)
    return [_record(row) for row in await connection.execute(statement)]


async def lock_tenant_sessions(connection: AsyncConnection, tenant: str) -> None:
    await execute_raw(connection, _LOCK_TENANT, {"key": f"sessions/{tenant}"})


async def count_sessions(connection: AsyncConnection, tenant: str) -> int:
    """The tenant's sessions (an index-only scan of its part of the listing index)."""
    statement = select(func.count()).select_from(sessions).where(sessions.c.tenant_id == tenant)
    return int((await connection.execute(statement)).scalar_one())


async def stored_bytes(connection: AsyncConnection, tenant: str) -> int:
    """The summed event-log bytes of the tenant's sessions (their running ``log_bytes``)."""
    statement = select(func.coalesce(func.sum(sessions.c.log_bytes), 0)).where(
        sessions.c.tenant_id == tenant
    )
    return int((await connection.execute(statement)).scalar_one())
