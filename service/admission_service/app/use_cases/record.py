"""Record: the domain's transition (``domain/record.py``) in one unit of work."""

from __future__ import annotations

from admission_service.app import validation
from admission_service.app.commands import Idempotency, RecordCommand, RecordResult
from admission_service.app.hooks import Phase
from admission_service.app.machinery import (
    Machinery,
    Reply,
    session_counter,
    write_outcome,
)
from admission_service.app.rows import usage_json
from admission_service.app.unit_of_work import Call, UnitOfWork
from admission_service.domain import codec
from admission_service.domain import record as recording
from admission_service.domain.errors import AdmissionNotFound


class Recording(Machinery):
    """Record: what the model and the tools produced (also an Admit's previous output)."""

    async def record(
        self,
        tenant: str,
        command: RecordCommand,
        idempotency: Idempotency | None,
    ) -> Reply[RecordResult]:
        validation.check_record(command, self.limits)

        async def work(tx: UnitOfWork) -> RecordResult:
            return await self._record_output(tx, command)

        call = Call(
            "Record",
            tenant,
            command.session_id,
            idempotency,
            admission_id=command.admission_id,
            tool_call_ids=command.call_ids,
        )
        return await self._mutate(call, command.expected_revision, work)

    async def _record_output(self, tx: UnitOfWork, command: RecordCommand) -> RecordResult:
        """Record's transition inside ``tx`` (Record, and an Admit's previous_output). Leaves
        ``tx.record`` as the session row it saved, so a transition after it in the same
        transaction starts from there."""
        admitted = await tx.store.admission(command.admission_id)
        if admitted is None:
            raise AdmissionNotFound(command.admission_id)
        record = tx.record
        calls = command.call_ids
        outcome = recording.record(
            record.next_seq,
            recording.Admitted(admitted.admission_id, admitted.turn, admitted.step),
            command.assistant,
            command.tool_results,
            taken_call_ids=await tx.store.known_tool_calls(calls) if calls else (),
        )
        await tx.reached(Phase.VALIDATE)
        await tx.reached(Phase.PROJECT)
        written = await write_outcome(tx.store, record, outcome.events, session_counter(record))
        was_open = await tx.store.mark_answered(outcome.answers(command.tool_results))
        recording.check_answered(command.tool_results, was_open)
        if command.usage is not None:
            usage = codec.dumps(usage_json(command.usage))
            await tx.store.observe_usage(admitted.admission_id, usage)
        await tx.reached(Phase.DERIVE)
        tx.record = record.recorded(outcome.next_seq, written)
        await tx.store.save(tx.record)
        return RecordResult(tx.record.revision, outcome.assistant_seq, outcome.tool_result_seqs)
