"""Compaction: planning (a read) and compacting with the plan's token (a mutation)."""

from __future__ import annotations

from collections.abc import Sequence

from admission_service.app import bounds, validation
from admission_service.app.commands import (
    CompactCommand,
    CompactResult,
    Idempotency,
    PlanCompactionCommand,
    PlanResult,
)
from admission_service.app.deps import Deps
from admission_service.app.hooks import Phase
from admission_service.app.page_tokens import Shape
from admission_service.app.ports import SurfaceNode
from admission_service.app.pricing import followed, session_counter, write_priced
from admission_service.app.snapshot import snapshot
from admission_service.app.unit_of_work import Call, Reply, UnitOfWork, runs_again_if_moved
from admission_service.domain import admission as rules
from admission_service.domain.compaction import (
    CompactionNode,
    compaction_node,
    plan_by_tokens,
    plan_range,
    summarization_input,
)
from admission_service.domain.compaction import (
    compact as compact_rule,
)
from admission_service.domain.errors import NothingToCompact, StaleCompactionPlan
from admission_service.domain.projection import SystemNode
from admission_service.domain.surface import effective_prompt
from admission_service.storage import codec

# What a plan token binds: the selected range and the session state it was planned on.
_PLAN: Shape = {"generation": int, "next_seq": int, "start": int, "end": int}


def _compaction_nodes(rows: Sequence[SurfaceNode]) -> list[CompactionNode]:
    return [compaction_node(row.seq, row.tokens, row.is_system, row.decoded()) for row in rows]


def _system_nodes(nodes: list[CompactionNode]) -> tuple[SystemNode, ...]:
    return tuple(
        SystemNode(node.seq, node.message.text if node.message else "")
        for node in nodes
        if node.is_system
    )


async def plan_compaction(deps: Deps, tenant: str, command: PlanCompactionCommand) -> PlanResult:
    validation.check_plan(command, deps.limits)
    scope = f"compaction/{tenant}/{command.session_id}"
    async with snapshot(deps, tenant, command.session_id) as (sessions, session):
        nodes = _compaction_nodes(await sessions.surface())
    if command.seq_range is not None:
        selected = plan_range(nodes, *command.seq_range)
    else:
        assert command.retain_tokens is not None
        found = plan_by_tokens(nodes, command.retain_tokens)
        if found is None:
            raise NothingToCompact()
        selected = found
    await deps.page_tokens.ready()
    token = deps.page_tokens.encode(
        scope,
        {
            "start": selected.start_seq,
            "end": selected.end_seq,
            "generation": session.series.replace_generation,
            "next_seq": session.next_seq,
        },
    )
    header = session.series.last_header
    to_summarize = summarization_input(nodes, selected)
    bounds.check_summarization_input_size(
        sum(len(codec.frame(message)) for message in to_summarize), deps.limits
    )
    return PlanResult(
        token, selected, to_summarize, header.header.tools if header else (), session.revision
    )


@runs_again_if_moved
async def compact(
    deps: Deps, tenant: str, command: CompactCommand, idempotency: Idempotency | None
) -> Reply[CompactResult]:
    validation.check_compact(command, deps.limits)
    scope = f"compaction/{tenant}/{command.session_id}"
    await deps.page_tokens.ready()
    token = deps.page_tokens.decode(scope, command.plan_token, "plan_token", _PLAN)
    async with UnitOfWork(deps, Call("Compact", tenant, command.session_id, idempotency)) as uow:
        if (replayed := await uow.replayed()) is not None:
            return replayed
        aggregate = uow.load(command.expected_revision)
        session = aggregate.session
        if (token["generation"], token["next_seq"]) != (
            session.series.replace_generation,
            session.next_seq,
        ):
            raise StaleCompactionPlan()
        nodes = _compaction_nodes(await uow.sessions.surface())
        selected = plan_range(nodes, token["start"], token["end"])
        state = rules.AdmissionState(session.next_seq, _system_nodes(nodes), session.series)
        await uow.reached(Phase.VALIDATE)
        counter = session_counter(session)
        outcome = compact_rule(state, selected, command.summary, counter=counter)
        await uow.reached(Phase.PROJECT)
        written = await write_priced(uow.sessions, session, outcome.events, counter)
        aggregate = await followed(uow.sessions, aggregate, outcome.events, written)
        prompt = effective_prompt(aggregate.system_nodes)
        await uow.reached(Phase.DERIVE)
        after = session.compacted(len(outcome.events), written, outcome.series)
        await uow.sessions.save(aggregate.saved(after))
        return await uow.commit(
            CompactResult(
                after.revision, outcome.summary_seq, selected.shadowed_seqs, outcome.commits, prompt
            )
        )
