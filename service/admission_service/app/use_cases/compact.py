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
from admission_service.app.hooks import Phase
from admission_service.app.machinery import (
    Machinery,
    Reply,
    session_counter,
    write_outcome,
)
from admission_service.app.page_tokens import Shape
from admission_service.app.ports import SessionRepository, SurfaceNode
from admission_service.app.unit_of_work import Call, UnitOfWork
from admission_service.domain import admission as rules
from admission_service.domain.compaction import (
    CompactionNode,
    compact,
    compaction_node,
    plan_by_tokens,
    plan_range,
    summarization_input,
)
from admission_service.domain.errors import NothingToCompact, StaleCompactionPlan
from admission_service.domain.projection import SystemNode
from admission_service.domain.session import Session
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


class Compaction(Machinery):
    """PlanCompaction and Compact."""

    async def plan_compaction(self, tenant: str, command: PlanCompactionCommand) -> PlanResult:
        validation.check_plan(command, self.limits)
        scope = f"compaction/{tenant}/{command.session_id}"

        async def plan(store: SessionRepository, record: Session) -> PlanResult:
            nodes = _compaction_nodes(await store.surface())
            if command.seq_range is not None:
                selected = plan_range(nodes, *command.seq_range)
            else:
                assert command.retain_tokens is not None
                found = plan_by_tokens(nodes, command.retain_tokens)
                if found is None:
                    raise NothingToCompact()
                selected = found
            token = self.page_tokens.encode(
                scope,
                {
                    "start": selected.start_seq,
                    "end": selected.end_seq,
                    "generation": record.series.replace_generation,
                    "next_seq": record.next_seq,
                },
            )
            header = record.series.last_header
            to_summarize = summarization_input(nodes, selected)
            bounds.check_summarization_input_size(
                sum(len(codec.frame(message)) for message in to_summarize), self.limits
            )
            return PlanResult(
                token,
                selected,
                to_summarize,
                header.header.tools if header else (),
                record.revision,
            )

        return await self._read_session(tenant, command.session_id, plan)

    async def compact(
        self,
        tenant: str,
        command: CompactCommand,
        idempotency: Idempotency | None,
    ) -> Reply[CompactResult]:
        validation.check_compact(command, self.limits)
        scope = f"compaction/{tenant}/{command.session_id}"
        token = self.page_tokens.decode(scope, command.plan_token, "plan_token", _PLAN)

        async def work(tx: UnitOfWork) -> CompactResult:
            record = tx.record
            if (token["generation"], token["next_seq"]) != (
                record.series.replace_generation,
                record.next_seq,
            ):
                raise StaleCompactionPlan()
            rows = await tx.store.surface()
            nodes = _compaction_nodes(rows)
            selected = plan_range(nodes, token["start"], token["end"])
            state = rules.AdmissionState(record.next_seq, _system_nodes(nodes), record.series)
            await tx.reached(Phase.VALIDATE)
            counter = session_counter(record)
            outcome = compact(state, selected, command.summary, counter=counter)
            await tx.reached(Phase.PROJECT)
            written = await write_outcome(tx.store, record, outcome.events, counter)
            prompt = effective_prompt(await tx.store.system_nodes())
            await tx.reached(Phase.DERIVE)
            after = record.compacted(len(outcome.events), written, outcome.series)
            await tx.store.save(after)
            return CompactResult(
                after.revision, outcome.summary_seq, selected.shadowed_seqs, outcome.commits, prompt
            )

        call = Call("Compact", tenant, command.session_id, idempotency)
        return await self._mutate(call, command.expected_revision, work)
