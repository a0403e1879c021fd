"""The audit every scenario ends with, and the database-side measurements.

For every session in the ``Book``:

* the shared audit (``tests/auditing.py``): seqs dense, the log folds into a valid surface
  (``SessionLog`` checks every surface operation: a replace covers nodes on the surface and
  cites every node it shadows), and the served request equals the one derived from the log;
* the stored surface (``surface_nodes`` in surface order) equals the surface re-derived from
  the log alone, and the session row's counters agree with the log;
* every acknowledged response's effects are present exactly once: each seq it claims holds
  the claimed kind and text, no two responses claim one seq, and each run-unique text it
  committed occurs exactly once in the log;
* acknowledged effects are serial: their events do not interleave, and revisions grow with
  seqs;
* no unacknowledged call left a partial step: its texts occur all exactly once or not at all;
  and every admission's user messages are exactly the users logged for it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from admission_service.domain.events import Event, EventKind
from admission_service.domain.messages import Text, ToolResult
from admission_service.storage.engine import libpq_url
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from sqlalchemy.engine import make_url

from tests.auditing import audit

from .harness import Book, SessionBook

TENANT = "default"
MESSAGE_KINDS = frozenset(
    {
        EventKind.USER_MESSAGE,
        EventKind.ASSISTANT_MESSAGE,
        EventKind.TOOL_RESULT,
        EventKind.COMPACTION_SUMMARY,
    }
)


def event_text(event: Event) -> str:
    """A message event's text; a tool result's is the text inside its result block."""
    if event.message is None:
        return ""
    parts = []
    for block in event.message.content:
        if isinstance(block, Text):
            parts.append(block.text)
        elif isinstance(block, ToolResult):
            parts.extend(b.text for b in block.content if isinstance(b, Text))
    return "".join(parts)


@dataclass
class AuditFigures:
    sessions: int = 0
    events: int = 0
    acked: int = 0
    unknown_committed: int = 0
    unknown_not_committed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "result": "pass",
            "sessions": self.sessions,
            "events": self.events,
            "acknowledged_effects": self.acked,
            "unacknowledged_committed_whole": self.unknown_committed,
            "unacknowledged_not_committed": self.unknown_not_committed,
        }


@dataclass(frozen=True)
class StoredState:
    surfaces: dict[str, list[int]]
    rows: dict[str, tuple[int, int]]  # session -> (revision, next_seq)
    admissions: dict[str, dict[str, list[int]]]  # session -> admission -> users_seqs


async def stored_state(database_url: str, session_ids: list[str]) -> StoredState:
    surfaces: dict[str, list[int]] = {sid: [] for sid in session_ids}
    rows: dict[str, tuple[int, int]] = {}
    admissions: dict[str, dict[str, list[int]]] = {sid: {} for sid in session_ids}
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as connection:
        cursor = await connection.execute(
            "SELECT session_id, seq FROM surface_nodes WHERE tenant_id = %s"
            " AND session_id = ANY(%s) ORDER BY session_id, position",
            (TENANT, session_ids),
        )
        for session_id, seq in await cursor.fetchall():
            surfaces[session_id].append(seq)
        cursor = await connection.execute(
            "SELECT session_id, revision, next_seq FROM sessions WHERE tenant_id = %s"
            " AND session_id = ANY(%s)",
            (TENANT, session_ids),
        )
        for session_id, revision, next_seq in await cursor.fetchall():
            rows[session_id] = (revision, next_seq)
        cursor = await connection.execute(
            "SELECT session_id, admission_id, users_seqs FROM admissions WHERE tenant_id = %s"
            " AND session_id = ANY(%s)",
            (TENANT, session_ids),
        )
        for session_id, admission_id, users_seqs in await cursor.fetchall():
            admissions[session_id][admission_id] = list(users_seqs)
    return StoredState(surfaces, rows, admissions)


def check_session(
    book: SessionBook, events: list[Event], nodes: list[int], stored: StoredState
) -> tuple[int, int, int]:
    """Asserts the bullet list above for one session; returns (acked, unknown committed,
    unknown not committed)."""
    sid = book.session_id
    assert stored.surfaces[sid] == nodes, f"{sid}: stored surface differs from the log's"
    revision, next_seq = stored.rows[sid]
    assert next_seq == len(events), f"{sid}: next_seq {next_seq} but {len(events)} events"

    texts = Counter(event_text(e) for e in events if e.kind in MESSAGE_KINDS)
    claimed: dict[int, str] = {}
    spans = []
    acked = committed = not_committed = 0
    for effect in book.effects:
        if effect.acked:
            acked += 1
            assert effect.revision is not None and effect.revision <= revision, (
                f"{sid}: {effect.method} acknowledged revision {effect.revision} > {revision}"
            )
            for seq, (kind, text) in effect.claims.items():
                assert seq not in claimed, (
                    f"{sid}: seq {seq} claimed by {claimed[seq]} and {effect.request_id}"
                )
                claimed[seq] = effect.request_id
                assert seq < len(events), f"{sid}: claimed seq {seq} is not in the log"
                event = events[seq]
                assert event.kind is kind and event_text(event) == text, (
                    f"{sid}: seq {seq} is {event.kind} {event_text(event)!r}, "
                    f"{effect.method} {effect.request_id} claimed {kind} {text!r}"
                )
            for text in effect.texts:
                assert texts[text] == 1, f"{sid}: acknowledged {text!r} occurs {texts[text]}x"
            if effect.claims:
                spans.append((min(effect.claims), max(effect.claims), effect.revision))
        else:
            counts = [texts[t] for t in effect.texts]
            assert all(c == 1 for c in counts) or all(c == 0 for c in counts), (
                f"{sid}: unacknowledged {effect.method} {effect.request_id} left a partial "
                f"step: {dict(zip(effect.texts, counts, strict=True))}"
            )
            effect.found = bool(counts) and counts[0] == 1
            if effect.found:
                committed += 1
            else:
                not_committed += 1
    spans.sort()
    for (_, end, rev), (start, _, next_rev) in itertools.pairwise(spans):
        assert end < start, f"{sid}: the events of two acknowledged calls interleave"
        assert rev is not None and next_rev is not None and rev < next_rev, (
            f"{sid}: revisions do not grow with seqs ({rev} then {next_rev})"
        )

    users_by_admission: dict[str, list[int]] = {}
    for event in events:
        if event.kind is EventKind.USER_MESSAGE:
            users_by_admission.setdefault(event.admission_id, []).append(event.seq)
    admissions = stored.admissions[sid]
    assert users_by_admission.keys() <= admissions.keys(), f"{sid}: users of no admission"
    for admission_id, users_seqs in admissions.items():
        assert sorted(users_seqs) == users_by_admission.get(admission_id, []), (
            f"{sid}: admission {admission_id} has users {users_seqs}, the log "
            f"{users_by_admission.get(admission_id, [])}"
        )
    return acked, committed, not_committed


async def audit_book(
    stub: api_grpc.AdmissionServiceAsyncStub,
    database_url: str,
    book: Book,
    *,
    concurrency: int = 8,
) -> AuditFigures:
    """Audit every session of ``book``; raises AssertionError on the first violation."""
    session_ids = list(book.sessions)
    stored = await stored_state(database_url, session_ids)
    figures = AuditFigures()
    limit = asyncio.Semaphore(concurrency)

    async def one(session: SessionBook) -> None:
        async with limit:
            log = await audit(stub, session.session_id)
            current = await stub.GetSession(api.GetSessionRequest(session_id=session.session_id))
        assert current.session.revision == stored.rows[session.session_id][0]
        acked, committed, not_committed = check_session(session, log.events, log.nodes, stored)
        figures.sessions += 1
        figures.events += len(log.events)
        figures.acked += acked
        figures.unknown_committed += committed
        figures.unknown_not_committed += not_committed

    await asyncio.gather(*(one(s) for s in book.sessions.values()))
    return figures


async def service_connections(database_url: str, application_name: str) -> int:
    """Connections the service holds to ``database_url``'s database right now."""
    database = make_url(database_url).database
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as connection:
        cursor = await connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = %s",
            (application_name, database),
        )
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


