"""Chunked frames (migration 0009): a FULL request reads a few hundred rows, not one per node.

A derived request is its message nodes' frames concatenated in position order. Read node by
node, a FULL request of a long session makes PostgreSQL aggregate one row per node (S3: most of
its cost). ``frame_chunks`` keeps the frames of every complete range of ``FRAME_CHUNK``
positions below the highest chunk's end pre-concatenated, with their count and price; a FULL
read aggregates those chunks and reads only the nodes past them (and those of a chunk that a
split position falls inside, where the count before the split needs each node).

The invariant every write keeps: every message node below the highest chunk end is in exactly
one chunk, whose bytes are its current frame. Appends land past it (positions only grow); a
replacement deletes every chunk reaching its first shadowed position (``log_and_surface``); a
repricing deletes them all. Chunks are sealed by the commit of a transaction that read a FULL
request with at least a chunk's worth of positions unsealed (``seal_statement``), from the nodes
as that commit sees them, unless the transaction replaced a node (its deleted chunks would leave
a hole below the new ones).

A worker may hold the frames of large nodes and chunks (``held_frames.py``: a session of a few
large nodes, a million tokens of tool outputs, may have no complete chunk to seal), and a FULL
read leaves out the bytes of those it holds. A chunk is held by its first position, which is
safe at one version of the session row: within a transaction a chunk is only ever sealed past
the chunks its read found (and not at all once it replaced or repriced), and every commit that
drops chunks moves the version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from admission_service.domain.session import NO_FRAMES, Frames
from admission_service.storage.batch import Write, param
from admission_service.storage.held_frames import HELD_FRAME_MIN
from admission_service.storage.raw import RawStatement
from admission_service.storage.scope import where_session

FRAME_CHUNK = 256  # positions per chunk: ~400 chunks for S3's 100 000 nodes

_KEY = "tenant_id = %(t)s AND session_id = %(s)s"

# The whole surface's frames (a FULL request) as rows in position order: each sealed chunk and
# each node past them (and each node of a chunk a split position falls inside, whose count
# before the split needs them): (position, frames, messages, tokens, before the split, the end
# of the sealed chunks, the part's key). ``full_frames`` sums them. Rows, not one
# ``string_agg``: PostgreSQL then sends the chunks' bytes as they are stored instead of building
# and sending one value of the whole request (at 50 000 nodes, 14 MB: ~10-18 ms against ~27 ms).
#
# A part's key names its frames among those a worker holds (``held_frames.py``): a node's seq,
# or a chunk's first position as ``-1 - first_position`` (seqs are never negative). A part
# whose key is in %(held)s comes without its frames (NULL; stored frames never are) when the
# session row is at %(held_version)s, the version the worker's copies were left at.
_NODE_KEY = "seq"
_CHUNK_KEY = "-1 - first_position"


def _held_or(key: str, frames: str) -> str:
    return f"CASE WHEN {key} = ANY((SELECT keys FROM held)::bigint[]) THEN NULL ELSE {frames} END"


FULL_FRAMES = (
    "WITH sealed AS (SELECT coalesce(max(end_position), 0) AS upto FROM frame_chunks"
    f" WHERE {_KEY}),"
    " straddling AS (SELECT first_position, end_position FROM frame_chunks"
    f" WHERE {_KEY} AND first_position < %(split)s AND %(split)s < end_position),"
    " held AS (SELECT %(held)s::bigint[] AS keys FROM sessions"
    f" WHERE {_KEY} AND row_version = %(held_version)s)"
    " SELECT position, frames, messages, tokens, before, (SELECT upto FROM sealed), key FROM ("
    f" SELECT first_position AS position, {_held_or(_CHUNK_KEY, 'frames')} AS frames,"
    " messages, tokens, end_position <= %(split)s AS before,"
    f" {_CHUNK_KEY} AS key FROM frame_chunks"
    f" WHERE {_KEY} AND NOT (first_position < %(split)s AND %(split)s < end_position)"
    " UNION ALL"
    f" SELECT position, {_held_or(_NODE_KEY, 'message_pb')}, 1, tokens, position < %(split)s,"
    f" {_NODE_KEY} FROM surface_nodes WHERE {_KEY} AND message_pb IS NOT NULL"
    " AND position >= (SELECT upto FROM sealed)"
    " UNION ALL"
    f" SELECT position, {_held_or(_NODE_KEY, 'message_pb')}, 1, tokens, position < %(split)s,"
    f" {_NODE_KEY} FROM surface_nodes WHERE {_KEY} AND message_pb IS NOT NULL"
    " AND position >= (SELECT first_position FROM straddling)"
    " AND position < (SELECT end_position FROM straddling)) AS parts"
    " ORDER BY position"
)


@dataclass(frozen=True, slots=True)
class FullRead:
    """What ``FULL_FRAMES``' rows say: the request's frames (with their count and price and
    those before the split); the end of the sealed chunks and the next position past every
    node read (what a seal may cover); the large parts a worker may hold after the commit, by
    key, and how many parts came from those it held."""

    frames: Frames
    sealed_upto: int
    read_end: int
    to_hold: dict[int, bytes]
    from_held: int = 0


def full_frames(rows: list[tuple[Any, ...]], held: Mapping[int, bytes]) -> FullRead:
    """The FULL request in ``FULL_FRAMES``' rows, each part's frames the read left out taken
    from ``held``."""
    if not rows:
        return FullRead(NO_FRAMES, 0, 0, {})
    messages = tokens = before_messages = before_tokens = from_held = 0
    frames: list[bytes] = []
    to_hold: dict[int, bytes] = {}
    for _, frame, count, price, before, _, key in rows:
        messages += count
        tokens += price
        if before:
            before_messages += count
            before_tokens += price
        if frame is None:
            frame, from_held = held[key], from_held + 1
        if len(frame) >= HELD_FRAME_MIN:
            to_hold[key] = frame
        frames.append(frame)  # the chunks stay apart: the response joins them with its head
    return FullRead(
        Frames(tuple(frames), messages, tokens, before_messages, before_tokens),
        sealed_upto=rows[0][5],
        read_end=rows[-1][0] + 1,
        to_hold=to_hold,
        from_held=from_held,
    )


# Seal the complete ranges of positions in [%(from)s, %(to)s) that hold message nodes. The key
# columns come from the nodes themselves and group with them, so on Citus the statement runs
# whole on the session's shard (co-located INSERT ... SELECT).
_SEAL = (
    "INSERT INTO frame_chunks"
    " (tenant_id, session_id, first_position, end_position, frames, messages, tokens)"
    f" SELECT tenant_id, session_id, position / {FRAME_CHUNK} * {FRAME_CHUNK},"
    f" position / {FRAME_CHUNK} * {FRAME_CHUNK} + {FRAME_CHUNK},"
    " string_agg(message_pb, ''::bytea ORDER BY position), count(*), sum(tokens)"
    f" FROM surface_nodes WHERE {_KEY} AND message_pb IS NOT NULL"
    " AND position >= %(from)s AND position < %(to)s"
    f" GROUP BY tenant_id, session_id, position / {FRAME_CHUNK}"
)


def seal_statement(
    tenant: str, session_id: str, sealed_upto: int, read_end: int
) -> RawStatement | None:
    """The seal of the complete chunks between the sealed end and ``read_end`` (the next
    position past the nodes a FULL read found); None when not even one is complete."""
    to = read_end // FRAME_CHUNK * FRAME_CHUNK
    if to <= sealed_upto:
        return None
    params = {"t": tenant, "s": session_id, "from": sealed_upto, "to": to}
    return RawStatement(_SEAL, params)


def drop_chunks(tenant: str, session_id: str, from_position: int) -> Write:
    """The deferred deletion of every chunk reaching ``from_position`` (0: all of them): a
    replacement from there on, or a repricing, leaves their frames or prices stale."""

    def build(params: list[Any]) -> str:
        return (
            f"DELETE FROM frame_chunks WHERE {where_session(params, (tenant, session_id))}"
            f" AND end_position > {param(params, from_position)}"
        )

    return build
