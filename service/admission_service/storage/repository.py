"""SQL for one session inside one transaction. It reads and writes, never commits.

Everything the projection rule needs is indexed so an admission does not read or rewrite the
whole surface: the session row (counters, series state, the previous request's prefix and the
surface's running price), the surviving system nodes (partial index), and the surface nodes by
position. A derived request is the stored protobuf frames concatenated by the database
(``frames``); a DELTA request reads only the nodes appended since the previous request.

Writes nothing later reads in the same transaction are deferred and sent at the end as one
statement (``flush``: data-modifying CTEs ahead of the last write), so a mutation costs about as
many round trips as the irreducible lock, read, write and commit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

import psycopg
from sqlalchemy import (
    Table,
    and_,
    case,
    delete,
    func,
    literal,
    or_,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from admission_service.domain import codec, protowire
from admission_service.domain.accounting import (
    HEURISTIC_COUNTER,
    PreviousRequest,
    RequestKey,
    TokenCounter,
    message_tokens,
)
from admission_service.domain.events import Append, Event, Replace
from admission_service.domain.messages import Tool
from admission_service.domain.projection import SystemNode
from admission_service.domain.series import SeriesState
from admission_service.storage.raw_errors import raw_statement_error
from admission_service.storage.tables import (
    AdmissionRow,
    EventRow,
    IdempotencyKeyRow,
    RequestRow,
    SessionRow,
    SurfaceNodeRow,
    ToolCallRow,
)

sessions = cast(Table, SessionRow.__table__)
events = cast(Table, EventRow.__table__)
nodes = cast(Table, SurfaceNodeRow.__table__)
admissions = cast(Table, AdmissionRow.__table__)
requests = cast(Table, RequestRow.__table__)
idempotency = cast(Table, IdempotencyKeyRow.__table__)
tool_calls = cast(Table, ToolCallRow.__table__)

# Record answers every tool call of a step at once. With the same call answered twice in one
# request, the row is updated once, by the first answer in request order (DISTINCT ON).
_ANSWER = text(
    "UPDATE tool_calls AS c SET result_seq = a.result_seq"
    " FROM (SELECT DISTINCT ON (call_id) call_id, result_seq"
    " FROM unnest(CAST(:ids AS text[]), CAST(:seqs AS bigint[])) AS u(call_id, result_seq)"
    " ORDER BY call_id, result_seq) AS a"
    " WHERE c.tenant_id = :t AND c.session_id = :s AND c.call_id = a.call_id"
    " AND c.result_seq IS NULL AND EXISTS (SELECT 1 FROM surface_nodes AS n"
    " WHERE n.tenant_id = :t AND n.session_id = :s AND n.seq = c.call_seq)"
    " RETURNING c.call_id, c.result_seq"
)

# A change of route family prices every surviving node again (app/service.py: _reprice).
_REPRICE = text(
    "UPDATE surface_nodes AS n SET tokens = u.tokens"
    " FROM unnest(CAST(:seqs AS bigint[]), CAST(:tokens AS bigint[])) AS u(seq, tokens)"
    " WHERE n.tenant_id = :t AND n.session_id = :s AND n.seq = u.seq"
)

# PostgreSQL concatenates the frames (``string_agg`` in position order over the unique
# (tenant, session, position) index): no per-row work in Python, whatever the surface length.
# Sent with psycopg's binary result format (see ``frames``), in its placeholder syntax.
_FRAMES = (
    "SELECT string_agg(message_pb, ''::bytea ORDER BY position) AS frames,"
    " count(message_pb) AS messages,"
    " coalesce(sum(tokens), 0)::bigint AS tokens,"
    " count(message_pb) FILTER (WHERE position < %(split)s) AS before_messages,"
    " coalesce(sum(tokens) FILTER (WHERE position < %(split)s), 0)::bigint AS before_tokens"
    " FROM surface_nodes"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s AND position >= %(from_position)s"
    " AND message_pb IS NOT NULL"
)

# The system nodes (partial index, surface order) beside the frames, for an admission, and the
# tool calls on the surface still unanswered (the tool-call ordering rule, domain/admission.py).
_SYSTEM_AND_FRAMES = (
    "SELECT f.*,"
    " (SELECT array_agg(seq ORDER BY position) FROM surface_nodes"
    "  WHERE tenant_id = %(t)s AND session_id = %(s)s AND is_system) AS system_seqs,"
    " (SELECT array_agg(system_text ORDER BY position) FROM surface_nodes"
    "  WHERE tenant_id = %(t)s AND session_id = %(s)s AND is_system) AS system_texts,"
    " (SELECT array_agg(c.call_id ORDER BY c.call_seq, c.call_id) FROM tool_calls AS c"
    "  WHERE c.tenant_id = %(t)s AND c.session_id = %(s)s AND c.result_seq IS NULL"
    "  AND EXISTS (SELECT 1 FROM surface_nodes AS n"
    "  WHERE n.tenant_id = %(t)s AND n.session_id = %(s)s AND n.seq = c.call_seq)) AS open_calls"
    " FROM (" + _FRAMES + ") AS f"
)


# The frames of the surface as of an event seq, unless a replace since changed it (app/replay.py).
_FRAMES_AS_OF = (
    "SELECT EXISTS (SELECT 1 FROM events WHERE tenant_id = %(t)s AND session_id = %(s)s"
    "  AND seq > %(through)s AND surface_op = 'replace') AS replaced,"
    " (SELECT string_agg(message_pb, ''::bytea ORDER BY position) FROM ("
    "  SELECT message_pb, position FROM surface_nodes"
    "  WHERE tenant_id = %(t)s AND session_id = %(s)s AND seq <= %(through)s"
    "  AND message_pb IS NOT NULL ORDER BY position OFFSET %(first)s) AS n) AS frames"
)


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """The session row, decoded."""

    session_id: str
    revision: int
    next_seq: int
    next_position: int
    series: SeriesState
    last_request: PreviousRequest | None
    prefix: RequestPrefix | None
    shadowed: Shadowed | None
    request_count: int
    surface_tokens: int
    create_time: datetime
    update_time: datetime
    # Running sizes (migration 0003): the surviving nodes' frame bytes and count, and the
    # event log's payload bytes. The session bounds and the stored-bytes quota read these.
    surface_bytes: int = 0
    surface_nodes: int = 0
    log_bytes: int = 0


@dataclass(slots=True)
class Growth:
    """What a transaction's writes added to a session's running sizes (negative: removed)."""

    surface_bytes: int = 0
    surface_nodes: int = 0
    log_bytes: int = 0
    events: int = 0

    def minus(self, other: Growth) -> Growth:
        return Growth(
            self.surface_bytes - other.surface_bytes,
            self.surface_nodes - other.surface_nodes,
            self.log_bytes - other.log_bytes,
            self.events - other.events,
        )


@dataclass(frozen=True, slots=True)
class RequestPrefix:
    """The previous derived request as the next one needs it: its message count, price,
    encoded size (bytes of its concatenated frames) and digest, and ``end_position``, the next
    append position when it was derived. Nodes at or after ``end_position`` were appended
    since; as long as nothing before it was shadowed, the previous request is an exact prefix
    of the next, which is then the stored prefix plus the frames from ``end_position`` on."""

    messages: int
    tokens: int
    size: int
    digest: bytes
    end_position: int


@dataclass(frozen=True, slots=True)
class Frames:
    """Derived messages read by ``SessionStore.frames``: the concatenated frames, how many
    messages, their price; and the count and price of those before a split position."""

    frames: bytes
    messages: int
    tokens: int
    before_messages: int
    before_tokens: int


NO_FRAMES = Frames(b"", 0, 0, 0, 0)


class _RawContext:
    """The execution context handed to SQLAlchemy's cursor events for a raw statement
    (listeners may keep per-statement state on it)."""


# A deferred write: adds its values to the batch's parameters and returns its SQL.
_Write = Callable[[list[Any]], str]


def _param(params: list[Any], value: Any) -> str:
    """A server-side placeholder (``$n``) bound to ``value``: the statement is sent with a raw
    cursor, so psycopg does not re-parse a long query text for its own placeholders."""
    params.append(value)
    return f"${len(params)}"


@dataclass(frozen=True, slots=True)
class Written:
    """What ``write_events`` did: the next append position, the earliest position it shadowed,
    the change in the surface's summed price, and ``tail``: the appended nodes whose rows are
    deferred (not yet readable), which all sit at the end of the surface."""

    next_position: int
    shadowed: Shadowed | None
    tokens: int
    tail: Frames = NO_FRAMES


@dataclass(frozen=True, slots=True)
class StoredResponse:
    method: str
    request_digest: bytes
    response: bytes
    # Where the response's derived request comes from, when ``response`` leaves it out
    # (app/replay.py); None: ``response`` is the whole response.
    derived_request: bytes | None = None


@dataclass(frozen=True, slots=True)
class AdmissionRecord:
    admission_id: str
    turn: int
    step: int
    rendered_prompt: str
    tools: tuple[Tool, ...]
    attempts: int


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A surviving surface node as stored: its pre-encoded message and price."""

    seq: int
    position: int
    is_system: bool
    message: bytes | None
    tokens: int


