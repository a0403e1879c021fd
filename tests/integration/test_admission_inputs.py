"""An admission's prompt and tool set are stored once per session (migration 0011), on real
PostgreSQL: a harness that sends them unchanged step after step, on one worker (its session
cache knows they are stored) or on several (each finds them by digest), leaves one body of
each, and every admission reads back its own inputs for a Reconcile."""

from __future__ import annotations

from admission_service.app import handlers
from admission_service.app.commands import AdmitCommand, AttemptResult, ReconcileCommand
from admission_service.app.deps import Deps
from admission_service.domain.messages import Tool
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.app_support import ROUTE, user
from tests.integration.workers import TENANT, new_session, worker

PROMPT = "You are a careful agent.\0 Ünïcode. " * 4_000  # ~150 KB, NUL included
TOOLS = tuple(
    Tool(f"tool_{n}", "does one thing " * 50, '{"type": "object", "properties": {}}')
    for n in range(40)
)


async def admit(
    deps: Deps, session_id: str, text_: str, prompt: str = PROMPT, tools: tuple[Tool, ...] = TOOLS
) -> AttemptResult:
    command = AdmitCommand(session_id, 1, 1, prompt, tools, ROUTE, users=(user(text_),))
    reply = await handlers.admit(deps, TENANT, command, None)
    assert reply.result is not None
    return reply.result


async def stored_bodies(engine: AsyncEngine, session_id: str) -> list[bytes]:
    async with engine.connect() as connection:
        result = await connection.execute(
            text(
                "SELECT body FROM admission_inputs WHERE tenant_id = :t AND session_id = :s"
                " ORDER BY body"
            ),
            {"t": TENANT, "s": session_id},
        )
        return [bytes(body) for (body,) in result]


async def reconciled_inputs(deps: Deps, session_id: str, admission_id: str) -> tuple[str, int]:
    """The prompt in force and the tool count a Reconcile of ``admission_id`` derives with."""
    command = ReconcileCommand(session_id, admission_id, ROUTE, validate_only=True)
    reply = await handlers.reconcile(deps, TENANT, command, None)
    assert reply.result is not None
    request = reply.result.request
    return reply.result.effective_prompt.text, len(request.tools)


async def test_unchanged_inputs_are_stored_once_on_one_worker_and_across_workers(
    engine: AsyncEngine,
) -> None:
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    first = await admit(a, sid, "one")
    for number in range(4):  # warm steps on a: its cache knows the inputs are stored
        await admit(a, sid, f"a{number}")
    for number in range(3):  # b has no cache entry: it sends them, and finds them stored
        await admit(b, sid, f"b{number}")
    bodies = await stored_bodies(engine, sid)
    assert len(bodies) == 2
    assert PROMPT.encode() in bodies
    assert await reconciled_inputs(a, sid, first.admission_id) == (PROMPT, len(TOOLS))


async def test_a_changed_input_is_stored_beside_the_old_and_each_admission_reads_its_own(
    engine: AsyncEngine,
) -> None:
    a = worker(engine)
    sid = await new_session(a)
    first = await admit(a, sid, "one")
    changed = await admit(a, sid, "two", prompt="be thorough", tools=TOOLS[:3])
    back = await admit(a, sid, "three")  # the first prompt and tools again: stored already
    assert len(await stored_bodies(engine, sid)) == 4  # two prompts, two tool sets
    assert await reconciled_inputs(a, sid, changed.admission_id) == ("be thorough", 3)
    fresh = worker(engine)  # reads each admission through the digests, no cache
    assert await reconciled_inputs(fresh, sid, first.admission_id) == (PROMPT, len(TOOLS))
    assert await reconciled_inputs(fresh, sid, back.admission_id) == (PROMPT, len(TOOLS))


async def test_the_same_inputs_in_another_session_are_that_session_s_own(
    engine: AsyncEngine,
) -> None:
    """Bodies are per session (so a session's rows stay in its shard, and go with it)."""
    a = worker(engine)
    kept, doomed = await new_session(a), await new_session(a)
    await admit(a, kept, "one")
    await admit(a, doomed, "one")
    await handlers.delete_session(a, TENANT, doomed, None, None)
    assert len(await stored_bodies(engine, kept)) == 2
    assert await stored_bodies(engine, doomed) == []
