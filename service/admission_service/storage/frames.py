"""Reads of the surface: the system nodes, the nodes themselves, and derived requests as the
stored protobuf frames concatenated by the database.

PostgreSQL concatenates the frames (``string_agg`` in position order over the unique (tenant,
session, position) index): no per-row work in Python, whatever the surface length. These reads
run on the transaction's psycopg connection with the binary result format (``raw``): in the text
format PostgreSQL would hex-encode the bytes and psycopg decode them, which doubles what a long
surface moves and costs more than the aggregate itself. They are written in psycopg's
placeholder syntax.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from admission_service.domain.projection import SystemNode
from admission_service.domain.session import Frames
from admission_service.storage.frame_chunks import FULL_FRAMES, full_frames, seal_statement
from admission_service.storage.raw import RawStatement
from admission_service.storage.rows import NodeRecord, columns
from admission_service.storage.scope import SessionScope
from admission_service.storage.tables import surface_nodes as nodes

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

# The last %(messages)s message nodes before %(end)s, in position order: a backward range scan
# of the (tenant, session, position) index that stops after them.
_FRAMES_BEFORE = (
    "SELECT string_agg(message_pb, ''::bytea ORDER BY position) FROM ("
    " SELECT message_pb, position FROM surface_nodes"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s AND position < %(end)s"
    " AND message_pb IS NOT NULL ORDER BY position DESC LIMIT %(messages)s) AS last"
)

# The tool calls on the surface still unanswered, in call order (partial index on the open
# calls; the tool-call ordering rule, domain/admission.py).
_OPEN_CALLS = (
    "SELECT array_agg(c.call_id ORDER BY c.call_seq, c.call_id) FROM tool_calls AS c"
    " WHERE c.tenant_id = %(t)s AND c.session_id = %(s)s AND c.result_seq IS NULL"
    " AND EXISTS (SELECT 1 FROM surface_nodes AS n"
    " WHERE n.tenant_id = %(t)s AND n.session_id = %(s)s AND n.seq = c.call_seq)"
)

# The system nodes (partial index, surface order) and the open tool calls: what a step reads
# of its session beyond the row, read with the row's lock (session_rows.py).
_SYSTEM_AND_OPEN = (
    "SELECT (SELECT array_agg(seq ORDER BY position) FROM surface_nodes"
    "  WHERE tenant_id = %(t)s AND session_id = %(s)s AND is_system) AS system_seqs,"
    " (SELECT array_agg(system_text ORDER BY position) FROM surface_nodes"
    "  WHERE tenant_id = %(t)s AND session_id = %(s)s AND is_system) AS system_texts,"
    " (" + _OPEN_CALLS + ") AS open_calls"
)

_FRAMES_SYSTEM_AND_OPEN = f"SELECT f.*, o.* FROM ({_FRAMES}) AS f, ({_SYSTEM_AND_OPEN}) AS o"

# The frames of the surface as of an event seq, unless a replace since changed it (app/replay.py).
_FRAMES_AS_OF = (
    "SELECT EXISTS (SELECT 1 FROM events WHERE tenant_id = %(t)s AND session_id = %(s)s"
    "  AND seq > %(through)s AND surface_op = 'replace') AS replaced,"
    " (SELECT string_agg(message_pb, ''::bytea ORDER BY position) FROM ("
    "  SELECT message_pb, position FROM surface_nodes"
    "  WHERE tenant_id = %(t)s AND session_id = %(s)s AND seq <= %(through)s"
    "  AND message_pb IS NOT NULL ORDER BY position OFFSET %(first)s) AS n) AS frames"
)


def system_and_open_statement(params: dict[str, str]) -> RawStatement:
    """The read of the system nodes and the open tool calls (``params``: the session's key as
    ``t`` and ``s``); its row: ``system_and_open``."""
    return RawStatement(_SYSTEM_AND_OPEN, params, binary=True)


def system_and_open(row: tuple[Any, ...]) -> tuple[tuple[SystemNode, ...], tuple[str, ...]]:
    """The surviving system nodes in surface order and the open calls' ids in call order."""
    seqs, texts, calls = row
    system = tuple(
        SystemNode(seq, bytes(text).decode())
        for seq, text in zip(seqs or (), texts or (), strict=True)
    )
    return system, tuple(calls or ())


def _frames(row: tuple[Any, ...]) -> Frames:
    frames, messages, tokens, before_messages, before_tokens = row
    return Frames(bytes(frames or b""), messages, tokens, before_messages, before_tokens)


