"""Every statement a session's calls send is routed to a single shard on the cluster.

The real server (in-process) runs a session through every RPC on a distributed database while
a SQLAlchemy cursor listener records each statement it sends with its parameters (the raw
psycopg statements fire the same event). Each is then EXPLAINed on the coordinator with those
parameters: every statement of every per-session RPC must be a Citus router plan — one task,
on the one worker holding the session's shard group. ``ListSessions`` is the one RPC that
fans out (a read of one tenant's sessions on every shard). Background tasks (the idempotency
key sweeper) are not calls and are not recorded.

A statement with data-modifying CTEs (the deferred writes sent at commit) is planned by Citus
as one subplan per CTE, each itself a single-shard task on the same worker: still one shard
group and no two-phase commit, but one coordinator-to-worker round trip per part. The test
counts them (``subplans``). With ``PAS_CITUS_PLANS`` set, the statements, their plans and
that summary are written there (the excerpts in docs/SCALING.md come from it).
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from admission_service.storage.distribution import REFERENCE_TABLES
from admission_service.storage.engine import libpq_url
from admission_service.storage.tables import Base
from promptadmission.v1 import admission_service_pb2 as api
from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests.api.support import IN_HISTORY_ROUTE, start_client, user
from tests.citus.cluster import CitusCluster
from tests.reliability.harness import assistant, tool_result

TABLES = re.compile(r"\b(" + "|".join(Base.metadata.tables) + r")\b")
TASK_COUNT = re.compile(r"Task Count: (\d+)")
NODE = re.compile(r"Node: host=\S+ port=(\d+)")
BACKGROUND_TASKS = {"idempotency-sweeper"}


@dataclass
class Sent:
    rpc: str
    sql: str
    params: Any


class Recorder:
    """Statements the service sends on any engine, labelled with the RPC running."""

    def __init__(self) -> None:
        self.rpc = ""
        self.sent: list[Sent] = []

    def __call__(self, conn: Any, cursor: Any, sql: str, params: Any, *args: Any) -> None:
        task = asyncio.current_task()
        if task is not None and task.get_name() in BACKGROUND_TASKS:
            return
        if self.rpc and TABLES.search(sql):
            self.sent.append(Sent(self.rpc, sql, params))

    @contextmanager
    def listening(self) -> Iterator[None]:
        event.listen(Engine, "before_cursor_execute", self)
        try:
            yield
        finally:
            event.remove(Engine, "before_cursor_execute", self)

    async def during(self, rpc: str, call: Callable[[], Awaitable[Any]]) -> Any:
        self.rpc = rpc
        try:
            return await call()
        finally:
            self.rpc = ""


def explain(url: str, sent: Sent) -> str:
    """The coordinator's plan for ``sent`` (nothing is executed: EXPLAIN without ANALYZE)."""
    with psycopg.connect(libpq_url(url)) as connection:
        # The flush statement uses $n placeholders (a raw cursor), the others psycopg's.
        cursor_class = psycopg.RawCursor if "$1" in sent.sql else psycopg.Cursor
        with cursor_class(connection) as cursor:
            cursor.execute(f"EXPLAIN (COSTS OFF) {sent.sql}".encode(), sent.params)
            return "\n".join(row[0] for row in cursor.fetchall())


