"""Admit and Reconcile: an attempt of a step through the domain's transition, its events
written, its derived request built and its forecast made."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace

from admission_service.app import validation
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    Idempotency,
    ReconcileCommand,
    RecordResult,
    RouteRequest,
)
from admission_service.app.derivation import Derivation, request_key
from admission_service.app.hooks import Phase
from admission_service.app.machinery import Reply, session_counter, write_outcome
from admission_service.app.rows import forecast_json
from admission_service.app.unit_of_work import Call, UnitOfWork
from admission_service.app.use_cases.record import Recording
from admission_service.domain import admission as rules
from admission_service.domain import codec
from admission_service.domain.accounting import (
    PreviousRequest,
    TokenCounter,
    forecast_totals,
    message_tokens,
)
from admission_service.domain.catalog import resolve_route
from admission_service.domain.errors import AdmissionNotFound, fields_under
from admission_service.domain.series import Route
from admission_service.domain.session import FramesQuery, RequestSelection
from admission_service.domain.surface import effective_prompt, fold_system_nodes
from admission_service.domain.wire import WireFormat
from admission_service.tokenizers import counter_for, load_off_the_loop

# What starting an attempt gives: the attempt, its number (0: the admission), the output an
# Admit recorded first (its previous_output), if any.
_Begun = tuple[rules.Attempt, int, RecordResult | None]


class Admission(Recording, Derivation):
    """Admit and Reconcile: one attempt of a step, first or retried."""

    def _route(self, route: RouteRequest) -> Route:
        return resolve_route(
            self.catalog,
            provider=route.provider,
            model=route.model,
            context_window=route.context_window,
            system_prompt_update=route.system_prompt_update,
            tool_update=route.tool_update,
        )

    async def admit(
        self,
        tenant: str,
        command: AdmitCommand,
        idempotency: Idempotency | None,
    ) -> Reply[AttemptResult]:
        validation.check_admit(command, self.limits)
        output = command.previous_output
        if output is not None:
            with fields_under("previous_output"):
                validation.check_record(output, self.limits)

        async def begin(tx: UnitOfWork, route: Route) -> _Begun:
            recorded = None
            if output is not None:
                # One call per step: Record's transition, then Admit's, in this one transaction.
                # Its writes go with the next read (the frames', one round trip).
                with fields_under("previous_output"):
                    recorded = await self._record_output(tx, output)
            attempt = rules.Attempt(
                admission_id="" if tx.validate_only else uuid.uuid4().hex,
                turn=command.turn,
                step=command.step,
                rendered_prompt=command.rendered_prompt,
                tools=command.tools,
                route=route,
                starts_request_series=command.starts_request_series,
                users=command.users,
                resume=command.resume,
                config=command.config,
            )
            return attempt, 0, recorded

        reads = output.admission_id if output is not None else None
        calls = output.call_ids if output is not None else ()
        return await self._step("Admit", tenant, command, idempotency, begin, reads, calls)

    async def reconcile(
        self,
        tenant: str,
        command: ReconcileCommand,
        idempotency: Idempotency | None,
    ) -> Reply[AttemptResult]:
        validation.check_reconcile(command, self.limits)

        async def begin(tx: UnitOfWork, route: Route) -> _Begun:
            admitted = await tx.store.admission(command.admission_id)
            if admitted is None:
                raise AdmissionNotFound(command.admission_id)
            attempt = rules.Attempt(
                admission_id=admitted.admission_id,
                turn=admitted.turn,
                step=admitted.step,
                rendered_prompt=admitted.rendered_prompt,
                tools=admitted.tools,
                route=route,
                # A retry keeps the configuration in force (that of the session's last header).
                config=last.header.config if (last := tx.record.series.last_header) else (),
            )
            return attempt, admitted.attempts, None

        return await self._step(
            "Reconcile", tenant, command, idempotency, begin, command.admission_id
        )

    async def _step(
        self,
        method: str,
        tenant: str,
        command: AdmitCommand | ReconcileCommand,
        idempotency: Idempotency | None,
        begin: Callable[[UnitOfWork, Route], Awaitable[_Begun]],
        reads_admission: str | None,
        reads_calls: tuple[str, ...] = (),
    ) -> Reply[AttemptResult]:
        """The one path of an attempt, first (Admit) or retried (Reconcile): ``begin`` makes
        the attempt, its number and (Admit) the previous output it recorded; the domain's
        transition, the writes, the derived request and the ledger row follow.
        ``reads_admission``, ``reads_calls``: the admission and the tool call ids ``begin``
        reads, fetched with the session's lock."""
        first = method == "Admit"
        route = self._route(command.route)
        await load_off_the_loop(route.provider)

        async def work(tx: UnitOfWork) -> AttemptResult:
            attempt, number, recorded = await begin(tx, route)
            await tx.reached(Phase.VALIDATE)
            result = await self._attempt(
                tx, attempt, number, command.wire_format, command.selection, first=first
            )
            if not tx.validate_only:
                if first:
                    await tx.store.add_admission(
                        attempt.admission_id,
                        attempt.turn,
                        attempt.step,
                        attempt.rendered_prompt,
                        attempt.tools,
                        result.user_seqs,
                    )
                else:
                    await tx.store.count_attempt(attempt.admission_id)
                await self._add_request(tx, attempt.admission_id, number, result)
            return result if recorded is None else replace(result, recorded=recorded)

        call = Call(
            method,
            tenant,
            command.session_id,
            idempotency,
            command.validate_only,
            admission_id=reads_admission,
            tool_call_ids=reads_calls,
        )
        return await self._mutate(call, command.expected_revision, work)

    async def _attempt(
        self,
        tx: UnitOfWork,
        attempt: rules.Attempt,
        number: int,
        wire: WireFormat,
        selection: RequestSelection,
        *,
        first: bool,
    ) -> AttemptResult:
        counter = counter_for(attempt.route.provider)
        if tx.record.surface_nodes and session_counter(tx.record).name != counter.name:
            await self._reprice(tx, counter)
        record = tx.record
        # One statement reads the system nodes and the frames the request needs if this attempt
        # shadows nothing (the usual case); a replacement reads the frames again below.
        planned = FramesQuery.plan(record, record.shadowed, selection, wire)
        system_nodes, early, open_calls = await tx.store.system_nodes_and_frames(
            planned.from_position, planned.split_position
        )
        state = rules.AdmissionState(record.next_seq, system_nodes, record.series, open_calls)
        outcome = rules.admit(state, attempt) if first else rules.reconcile(state, attempt)
        await tx.reached(Phase.PROJECT)
        written = await write_outcome(tx.store, record, outcome.events, counter)
        shadowed = record.shadowed_with(written)
        key = request_key(attempt.route, attempt.tools, counter)
        derived = await self._derive(
            tx.store,
            record,
            attempt.route,
            attempt.tools,
            wire,
            shadowed,
            selection,
            end_position=written.next_position,
            tail=written.tail,
            read=early if written.shadowed is None else None,
        )
        predicted = forecast_totals(
            record.last_request, key, derived.totals, starts_series=outcome.starts_series
        )
        after = record.admitted(
            len(outcome.events),
            written,
            outcome.series,
            PreviousRequest(key, derived.totals.messages),
            derived.prefix,
        )
        await tx.store.save(after)
        prompt = effective_prompt(fold_system_nodes(system_nodes, outcome.events))
        await tx.reached(Phase.DERIVE)
        return AttemptResult(
            admission_id=attempt.admission_id,
            attempt=number,
            revision=record.revision if tx.validate_only else after.revision,
            commits=outcome.commits,
            user_seqs=outcome.user_seqs,
            header=outcome.header,
            context=outcome.context,
            starts_series=outcome.starts_series,
            request=derived.view,
            effective_prompt=prompt,
            forecast=predicted,
            route=attempt.route,
            log_seq=after.next_seq,
        )

    @staticmethod
    async def _reprice(tx: UnitOfWork, counter: TokenCounter) -> None:
        """A change of route family (another tokenizer): price every surviving node again with
        the new route's tokenizer, so the breakdown, ``retain_tokens``, the summary-size rule
        and the forecast never mix two tokenizers. Costs one pass over the surface, once per
        change of family; leaves ``tx.record`` with the new running price and prefix price."""
        record = tx.record
        rows = await tx.store.surface(with_empty=False)
        prices = [(row.seq, message_tokens(row.decoded(), counter)) for row in rows]
        await tx.store.reprice(prices)
        end = record.prefix.end_position if record.prefix is not None else 0
        tx.record = record.repriced(
            surface_tokens=sum(price for _, price in prices),
            prefix_tokens=sum(
                price for row, (_, price) in zip(rows, prices, strict=True) if row.position < end
            ),
        )

    async def _add_request(
        self, tx: UnitOfWork, admission_id: str, attempt: int, result: AttemptResult
    ) -> None:
        # The ledger row keeps the request's log position beside its forecast (ListTrajectory
        # folds the log up to it); rows written before it existed have none. The provider says
        # how to read the usage recorded later, for the calibration Inspect reports.
        stored = {
            **forecast_json(result.forecast),
            "log_seq": result.log_seq,
            "provider": result.route.provider,
        }
        await tx.store.add_request(
            tx.record.request_count, admission_id, attempt, codec.dumps(stored)
        )