class FrameReads(SessionScope):
    """The surface as the projection rule and the derived request read it."""

    async def system_nodes(self) -> tuple[SystemNode, ...]:
        """The surviving system nodes in surface order (partial index ``WHERE is_system``)."""
        await self.flush()
        statement = (
            select(nodes.c.seq, nodes.c.system_text)
            .where(self._mine(nodes), nodes.c.is_system)
            .order_by(nodes.c.position)
        )
        rows = await self._execute(statement)
        return tuple(SystemNode(row.seq, row.system_text.decode()) for row in rows)

    async def surface(self, *, with_empty: bool = True) -> list[NodeRecord]:
        """Every surviving node in surface order (``with_empty=False``: only message nodes)."""
        await self.flush()
        statement = select(*columns(nodes, NodeRecord)).where(self._mine(nodes))
        if not with_empty:
            statement = statement.where(nodes.c.message_pb.is_not(None))
        rows = await self._execute(statement.order_by(nodes.c.position))
        return [NodeRecord(*row) for row in rows]

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
        """``system_nodes()`` and ``frames(from_position, split_position)``, with the ids of the
        tool calls on the surface no result answers yet, in call order, all as this
        transaction's writes left them. What the transaction knows (read with the row's lock,
        or cached, and moved by its writes: ``session_cache.KnownSession``) is not read again:
        usually that is all of it, and a read of the frames since the previous request too.
        Otherwise the deferred writes go first, then one read, in one round trip."""
        known = self.known
        if known is not None and not known.lost:
            frames = known.frames_since_request(from_position, split_position)
            if frames is None:
                frames = await self._read_frames(from_position, split_position, flush=True)
            return known.system_nodes, frames, tuple(known.open_calls)
        row = await self._read(_FRAMES_SYSTEM_AND_OPEN, from_position, split_position, True)
        system, calls = system_and_open(row[5:])
        return system, _frames(row[:5]), calls

    async def frames(self, from_position: int, split_position: int | None) -> Frames:
        """The derived messages of the nodes at ``from_position`` and after, in surface order,
        as concatenated frames (one aggregate in the database; an index range scan), with
        their count and price, and the count and price of those before ``split_position``.

        Deferred nodes are not read (no flush): ``write_events`` returns them as its tail."""
        return await self._read_frames(from_position, split_position, flush=False)

    async def frames_before(self, end_position: int, messages: int) -> bytes:
        """The frames of the last ``messages`` derived messages before ``end_position``, in
        surface order. They were committed before this transaction (no flush)."""
        params = {"t": self.tenant, "s": self.session_id, "end": end_position, "messages": messages}
        row = await self._execute_raw(_FRAMES_BEFORE, params, binary=True, flush=False)
        assert row is not None
        return bytes(row[0] or b"")

    async def _read_frames(
        self, from_position: int, split_position: int | None, flush: bool
    ) -> Frames:
        """``frames``; ``flush``: after the deferred writes. A FULL request (from position 0)
        reads the chunked frames and the nodes past them (``frame_chunks.py``), and leaves the
        seal of what it found unsealed to go with the transaction's commit."""
        if from_position > 0:
            return _frames(await self._read(_FRAMES, from_position, split_position, flush))
        deferred = self._deferred() if flush else ()
        params = self._frame_params(0, split_position)
        read = RawStatement(FULL_FRAMES, params, binary=True, all_rows=True)
        *_, rows = await self._flight(*deferred, read)
        frames, sealed_upto, read_end = full_frames(rows)
        self.seal = seal_statement(self.tenant, self.session_id, sealed_upto, read_end)
        return frames

    async def _read(
        self, sql: str, from_position: int, split_position: int | None, flush: bool
    ) -> tuple[Any, ...]:
        """The row of a read of the frames (``sql``: psycopg placeholders, binary results);
        ``flush``: after the deferred writes, in the same round trip."""
        params = self._frame_params(from_position, split_position)
        row = await self._execute_raw(sql, params, binary=True, flush=flush)
        assert row is not None
        return row  # type: ignore[no-any-return]

    async def frames_as_of(self, through_seq: int, first_message: int) -> bytes | None:
        """The derived messages from index ``first_message`` on of the surface as it was after
        event ``through_seq``, as concatenated frames; None when a node was shadowed since
        (then the stored nodes no longer hold that surface). With no ``replace`` event after
        ``through_seq`` that surface is exactly the stored nodes at or before it."""
        row = await self._execute_raw(
            _FRAMES_AS_OF,
            {
                "t": self.tenant,
                "s": self.session_id,
                "through": through_seq,
                "first": first_message,
            },
            binary=True,
            flush=True,
        )
        assert row is not None
        replaced, frames = row
        return None if replaced else bytes(frames or b"")
