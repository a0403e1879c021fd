"""Record: what the model and the tools produced, through the domain's transition
(``domain/recording.py``); also an Admit's previous output, in the Admit's unit of work."""

from __future__ import annotations

from admission_service.app import validation
from admission_service.app.commands import Idempotency, RecordCommand, RecordResult
from admission_service.app.deps import Deps
from admission_service.app.hooks import Phase
from admission_service.app.ledger import usage_json
from admission_service.app.pricing import followed, session_counter, write_priced
from admission_service.app.unit_of_work import Call, Reply, UnitOfWork, runs_again_if_moved
from admission_service.domain import recording
from admission_service.domain.accounting import TokenCounter
from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.errors import AdmissionNotFound
from admission_service.domain.stored import AdmissionRecord


@runs_again_if_moved
async def record(
    deps: Deps, tenant: str, command: RecordCommand, idempotency: Idempotency | None
) -> Reply[RecordResult]:
    validation.check_record(command, deps.limits)
    call = Call(
        "Record",
        tenant,
        command.session_id,
        idempotency,
        admission_id=command.admission_id,
        tool_call_ids=command.call_ids,
    )
    async with UnitOfWork(deps, call) as uow:
        if (replayed := await uow.replayed()) is not None:
            return replayed
        loaded = uow.load(command.expected_revision)
        after, result = await record_output(uow, loaded, command)
        await uow.sessions.save(after)
        return await uow.commit(result)


async def admission_of(
    uow: UnitOfWork, aggregate: SessionAggregate, admission_id: str
) -> AdmissionRecord:
    """The admission ``admission_id`` of the session: the aggregate's last, or read."""
    admitted = aggregate.admission_named(admission_id) or await uow.sessions.admission(admission_id)
    if admitted is None:
        raise AdmissionNotFound(admission_id)
    return admitted


async def record_output(
    uow: UnitOfWork,
    aggregate: SessionAggregate,
    command: RecordCommand,
    ahead: TokenCounter | None = None,
) -> tuple[SessionAggregate, RecordResult]:
    """Record's transition in ``uow`` (Record, and an Admit's previous_output): the aggregate
    it leaves (not saved: a transition after it in the same transaction starts from it) and
    its result. ``ahead``: a counter holding counts made off the event loop (an Admit's), used
    when it is the session's (its route kept the family)."""
    admitted = await admission_of(uow, aggregate, command.admission_id)
    session = aggregate.session
    calls = command.call_ids
    outcome = recording.record(
        session.next_seq,
        recording.Admitted(admitted.admission_id, admitted.turn, admitted.step),
        command.assistant,
        command.tool_results,
        taken_call_ids=await uow.sessions.known_tool_calls(calls) if calls else (),
    )
    await uow.reached(Phase.VALIDATE)
    await uow.reached(Phase.PROJECT)
    counter = session_counter(session)
    if ahead is not None and ahead == counter:
        counter = ahead
    written = await write_priced(uow.sessions, session, outcome.events, counter)
    aggregate = await followed(uow.sessions, aggregate, outcome.events, written)
    aggregate = await _answer(uow, aggregate, command, outcome)
    if command.usage is not None:
        await uow.sessions.observe_usage(admitted.admission_id, usage_json(command.usage))
    await uow.reached(Phase.DERIVE)
    after = session.recorded(outcome.next_seq, written)
    result = RecordResult(after.revision, outcome.assistant_seq, outcome.tool_result_seqs)
    return aggregate.saved(after), result


async def _answer(
    uow: UnitOfWork,
    aggregate: SessionAggregate,
    command: RecordCommand,
    outcome: recording.RecordOutcome,
) -> SessionAggregate:
    """The tool results' calls closed. When the aggregate knows every one is open, the answers
    are written and nothing is read; otherwise the database says which were open, and the
    domain refuses what was not."""
    answers = outcome.answers(command.tool_results)
    closed = aggregate.answered(call_id for call_id, _ in answers)
    if closed is not None:
        recording.check_answered(command.tool_results, {call_id: True for call_id, _ in answers})
        await uow.sessions.close_calls(answers)
        return closed
    was_open = await uow.sessions.mark_answered(answers)
    recording.check_answered(command.tool_results, was_open)
    # The aggregate did not know a call the database found open (a cached value behind it:
    # the commit will find it moved): what the answers left is read.
    return aggregate.reread(*await uow.sessions.system_nodes_and_open_calls())
