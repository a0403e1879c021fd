"""Record: what the model and the tools produced, through the domain's transition
(``domain/recording.py``); also an Admit's previous output, in the Admit's unit of work."""

from __future__ import annotations

from admission_service.app import validation
from admission_service.app.commands import Idempotency, RecordCommand, RecordResult
from admission_service.app.deps import Deps
from admission_service.app.hooks import Phase
from admission_service.app.ledger import usage_json
from admission_service.app.pricing import session_counter, write_priced
from admission_service.app.unit_of_work import Call, Reply, UnitOfWork, runs_again_if_moved
from admission_service.domain import recording
from admission_service.domain.accounting import TokenCounter
from admission_service.domain.errors import AdmissionNotFound
from admission_service.domain.session import Session
from admission_service.storage import codec


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
        session = uow.load(command.expected_revision)
        _, result = await record_output(uow, session, command)
        return await uow.commit(result)


async def record_output(
    uow: UnitOfWork, session: Session, command: RecordCommand, ahead: TokenCounter | None = None
) -> tuple[Session, RecordResult]:
    """Record's transition in ``uow`` (Record, and an Admit's previous_output): the session it
    leaves, from which a transition after it in the same transaction starts, and its result.
    ``ahead``: a counter holding counts made off the event loop (an Admit's), used when it is
    the session's (its route kept the family)."""
    admitted = await uow.sessions.admission(command.admission_id)
    if admitted is None:
        raise AdmissionNotFound(command.admission_id)
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
    was_open = await uow.sessions.mark_answered(outcome.answers(command.tool_results))
    recording.check_answered(command.tool_results, was_open)
    if command.usage is not None:
        usage = codec.dumps(usage_json(command.usage))
        await uow.sessions.observe_usage(admitted.admission_id, usage)
    await uow.reached(Phase.DERIVE)
    after = session.recorded(outcome.next_seq, written)
    await uow.sessions.save(after)
    return after, RecordResult(after.revision, outcome.assistant_seq, outcome.tool_result_seqs)