SETTLE_SECONDS = 30.0


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Returns once ``condition()`` holds (checked every 10 ms); fails naming ``what`` if it
    does not within ``SETTLE_SECONDS``. Only for state whose owner signals nothing (the
    SQLAlchemy pool's count, another process): wait on an event wherever there is one."""
    try:
        async with asyncio.timeout(SETTLE_SECONDS):
            while not condition():  # noqa: ASYNC110 - nothing to wait on but the state itself
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"{what}: not within {SETTLE_SECONDS} s") from None


async def idle_service_connections(database_url: str, application_name: str) -> int:
    """The service's connections once none of them is in a statement or a transaction (the
    server has finished every call, including cancelled ones still unwinding)."""
    database = make_url(database_url).database
    query = (
        "SELECT count(*), count(*) FILTER (WHERE state <> 'idle') FROM pg_stat_activity"
        " WHERE application_name = %s AND datname = %s"
    )
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as connection:
        counts = (0, 0)

        async def refresh() -> bool:
            nonlocal counts
            row = await (await connection.execute(query, (application_name, database))).fetchone()
            assert row is not None
            counts = (int(row[0]), int(row[1]))
            return counts[1] == 0

        try:
            async with asyncio.timeout(SETTLE_SECONDS):
                while not await refresh():  # noqa: ASYNC110 - another process's state
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"{counts[1]} service connections still busy") from None
        return counts[0]


async def committed_request_ids(database_url: str, request_ids: list[str]) -> set[str]:
    """Which of ``request_ids`` have a stored response (their call committed)."""
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as connection:
        cursor = await connection.execute(
            "SELECT request_id FROM idempotency_keys WHERE tenant_id = %s AND request_id = ANY(%s)",
            (TENANT, request_ids),
        )
        return {row[0] for row in await cursor.fetchall()}


def check_unknown_against_keys(book: Book, committed: set[str]) -> None:
    """Run after ``audit_book``: a call whose outcome was never learned committed its messages
    exactly when its response was stored (the idempotency record is written in the same
    transaction as the effect)."""
    for effect in book.effects():
        if effect.acked or not effect.texts:
            continue
        assert effect.found is not None, "audit_book first"
        assert effect.found == (effect.request_id in committed), (
            f"{effect.method} {effect.request_id}: messages committed {effect.found}, "
            f"response stored {effect.request_id in committed}"
        )