async def drive_one_session(recorder: Recorder, stub: Any) -> None:
    sid = f"plans-{uuid.uuid4().hex}"
    r = recorder.during
    await r("CreateSession", lambda: stub.CreateSession(api.CreateSessionRequest(session_id=sid)))

    def admit(turn: int, prompt: str, users: int = 1) -> Callable[[], Awaitable[Any]]:
        request = api.AdmitRequest(
            session_id=sid,
            request_id=str(uuid.uuid4()),
            turn=turn,
            rendered_prompt=prompt,
            route=IN_HISTORY_ROUTE,
            users=[user(f"question {turn}.{n}") for n in range(users)],
        )
        return lambda: stub.Admit(request)

    first = await r("Admit", admit(0, "You are a coding agent."))
    await r(
        "Record",
        lambda: stub.Record(
            api.RecordRequest(
                session_id=sid,
                request_id=str(uuid.uuid4()),
                admission_id=first.admission_id,
                assistant=assistant("let me look", "call-1"),
            )
        ),
    )
    await r(
        "Record",
        lambda: stub.Record(
            api.RecordRequest(
                session_id=sid,
                request_id=str(uuid.uuid4()),
                admission_id=first.admission_id,
                tool_results=[tool_result("call-1", "file contents")],
            )
        ),
    )
    # Past a chunk's worth of positions: a FULL Admit's commit seals them (frame_chunks.py),
    # and the next ones read the chunks.
    for turn in range(2, 9):
        await r("Admit", admit(turn, "You are a coding agent.", users=50))
    second = await r("Admit", admit(1, "You are a coding agent. Plan mode."))
    await r(
        "Reconcile",
        lambda: stub.Reconcile(
            api.ReconcileRequest(
                session_id=sid,
                request_id=str(uuid.uuid4()),
                admission_id=second.admission_id,
                route=IN_HISTORY_ROUTE,
            )
        ),
    )
    await r("GetSession", lambda: stub.GetSession(api.GetSessionRequest(session_id=sid)))
    await r("Inspect", lambda: stub.Inspect(api.InspectRequest(session_id=sid)))
    await r("ListEvents", lambda: stub.ListEvents(api.ListEventsRequest(session_id=sid)))
    plan = await r(
        "PlanCompaction",
        lambda: stub.PlanCompaction(api.PlanCompactionRequest(session_id=sid, retain_tokens=0)),
    )
    await r(
        "Compact",
        lambda: stub.Compact(
            api.CompactRequest(
                session_id=sid,
                request_id=str(uuid.uuid4()),
                plan_token=plan.plan_token,
                summary="summary",
            )
        ),
    )
    await r("ListSessions", lambda: stub.ListSessions(api.ListSessionsRequest(page_size=10)))
    await r(
        "DeleteSession",
        lambda: stub.DeleteSession(
            api.DeleteSessionRequest(session_id=sid, request_id=str(uuid.uuid4()))
        ),
    )


async def test_every_per_session_statement_is_a_single_shard_router_plan(
    cluster: CitusCluster, database_url: str
) -> None:
    recorder = Recorder()
    client = await start_client(database_url)
    try:
        with recorder.listening():
            await drive_one_session(recorder, client.stub)
    finally:
        await client.close()

    workers = {str(worker.port) for worker in cluster.workers}
    report = []
    summary: dict[str, list[int]] = {}  # rpc -> [statements, subplans]
    fan_out: dict[str, int] = {}
    routed: dict[str, set[str]] = {}
    for sent in recorder.sent:
        plan = explain(database_url, sent)
        report.append(f"-- {sent.rpc}\n{sent.sql}\n{plan}\n")
        counts = summary.setdefault(sent.rpc, [0, 0])
        counts[0] += 1
        counts[1] += plan.count("Distributed Subplan")
        tasks = [int(n) for n in TASK_COUNT.findall(plan)]
        assert tasks, f"{sent.rpc}: not a distributed plan:\n{sent.sql}\n{plan}"
        if sent.rpc == "ListSessions":
            fan_out[sent.sql] = max(tasks)
            continue
        if set(TABLES.findall(sent.sql)) <= REFERENCE_TABLES:
            # The page-token keys, read once by a process's first paged call: a reference
            # table, replicated to every node, so one task on any of them.
            assert tasks == [1], f"{sent.rpc}: a reference read fans out:\n{sent.sql}\n{plan}"
            continue
        assert tasks == [1] * len(tasks), f"{sent.rpc} is not single-shard:\n{sent.sql}\n{plan}"
        nodes = set(NODE.findall(plan))
        assert len(nodes) == 1 and nodes <= workers, f"{sent.rpc}: routed to {nodes}"
        routed.setdefault(sent.rpc, set()).update(nodes)

    out = os.environ.get("PAS_CITUS_PLANS", "").strip()
    if out:
        lines = [
            f"{rpc}: {n} statements, {subplans} subplans" for rpc, (n, subplans) in summary.items()
        ]
        Path(out).write_text("\n".join(["-- summary", *lines, "", *report]))
    rpcs = {sent.rpc for sent in recorder.sent}
    assert rpcs >= {"CreateSession", "Admit", "Record", "Reconcile", "Compact", "DeleteSession"}
    # One session: every call of it went to the same worker.
    assert len(set().union(*routed.values())) == 1, routed
    assert fan_out and min(fan_out.values()) > 1, "ListSessions should read every shard"
