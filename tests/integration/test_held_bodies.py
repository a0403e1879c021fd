"""A worker's held bodies (app/held_bodies.py) on real PostgreSQL, with two workers on one
session: the FULL body a worker continues from its held one (reading only the frames after the
previous request, through its session cache and held frames) is the body rendered from every
stored frame, and a worker whose held body is of an earlier request (the other worker stepped
since) renders afresh. Run on Citus too (``make citus-test``)."""

from __future__ import annotations

import contextlib
import random

import pytest
from admission_service.app import handlers
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    CompactCommand,
    PlanCompactionCommand,
    RecordCommand,
)
from admission_service.app.deps import Deps
from admission_service.app.held_bodies import HELD_BODY_MIN
from admission_service.domain.errors import NothingToCompact, SummaryNotSmaller
from admission_service.domain.messages import Message, Role, Text
from admission_service.domain.wire import WireFormat
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.app_support import ROUTE, user
from tests.integration.workers import TENANT, new_session, worker

FORMATS = [WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES, WireFormat.ANTHROPIC_MESSAGES]


class Steps:
    """A harness's steps on one session, each on the worker it is sent to."""

    def __init__(self, sid: str, wire: WireFormat) -> None:
        self.sid, self.wire = sid, wire
        self.turn = 0
        self.admission_id = ""

    async def admit(self, deps: Deps, text: str, *, answered: bool = True) -> AttemptResult:
        self.turn += 1
        output = None
        if answered and self.admission_id:
            answer = Message(Role.ASSISTANT, (Text(f"answer {self.turn}"),))
            output = RecordCommand(self.sid, self.admission_id, answer)
        command = AdmitCommand(
            self.sid,
            self.turn,
            1,
            "be brief",
            (),
            ROUTE,
            (user(text),),
            wire_format=self.wire,
            previous_output=output,
        )
        reply = await handlers.admit(deps, TENANT, command, None)
        assert reply.result is not None
        self.admission_id = reply.result.admission_id
        return reply.result

    async def afresh(self, deps: Deps) -> str:
        """The session's FULL body rendered from every stored frame (Inspect)."""
        return (await handlers.inspect(deps, TENANT, self.sid, self.wire)).request.body_json


@pytest.mark.parametrize("wire", FORMATS)
async def test_two_workers_never_send_a_body_of_another_request(
    engine: AsyncEngine, wire: WireFormat
) -> None:
    """Forty seeded steps sent to one worker or the other (as a balancer without affinity
    would), some merging into the held turn, some after a compaction: every body equals the
    one rendered afresh, and a worker continued its held body only while it was the previous
    request's."""
    workers = worker(engine), worker(engine)
    sid = await new_session(workers[0])
    steps = Steps(sid, wire)
    rng = random.Random(7)
    await steps.admit(workers[0], "x" * HELD_BODY_MIN)
    last = 0
    continued = 0
    for number in range(40):
        at = rng.choice((0, 0, 1))  # mostly the same worker, as with affinity
        deps = workers[at]
        if rng.random() < 0.07:
            plan = await handlers.plan_compaction(
                deps, TENANT, PlanCompactionCommand(sid, retain_tokens=rng.randint(0, 40))
            )
            with contextlib.suppress(NothingToCompact, SummaryNotSmaller):
                await handlers.compact(
                    deps, TENANT, CompactCommand(sid, plan.plan_token, "summary"), None
                )
        used = deps.bodies.used
        result = await steps.admit(deps, f"step {number} " * 1200, answered=rng.random() < 0.8)
        assert result.request.body_json == await steps.afresh(deps), number
        if deps.bodies.used > used:
            continued += 1
            assert at == last, "a worker continued a body of an earlier request"
        last = at
    assert continued >= 10


async def test_a_worker_behind_renders_afresh(engine: AsyncEngine) -> None:
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    steps = Steps(sid, WireFormat.ANTHROPIC_MESSAGES)
    await steps.admit(a, "x" * HELD_BODY_MIN)
    await steps.admit(a, "second")
    assert a.bodies.used == 1
    await steps.admit(b, "on the other worker")
    assert b.bodies.used == 0  # b held nothing of this session
    result = await steps.admit(a, "back")
    assert a.bodies.used == 1  # its body is of the request before b's
    assert result.request.body_json == await steps.afresh(a)
    again = await steps.admit(a, "and again")
    assert a.bodies.used == 2
    assert again.request.body_json == await steps.afresh(b)
