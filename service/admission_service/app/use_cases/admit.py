"""Admit and Reconcile: an attempt of a step through the domain's transition, its events
written, its derived request built and its forecast made."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

from admission_service.app import bounds, validation
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    Idempotency,
    ReconcileCommand,
    RouteRequest,
)
from admission_service.app.deps import Deps
from admission_service.app.derivation import Derived, derive_request, plan_frames, request_key
from admission_service.app.hooks import Phase
from admission_service.app.ledger import forecast_json
from admission_service.app.pricing import counted_ahead, followed, session_counter, write_priced
from admission_service.app.unit_of_work import Call, Reply, UnitOfWork, runs_again_if_moved
from admission_service.app.use_cases.record import admission_of, record_output
from admission_service.domain import admission as rules
from admission_service.domain.accounting import (
    PreviousRequest,
    TokenCounter,
    counted_texts,
    forecast_totals,
    message_tokens,
)
from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.catalog import Catalog, resolve_route
from admission_service.domain.errors import fields_under
from admission_service.domain.series import Route
from admission_service.domain.stored import AdmissionRecord
from admission_service.domain.surface import effective_prompt
from admission_service.domain.wire import WireFormat
from admission_service.tokenizers import load_off_the_loop


@runs_again_if_moved
async def admit(
    deps: Deps, tenant: str, command: AdmitCommand, idempotency: Idempotency | None
) -> Reply[AttemptResult]:
    """The first attempt of a step; with ``previous_output``, Record's transition first, in
    the same transaction (one call per step)."""
    validation.check_admit(command, deps.limits)
    output = command.previous_output
    if output is not None:
        with fields_under("previous_output"):
            validation.check_record(output, deps.limits)
    # The new user messages are in every derived request (FULL or DELTA): a step too large to
    # return is refused before anything is counted or read.
    bounds.check_new_content_size(
        sum(len(text) for user in command.users for text in counted_texts(user.content)),
        deps.limits,
        streamed=command.delivery.streamed,
    )
    route = await _route(deps.catalog, command.route)
    # Its large texts (and a large tool set not yet priced) counted now, in a thread, so their
    # pricing below is a lookup.
    counter = await counted_ahead(route.provider, _admit_texts(command), command.tools)
    call = Call(
        "Admit",
        tenant,
        command.session_id,
        idempotency,
        command.validate_only,
        admission_id=output.admission_id if output is not None else None,
        tool_call_ids=output.call_ids if output is not None else (),
        streamed=command.delivery.streamed,
    )
    async with UnitOfWork(deps, call) as uow:
        if (replayed := await uow.replayed()) is not None:
            return replayed
        aggregate = uow.load(command.expected_revision)
        recorded = None
        if output is not None:
            with fields_under("previous_output"):
                aggregate, recorded = await record_output(uow, aggregate, output, counter)
        attempt = rules.Attempt(
            admission_id="" if uow.validate_only else uuid.uuid4().hex,
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
        await uow.reached(Phase.VALIDATE)
        request_index = aggregate.session.request_count
        aggregate, result = await _attempt(
            deps, uow, aggregate, attempt, 0, command, counter, first=True
        )
        if not uow.validate_only:
            admitted = AdmissionRecord(
                attempt.admission_id,
                attempt.turn,
                attempt.step,
                attempt.rendered_prompt,
                attempt.tools,
                attempts=1,
            )
            await uow.sessions.add_admission(admitted, result.user_seqs)
            aggregate = aggregate.admitted(admitted)
            await _add_request(uow, request_index, attempt.admission_id, 0, result)
        await uow.sessions.save(aggregate)
        return await uow.commit(result if recorded is None else replace(result, recorded=recorded))


@runs_again_if_moved
async def reconcile(
    deps: Deps, tenant: str, command: ReconcileCommand, idempotency: Idempotency | None
) -> Reply[AttemptResult]:
    """A retried attempt of an admitted step, on the session as it is now."""
    validation.check_reconcile(command, deps.limits)
    route = await _route(deps.catalog, command.route)
    call = Call(
        "Reconcile",
        tenant,
        command.session_id,
        idempotency,
        command.validate_only,
        admission_id=command.admission_id,
        streamed=command.delivery.streamed,
    )
    async with UnitOfWork(deps, call) as uow:
        if (replayed := await uow.replayed()) is not None:
            return replayed
        aggregate = uow.load(command.expected_revision)
        session = aggregate.session
        admitted = await admission_of(uow, aggregate, command.admission_id)
        attempt = rules.Attempt(
            admission_id=admitted.admission_id,
            turn=admitted.turn,
            step=admitted.step,
            rendered_prompt=admitted.rendered_prompt,
            tools=admitted.tools,
            route=route,
            # A retry keeps the configuration in force (that of the session's last header).
            config=last.header.config if (last := session.series.last_header) else (),
        )
        await uow.reached(Phase.VALIDATE)
        number = admitted.attempts
        counter = await counted_ahead(route.provider, (), admitted.tools)
        aggregate, result = await _attempt(
            deps, uow, aggregate, attempt, number, command, counter, first=False
        )
        if not uow.validate_only:
            await uow.sessions.count_attempt(attempt.admission_id)
            aggregate = aggregate.attempted(attempt.admission_id)
            await _add_request(uow, session.request_count, attempt.admission_id, number, result)
        await uow.sessions.save(aggregate)
        return await uow.commit(result)


async def _route(catalog: Catalog, route: RouteRequest) -> Route:
    """The route, resolved against the catalog, with its tokenizer loaded off the event loop."""
    resolved = resolve_route(
        catalog,
        provider=route.provider,
        model=route.model,
        context_window=route.context_window,
        system_prompt_update=route.system_prompt_update,
        tool_update=route.tool_update,
    )
    await load_off_the_loop(resolved.provider)
    return resolved


async def _attempt(
    deps: Deps,
    uow: UnitOfWork,
    aggregate: SessionAggregate,
    attempt: rules.Attempt,
    number: int,
    command: AdmitCommand | ReconcileCommand,
    counter: TokenCounter,
    *,
    first: bool,
) -> tuple[SessionAggregate, AttemptResult]:
    """One attempt on ``aggregate``: the domain's transition, its events written, the derived
    request and its forecast; the aggregate it leaves; ``counter``: the route's."""
    wire, selection = command.wire_format, command.selection
    session = aggregate.session
    if session.surface_nodes and session_counter(session).name != counter.name:
        aggregate = await _reprice(uow, aggregate, counter)
        session = aggregate.session
    # The frames appended since the previous request are usually known to the aggregate; a
    # replacement by this attempt reads the frames again below.
    held = uow.bodies.held(wire, attempt.route)
    planned = plan_frames(
        session, session.shadowed, selection, wire, attempt.route, command.delivery, held
    )
    early = aggregate.frames_since_request(planned.from_position, planned.split_position)
    if early is None:
        early = await uow.sessions.frames(
            planned.from_position, planned.split_position, after_writes=True
        )
    state = rules.AdmissionState(
        session.next_seq, aggregate.system_nodes, session.series, aggregate.open_calls
    )
    outcome = rules.admit(state, attempt) if first else rules.reconcile(state, attempt)
    await uow.reached(Phase.PROJECT)
    written = await write_priced(uow.sessions, session, outcome.events, counter)
    shadowed = session.shadowed_with(written)
    key = request_key(attempt.route, attempt.tools, counter)
    derived = await derive_request(
        deps.limits,
        uow.sessions,
        session,
        attempt.route,
        attempt.tools,
        wire,
        shadowed,
        selection,
        end_position=written.next_position,
        tail=written.tail,
        read=early if written.shadowed is None else None,
        delivery=command.delivery,
        held=held,
    )
    _leave_body(uow, wire, attempt.route, derived)
    predicted = forecast_totals(
        session.last_request, key, derived.totals, starts_series=outcome.starts_series
    )
    after = session.admitted(
        len(outcome.events),
        written,
        outcome.series,
        PreviousRequest(key, derived.totals.messages),
        derived.prefix,
    )
    aggregate = await followed(uow.sessions, aggregate, outcome.events, written)
    prompt = effective_prompt(aggregate.system_nodes)
    await uow.reached(Phase.DERIVE)
    return aggregate.saved(after), AttemptResult(
        admission_id=attempt.admission_id,
        attempt=number,
        revision=session.revision if uow.validate_only else after.revision,
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
        prompt_is_admitted=bool(prompt.text) and prompt.text == attempt.rendered_prompt,
    )