@dataclass(frozen=True, slots=True)
class Shadowed:
    """The first surface position shadowed since the last request, and whether it held a
    system node (what the cache forecast needs to find the divergence)."""

    position: int
    system: bool

    def earliest(self, other: Shadowed | None) -> Shadowed:
        return self if other is None or self.position <= other.position else other


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
    )
    return PreviousRequest(key, data["message_count"]), prefix


def _record(row: Any) -> SessionRecord:
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
    return SessionRecord(
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


class SessionStore:
    """The SQL of one (tenant, session) within the caller's transaction."""

    def __init__(self, connection: AsyncConnection, tenant: str, session_id: str) -> None:
        self.connection = connection
        self.tenant = tenant
        self.session_id = session_id
        self._deferred: list[_Write] = []
        # Everything this transaction's writes added to the running sizes, and the part of it
        # already sent by ``save``.
        self.growth = Growth()
        self._saved_growth = Growth()

    def _defer(self, write: _Write) -> None:
        self._deferred.append(write)

    def _defer_insert(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        def build(params: list[Any]) -> str:
            columns = list(rows[0])
            values = ", ".join(
                "(" + ", ".join(_param(params, row[column]) for column in columns) + ")"
                for row in rows
            )
            return f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values}"

        self._defer(build)

    def _where_mine(self, params: list[Any], alias: str = "") -> str:
        prefix = f"{alias}." if alias else ""
        return (
            f"{prefix}tenant_id = {_param(params, self.tenant)}"
            f" AND {prefix}session_id = {_param(params, self.session_id)}"
        )

    async def _execute_raw(
        self,
        sql: str,
        params: Any,
        *,
        binary: bool = False,
        raw_placeholders: bool = False,
    ) -> tuple[Any, ...] | None:
        """Run ``sql`` on the transaction's psycopg connection, for what SQLAlchemy would slow
        down: the binary result format, ``$n`` placeholders (a raw cursor: no client-side parse
        of a long query text). SQLAlchemy's ``before_cursor_execute`` / ``after_cursor_execute``
        / ``handle_error`` events still fire, so statement tracing sees these statements too.
        Returns the first row, if the statement returns rows."""
        raw = await self.connection.get_raw_connection()
        driver = cast(psycopg.AsyncConnection[Any], raw.driver_connection)
        sync = self.connection.sync_connection
        assert sync is not None
        dispatch = sync.dispatch
        context = _RawContext()
        cursor: psycopg.AsyncCursor[Any] = (
            psycopg.AsyncRawCursor(driver) if raw_placeholders else driver.cursor(binary=binary)
        )
        async with cursor:
            dispatch.before_cursor_execute(sync, cursor, sql, params, context, False)
            try:
                await cursor.execute(sql.encode(), params, binary=binary)
                row = await cursor.fetchone() if cursor.description is not None else None
            except Exception as error:
                raised = raw_statement_error(
                    sync, raw.dbapi_connection, error, sql, params, context
                )
                if raised is error:
                    raise
                if getattr(raised, "connection_invalidated", False):
                    await self.connection.invalidate()
                raise raised from error
            dispatch.after_cursor_execute(sync, cursor, sql, params, context, False)
        return row

    async def flush(self) -> None:
        """Send the deferred writes, in order, as one statement: each but the last as a
        data-modifying CTE of the last. They touch different rows; foreign keys between them
        are checked at the end of the statement, when every row exists.

        The statement is assembled here (table and column names are the schema's own; every
        value is a bound parameter) and sent on the transaction's psycopg connection: its
        shape changes with the number of rows, so SQLAlchemy would compile it on every call,
        which cost more than the round trips it saves."""
        if not self._deferred:
            return
        params: list[Any] = []
        *ahead, last = [build(params) for build in self._deferred]
        self._deferred = []
        sql = last
        if ahead:
            ctes = ", ".join(f"w{index} AS ({part})" for index, part in enumerate(ahead))
            sql = f"WITH {ctes} {last}"
        await self._execute_raw(sql, params, raw_placeholders=True)

    def _mine(self, table: Any) -> Any:
        return and_(table.c.tenant_id == self.tenant, table.c.session_id == self.session_id)

    def _keys(self) -> dict[str, str]:
        return {"tenant_id": self.tenant, "session_id": self.session_id}

    # ---- the session row --------------------------------------------------------------

    async def create(self) -> SessionRecord | None:
        """Insert the session; None when it already exists (the caller decides what that means)."""
        statement = (
            pg_insert(sessions)
            .values(**self._keys())
            .on_conflict_do_nothing()
            .returning(*sessions.c)
        )
        row = (await self.connection.execute(statement)).first()
        if row is None:
            return None
        # A new lifetime of this session id: request ids of an earlier one (the DeleteSession
        # key that outlived it) are new again for this one (issue 13, finding 6).
        await self.connection.execute(delete(idempotency).where(self._mine(idempotency)))
        return _record(row)

    async def read(self, *, lock: bool) -> SessionRecord | None:
        """The session row; ``lock`` takes the row lock that serialises writers of one session."""
        statement = select(sessions).where(self._mine(sessions))
        if lock:
            statement = statement.with_for_update()
        row = (await self.connection.execute(statement)).first()
        return _record(row) if row is not None else None

    async def save(
        self,
        record: SessionRecord,
        *,
        next_seq: int,
        next_position: int,
        series: SeriesState,
        last_request: tuple[PreviousRequest, RequestPrefix] | None,
        shadowed: Shadowed | None,
        request_count: int,
        surface_tokens: int,
    ) -> int:
        """Write the new counters and series state; returns the revision.

        The revision counts changes of the history: it moves only when events were logged.
        """
        revision = record.revision + (1 if next_seq != record.next_seq else 0)
        values: dict[str, Any] = {
            "revision": revision,
            "next_seq": next_seq,
            "next_position": next_position,
            "replace_generation": series.replace_generation,
            "last_request_generation": series.last_request_generation,
            "last_header": codec.dumps(codec.header_to_json(series.last_header))
            if series.last_header
            else None,
            "last_context": codec.dumps(codec.context_to_json(series.last_context))
            if series.last_context
            else None,
            "last_request": codec.dumps(previous_request_to_json(*last_request))
            if last_request
            else None,
            "shadowed_position": shadowed.position if shadowed else None,
            "shadowed_system": shadowed.system if shadowed else False,
            "request_count": request_count,
            "surface_tokens": surface_tokens,
            "update_time": func.now(),
        }
        del values["update_time"]

        unsaved, self._saved_growth = self.growth.minus(self._saved_growth), replace(self.growth)

        def build(params: list[Any]) -> str:
            assignments = ", ".join(f"{name} = {_param(params, v)}" for name, v in values.items())
            assignments += "".join(
                f", {name} = {name} + {_param(params, getattr(unsaved, name))}"
                for name in ("surface_bytes", "surface_nodes", "log_bytes")
            )
            return (
                f"UPDATE sessions SET {assignments}, update_time = now()"
                f" WHERE {self._where_mine(params)}"
            )

        self._defer(build)
        return revision

    async def delete(self) -> None:
        """Delete the session; its events, surface, admissions and ledger cascade."""
        await self.connection.execute(delete(sessions).where(self._mine(sessions)))
        await self.connection.execute(delete(idempotency).where(self._mine(idempotency)))

    # ---- idempotency ------------------------------------------------------------------

    async def stored_response(self, request_id: str) -> StoredResponse | None:
        await self.flush()
        statement = select(
            idempotency.c.method,
            idempotency.c.request_digest,
            idempotency.c.response,
            idempotency.c.derived_request,
        ).where(self._mine(idempotency), idempotency.c.request_id == request_id)
        row = (await self.connection.execute(statement)).first()
        if row is None:
            return None
        return StoredResponse(row.method, row.request_digest, row.response, row.derived_request)

    async def store_response(
        self,
        request_id: str,
        method: str,
        request_digest: bytes,
        response: bytes,
        derived_request: bytes | None = None,
    ) -> None:
        self._defer_insert(
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

    # ---- the surface ------------------------------------------------------------------

    async def system_nodes(self) -> tuple[SystemNode, ...]:
        """The surviving system nodes in surface order (partial index ``WHERE is_system``)."""
        await self.flush()
        statement = (
            select(nodes.c.seq, nodes.c.system_text)
            .where(self._mine(nodes), nodes.c.is_system)
            .order_by(nodes.c.position)
        )
        rows = await self.connection.execute(statement)
        return tuple(SystemNode(row.seq, row.system_text.decode()) for row in rows)

    async def surface(self, *, with_empty: bool = True) -> list[NodeRecord]:
        """Every surviving node in surface order (``with_empty=False``: only message nodes)."""
        await self.flush()
        statement = select(
            nodes.c.seq, nodes.c.position, nodes.c.is_system, nodes.c.message, nodes.c.tokens
        ).where(self._mine(nodes))
        if not with_empty:
            statement = statement.where(nodes.c.message.is_not(None))
        rows = await self.connection.execute(statement.order_by(nodes.c.position))
        return [NodeRecord(r.seq, r.position, r.is_system, r.message, r.tokens) for r in rows]

    async def write_events(
        self,
        new_events: Sequence[Event],
        next_position: int,
        counter: TokenCounter = HEURISTIC_COUNTER,
    ) -> Written:
        """Log ``new_events`` and apply their surface operations, in order.

        Consecutive appended nodes (and their tool calls) are inserted in one statement each.
        Each new node is priced here with ``counter`` (the session's route's tokenizer); only a
        change of route family prices it again (``reprice``).
        """
        shadowed: Shadowed | None = None
        tokens = 0
        if not new_events:
            return Written(next_position, shadowed, tokens)
        event_rows = [self._event_row(e) for e in new_events]
        self._defer_insert("events", event_rows)
        self.growth.events += len(event_rows)
        self.growth.log_bytes += sum(len(row["payload"]) for row in event_rows)
        pending: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for event in new_events:
            if event.op is None:
                continue
            message = event.derived_message()
            price = message_tokens(message, counter)
            node: dict[str, Any] = {
                **self._keys(),
                "seq": event.seq,
                "is_system": event.is_system,
                "system_text": event.system_text.encode() if event.is_system else None,
                "message": codec.encode_message(message) if message else None,
                "message_pb": protowire.frame(message) if message else None,
                "tokens": price,
                "turn": event.turn,
                "step": event.step,
            }
            tokens += price
            self.growth.surface_nodes += 1
            self.growth.surface_bytes += len(node["message_pb"] or b"")
            if isinstance(event.op, Append):
                node["position"] = next_position
                next_position += 1
                pending.append(node)
            else:
                self._defer_nodes(pending, calls)
                await self.flush()  # _shadow reads and deletes the nodes written so far
                first, removed = await self._shadow(event.op)
                tokens -= removed
                node["position"] = first.position
                shadowed = first.earliest(shadowed)
                # Written now: only the appended nodes after the last replacement stay
                # deferred, so the tail is exactly the end of the surface.
                self._defer_insert("surface_nodes", [node])
                await self.flush()
            if message is not None:
                calls += (
                    {**self._keys(), "call_id": call_id, "call_seq": event.seq}
                    for call_id in message.tool_call_ids()
                )
        tail = [node for node in pending if node["message_pb"] is not None]
        self._defer_nodes(pending, calls)
        return Written(
            next_position,
            shadowed,
            tokens,
            Frames(
                b"".join(node["message_pb"] for node in tail),
                len(tail),
                sum(node["tokens"] for node in tail),
                0,
                0,
            ),
        )

    def _defer_nodes(self, pending: list[dict[str, Any]], calls: list[dict[str, Any]]) -> None:
        if pending:
            self._defer_insert("surface_nodes", list(pending))
            pending.clear()
        if calls:
            self._defer_insert("tool_calls", list(calls))
            calls.clear()

    async def _shadow(self, op: Replace) -> tuple[Shadowed, int]:
        """Delete the shadowed run of nodes; the new node takes the first one's position.
        Returns the first shadowed node and the summed price of the shadowed nodes."""
        rows = await self.connection.execute(
            select(nodes.c.seq, nodes.c.position, nodes.c.is_system).where(
                self._mine(nodes), nodes.c.seq.in_((op.start_seq, op.end_seq))
            )
        )
        by_seq = {row.seq: Shadowed(row.position, row.is_system) for row in rows}
        start, end = by_seq[op.start_seq], by_seq[op.end_seq]
        removed = (
            await self.connection.execute(
                delete(nodes)
                .where(self._mine(nodes), nodes.c.position.between(start.position, end.position))
                .returning(nodes.c.tokens, func.coalesce(func.octet_length(nodes.c.message_pb), 0))
            )
        ).all()
        self.growth.surface_nodes -= len(removed)
        self.growth.surface_bytes -= sum(row[1] for row in removed)
        return start, sum(row.tokens for row in removed)

    def _frame_params(self, from_position: int, split_position: int | None) -> dict[str, Any]:
        return {
            "t": self.tenant,
            "s": self.session_id,
            "from_position": from_position,
            "split": split_position if split_position is not None else -1,
        }

    async def system_nodes_and_frames(
        self, from_position: int, split_position: int | None
    ) -> tuple[tuple[SystemNode, ...], Frames, tuple[str, ...]]:
        """``system_nodes()`` and ``frames(from_position, split_position)`` in one statement
        (one round trip), on the raw connection like ``frames``, with the ids of the tool calls
        on the surface no result answers yet, in call order."""
        await self.flush()
        row = await self._execute_raw(
            _SYSTEM_AND_FRAMES,
            self._frame_params(from_position, split_position),
            binary=True,
        )
        assert row is not None
        frames, messages, tokens, before_messages, before_tokens, seqs, texts, calls = row
        system = tuple(
            SystemNode(seq, bytes(text).decode())
            for seq, text in zip(seqs or (), texts or (), strict=True)
        )
        read = Frames(bytes(frames or b""), messages, tokens, before_messages, before_tokens)
        return system, read, tuple(calls or ())

    async def frames(self, from_position: int, split_position: int | None) -> Frames:
        """The derived messages of the nodes at ``from_position`` and after, in surface order,
        as concatenated frames (one aggregate in the database; an index range scan), with
        their count and price, and the count and price of those before ``split_position``.

        Deferred nodes are not read (no flush): ``write_events`` returns them as its tail.
        The query runs on the transaction's psycopg connection with the binary result format:
        in the text format PostgreSQL would hex-encode the bytes and psycopg decode them, which
        doubles what a long surface moves and costs more than the aggregate itself."""
        row = await self._execute_raw(
            _FRAMES,
            self._frame_params(from_position, split_position),
            binary=True,
        )
        assert row is not None
        frames, messages, tokens, before_messages, before_tokens = row
        return Frames(bytes(frames or b""), messages, tokens, before_messages, before_tokens)

    async def frames_as_of(self, through_seq: int, first_message: int) -> bytes | None:
        """The derived messages from index ``first_message`` on of the surface as it was after
        event ``through_seq``, as concatenated frames; None when a node was shadowed since
        (then the stored nodes no longer hold that surface). With no ``replace`` event after
        ``through_seq`` that surface is exactly the stored nodes at or before it."""
        await self.flush()
        row = await self._execute_raw(
            _FRAMES_AS_OF,
            {
                "t": self.tenant,
                "s": self.session_id,
                "through": through_seq,
                "first": first_message,
            },
            binary=True,
        )
        assert row is not None
        replaced, frames = row
        return None if replaced else bytes(frames or b"")

    def _event_row(self, event: Event) -> dict[str, Any]:
        surface_op = None
        start = end = None
        if isinstance(event.op, Append):
            surface_op = "append"
        elif isinstance(event.op, Replace):
            surface_op, start, end = "replace", event.op.start_seq, event.op.end_seq
        return {
            **self._keys(),
            "seq": event.seq,
            "kind": event.kind.value,
            "turn": event.turn,
            "step": event.step,
            "surface_op": surface_op,
            "replace_start_seq": start,
            "replace_end_seq": end,
            "source_seqs": list(event.source_seqs),
            "admission_id": event.admission_id or None,
            "payload": codec.dumps(codec.event_payload(event)),
        }

    # ---- tool calls -------------------------------------------------------------------

    async def reprice(self, prices: Sequence[tuple[int, int]]) -> None:
        """Set the stored price of each ``(seq, tokens)`` surface node, in one statement."""
        await self.flush()
        if not prices:
            return
        await self.connection.execute(
            _REPRICE,
            {
                "t": self.tenant,
                "s": self.session_id,
                "seqs": [seq for seq, _ in prices],
                "tokens": [tokens for _, tokens in prices],
            },
        )

    async def known_tool_calls(self, call_ids: Sequence[str]) -> set[str]:
        """Which of ``call_ids`` were already made in this session (on the surface or not)."""
        await self.flush()
        if not call_ids:
            return set()
        rows = await self.connection.execute(
            select(tool_calls.c.call_id).where(
                self._mine(tool_calls), tool_calls.c.call_id.in_(list(call_ids))
            )
        )
        return {row.call_id for row in rows}

    async def answer_tool_calls(self, answers: Sequence[tuple[str, int]]) -> list[bool]:
        """Mark each ``(call_id, result_seq)`` answered if the call is open and still on the
        surface, in one statement; whether each answer took (a second answer to the same call
        does not)."""
        if not answers:
            return []
        await self.flush()  # the calls may be in this transaction's deferred writes
        rows = await self.connection.execute(
            _ANSWER,
            {
                "t": self.tenant,
                "s": self.session_id,
                "ids": [call_id for call_id, _ in answers],
                "seqs": [seq for _, seq in answers],
            },
        )
        answered = {row.call_id: row.result_seq for row in rows}
        return [answered.get(call_id) == seq for call_id, seq in answers]

    # ---- admissions and the ledger ----------------------------------------------------

    async def add_admission(
        self,
        admission_id: str,
        turn: int,
        step: int,
        rendered: str,
        tools: tuple[Tool, ...],
        user_seqs: Sequence[int],
    ) -> None:
        self._defer_insert(
            "admissions",
            [
                {
                    **self._keys(),
                    "admission_id": admission_id,
                    "turn": turn,
                    "step": step,
                    "rendered_prompt": rendered.encode(),
                    "tools": codec.encode_tools(tools),
                    "users_seqs": list(user_seqs),
                    "attempts": 1,
                }
            ],
        )

    async def admission(self, admission_id: str) -> AdmissionRecord | None:
        await self.flush()
        row = (
            await self.connection.execute(
                select(admissions).where(
                    self._mine(admissions), admissions.c.admission_id == admission_id
                )
            )
        ).first()
        if row is None:
            return None
        return AdmissionRecord(
            row.admission_id,
            row.turn,
            row.step,
            row.rendered_prompt.decode(),
            codec.decode_tools(row.tools),
            row.attempts,
        )

    async def count_attempt(self, admission_id: str) -> None:
        def build(params: list[Any]) -> str:
            return (
                "UPDATE admissions SET attempts = attempts + 1"
                f" WHERE {self._where_mine(params)}"
                f" AND admission_id = {_param(params, admission_id)}"
            )

        self._defer(build)

    async def add_request(
        self, request_index: int, admission_id: str, attempt: int, forecast: bytes
    ) -> None:
        self._defer_insert(
            "requests",
            [
                {
                    **self._keys(),
                    "request_index": request_index,
                    "admission_id": admission_id,
                    "attempt": attempt,
                    "forecast": forecast,
                }
            ],
        )

    async def observe_usage(self, admission_id: str, observed: bytes) -> None:
        """Attach the provider's usage to the admission's latest request."""

        def build(params: list[Any]) -> str:
            return (
                f"UPDATE requests SET observed = {_param(params, observed)}"
                f" WHERE {self._where_mine(params)} AND request_index = ("
                f"SELECT max(request_index) FROM requests WHERE {self._where_mine(params)}"
                f" AND admission_id = {_param(params, admission_id)})"
            )

        self._defer(build)

    async def ledger(self, limit: int) -> list[Any]:
        await self.flush()
        statement = (
            select(requests)
            .where(self._mine(requests))
            .order_by(requests.c.request_index.desc())
            .limit(limit)
        )
        return list(reversed((await self.connection.execute(statement)).all()))

    # ---- reads for Inspect and ListEvents ---------------------------------------------

    async def system_node_details(self) -> list[Any]:
        """Surviving system nodes in surface order with their event's time and payload."""
        await self.flush()
        statement = (
            select(
                nodes.c.seq,
                nodes.c.turn,
                nodes.c.step,
                nodes.c.system_text,
                nodes.c.tokens,
                events.c.commit_time,
                events.c.payload,
            )
            .join(
                events,
                and_(
                    events.c.tenant_id == nodes.c.tenant_id,
                    events.c.session_id == nodes.c.session_id,
                    events.c.seq == nodes.c.seq,
                ),
            )
            .where(self._mine(nodes), nodes.c.is_system)
            .order_by(nodes.c.position)
        )
        return list((await self.connection.execute(statement)).all())

    async def events_page(self, after_seq: int, limit: int, budget: int) -> tuple[list[Any], bool]:
        """Events after ``after_seq`` in order: at most ``limit``, and at most ``budget``
        payload bytes, except that the first always comes (so an event larger than the budget
        comes alone on its page); and whether more follow. Sizes are read from the rows'
        headers (``octet_length`` does not detoast), so events past the budget are not loaded."""
        await self.flush()
        size = func.octet_length(events.c.payload)
        window = (
            select(
                *(column for column in events.c if column.name != "payload"),
                events.c.payload.label("stored_payload"),
                func.sum(size).over(order_by=events.c.seq).label("running"),
                func.row_number().over(order_by=events.c.seq).label("number"),
            )
            .where(self._mine(events), events.c.seq > after_seq)
            .order_by(events.c.seq)
            .limit(limit + 1)
            .subquery()
        )
        fits = or_(window.c.number == 1, window.c.running <= budget)
        hidden = ("stored_payload", "running", "number")
        statement = select(
            *(column for column in window.c if column.name not in hidden),
            fits.label("fits"),
            case((fits, window.c.stored_payload)).label("payload"),
        ).order_by(window.c.seq)
        rows = list((await self.connection.execute(statement)).all())
        page = list(itertools.takewhile(lambda row: row.fits, rows[:limit]))
        return page, len(rows) > len(page)

    async def requests_from(self, first_index: int, limit: int) -> list[Any]:
        """Ledger rows from ``first_index`` on, in request order (ListTrajectory)."""
        await self.flush()
        statement = (
            select(requests)
            .where(self._mine(requests), requests.c.request_index >= first_index)
            .order_by(requests.c.request_index)
            .limit(limit)
        )
        return list((await self.connection.execute(statement)).all())

    async def prompt_events(self, before_seq: int) -> list[Any]:
        """The events below ``before_seq`` that can change the prompt in force, the header or
        the context: system messages, replacements, request headers and contexts."""
        await self.flush()
        kinds = ("system/message", "request/header", "request/context")
        statement = (
            select(events)
            .where(
                self._mine(events),
                events.c.seq < before_seq,
                or_(events.c.kind.in_(kinds), events.c.surface_op == "replace"),
            )
            .order_by(events.c.seq)
        )
        return list((await self.connection.execute(statement)).all())

    async def events_after(self, after_seq: int, limit: int) -> list[Any]:
        await self.flush()
        statement = (
            select(events)
            .where(self._mine(events), events.c.seq > after_seq)
            .order_by(events.c.seq)
            .limit(limit)
        )
        return list((await self.connection.execute(statement)).all())


async def list_sessions(
    connection: AsyncConnection, tenant: str, after: tuple[datetime, str] | None, limit: int
) -> list[SessionRecord]:
    """A tenant's sessions in creation order, keyset-paginated after ``after``."""
    statement = select(sessions).where(sessions.c.tenant_id == tenant)
    if after is not None:
        statement = statement.where(
            tuple_(sessions.c.create_time, sessions.c.session_id)
            > tuple_(literal(after[0]), literal(after[1]))
        )
    statement = statement.order_by(sessions.c.create_time, sessions.c.session_id).limit(limit)
    return [_record(row) for row in await connection.execute(statement)]