def _leave_body(uow: UnitOfWork, wire: WireFormat, route: Route, derived: Derived) -> None:
    """A FULL body is left for the session's next request to continue (app/held_bodies.py)."""
    if derived.body_continued:
        uow.bodies.continued()
    rendered = derived.rendered
    if rendered.layout is not None and derived.view.first_message_index == 0:
        uow.bodies.leave(wire, route, derived.prefix.digest, rendered)


async def _reprice(
    uow: UnitOfWork, aggregate: SessionAggregate, counter: TokenCounter
) -> SessionAggregate:
    """A change of route family (another tokenizer): price every surviving node again with
    the new route's tokenizer, so the breakdown, ``retain_tokens``, the summary-size rule and
    the forecast never mix two tokenizers. Costs one pass over the surface, once per change of
    family; returns the aggregate with the new running price and prefix price."""
    session = aggregate.session
    rows = await uow.sessions.surface(with_empty=False)
    prices = [(row.seq, message_tokens(row.decoded(), counter)) for row in rows]
    await uow.sessions.reprice(prices)
    end = session.prefix.end_position if session.prefix is not None else 0
    repriced = session.repriced(
        surface_tokens=sum(price for _, price in prices),
        prefix_tokens=sum(
            price for row, (_, price) in zip(rows, prices, strict=True) if row.position < end
        ),
    )
    return aggregate.repriced().saved(repriced)


async def _add_request(
    uow: UnitOfWork, index: int, admission_id: str, attempt: int, result: AttemptResult
) -> None:
    # The ledger row keeps the request's log position beside its forecast (ListTrajectory
    # folds the log up to it); rows written before it existed have none. The provider says
    # how to read the usage recorded later, for the calibration Inspect reports.
    stored = {
        **forecast_json(result.forecast),
        "log_seq": result.log_seq,
        "provider": result.route.provider,
    }
    await uow.sessions.add_request(index, admission_id, attempt, stored)


def _admit_texts(command: AdmitCommand) -> Iterator[str]:
    """The texts an Admit prices: its prompt, its users' and its previous output's."""
    yield command.rendered_prompt
    for user in command.users:
        yield from counted_texts(user.content)
    output = command.previous_output
    if output is not None:
        if output.assistant is not None:
            yield from counted_texts(output.assistant.content)
        yield from counted_texts(output.tool_results)
