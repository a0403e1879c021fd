"""The use cases (SPEC §3, §4): one method per RPC, each one database transaction.

Every mutation follows the same shape (``_mutate``, one ``UnitOfWork``): lock the session row,
replay a stored response for a repeated ``request_id``, check ``expected_revision``, run the pure
domain transition, write its events and the new session state, store the response, commit. Any
exception — including the cancellation of a call whose client went away or whose deadline
passed — leaves the unit of work without a commit, so nothing is written.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from admission_service.app import bounds, validation
from admission_service.app.commands import (
    FULL_VIEW,
    AdmitCommand,
    AttemptResult,
    CompactCommand,
    CompactResult,
    DerivedRequestView,
    EncodedMessages,
    EventView,
    Idempotency,
    InspectResult,
    Page,
    PlanCompactionCommand,
    PlanResult,
    ReconcileCommand,
    RecordCommand,
    RecordResult,
    RequestSelection,
    RequestView,
    RouteRequest,
    SessionInfo,
    SystemNodeView,
)
from admission_service.app.database import PostgresStorage
from admission_service.app.gate import SessionGate
from admission_service.app.hooks import NO_HOOKS, Phase, PhaseHooks
from admission_service.app.limits import Limits, Quotas
from admission_service.app.page_tokens import PageTokens
from admission_service.app.ports import SessionRepository, Storage
from admission_service.app.quotas import TenantQuotas
from admission_service.app.rows import (
    calibration_of,
    decode_message,
    event_of,
    forecast_json,
    ledger_entry_of,
    session_info,
    usage_json,
)
from admission_service.app.trajectory import (
    TrajectoryEntry,
    request_log_seq,
    trajectory_entries,
)
from admission_service.app.unit_of_work import UnitOfWork
from admission_service.domain import admission as rules
from admission_service.domain import codec, protowire
from admission_service.domain import record as recording
from admission_service.domain.accounting import (
    PreviousRequest,
    PricedNode,
    RequestKey,
    RequestTotals,
    TokenCounter,
    breakdown,
    forecast_totals,
    message_digest,
    message_tokens,
    tools_json,
    tools_tokens,
)
from admission_service.domain.catalog import Catalog, resolve_route
from admission_service.domain.compaction import (
    CompactionNode,
    compact,
    plan_by_tokens,
    plan_range,
    summarization_input,
)
from admission_service.domain.errors import (
    AdmissionNotFound,
    InvalidArgument,
    NothingToCompact,
    SessionNotFound,
    StaleCompactionPlan,
    WireFormatError,
    fields_under,
)
from admission_service.domain.messages import Tool
from admission_service.domain.projection import SystemNode
from admission_service.domain.series import Route
from admission_service.domain.surface import effective_prompt, fold_system_nodes
from admission_service.domain.wire import WireFormat, render
from admission_service.storage.repository import (
    NO_FRAMES,
    Frames,
    NodeRecord,
    RequestPrefix,
    SessionRecord,
    Shadowed,
)
from admission_service.tokenizers import counter_for, load_off_the_loop

R = TypeVar("R")
LEDGER_ROWS = 50
# The digest of a derived request computed from scratch starts from this seed; one extended
# from the previous request's digest chains over the frames appended since (see _derive).
DIGEST_SEED = b"promptadmission.v1/derived-request"
_SESSION_NAMESPACE = uuid.UUID("6f1d8a52-3c1e-4c55-9a7e-8e0f1f3b7a10")


_PLAN_FIELDS = ("generation", "next_seq", "start", "end")


def _plan_cursor(cursor: dict[str, Any]) -> dict[str, int]:
    """A plan token's cursor, checked: a token of another shape (an older version's, or
    another kind of token) is INVALID_ARGUMENT, never a KeyError."""
    if set(cursor) != set(_PLAN_FIELDS) or not all(type(cursor[f]) is int for f in _PLAN_FIELDS):
        raise InvalidArgument("plan_token", "is not a token this service issued for this call")
    return cursor


class AdmissionApp:
    """Every mutating method takes the caller's ``Idempotency`` (or None) and an ``encode``
    function turning its result into the response bytes; it returns those bytes. The bytes are
    stored in the same transaction as the effect and replayed verbatim for a repeated
    ``request_id``. With ``validate_only`` nothing is committed or stored."""

    def __init__(
        self,
        engine: AsyncEngine | None,
        catalog: Catalog,
        limits: Limits | None = None,
        hooks: PhaseHooks = NO_HOOKS,
        quotas: Quotas | None = None,
        page_tokens: PageTokens | None = None,
        *,
        storage: Storage | None = None,
    ) -> None:
        """On PostgreSQL through ``engine``, or on another ``storage`` (the tests' fake)."""
        if storage is None:
            assert engine is not None, "an engine or a storage"
            storage = PostgresStorage(engine)
        self.storage = storage
        if page_tokens is None:
            assert engine is not None, "page tokens are configured with a storage"
            page_tokens = PageTokens.configured((), engine.url)
        self.page_tokens = page_tokens
        self.catalog = catalog
        self.limits = limits or Limits()
        self.hooks = hooks
        self.quotas = TenantQuotas(quotas or Quotas())
        self.gate = SessionGate()  # a hot session's queued writers hold no pool connection

    # ---- the transaction shapes ---------------------------------------------------------

    def _unit(
        self,
        method: str,
        tenant: str,
        session_id: str,
        idempotency: Idempotency | None,
        *,
        validate_only: bool = False,
        create: bool = False,
    ) -> UnitOfWork:
        return UnitOfWork(
            self.storage,
            self.gate,
            self.quotas,
            self.limits,
            self.hooks,
            method,
            tenant,
            session_id,
            idempotency,
            validate_only=validate_only,
            create=create,
        )

    async def _mutate(
        self,
        method: str,
        tenant: str,
        session_id: str,
        idempotency: Idempotency | None,
        expected_revision: int | None,
        work: Callable[[UnitOfWork], Awaitable[R]],
        encode: Callable[[R], bytes],
        *,
        validate_only: bool = False,
        create: bool = False,
    ) -> bytes:
        """One mutation: ``work`` runs in a unit of work that commits its result unless
        ``validate_only`` (or an exception, or a cancellation)."""
        if idempotency is not None:
            validation.check_request_id(idempotency.request_id, self.limits)
        async with self._unit(
            method, tenant, session_id, idempotency, validate_only=validate_only, create=create
        ) as uow:
            replayed = await uow.replayed(encode)
            if replayed is not None:
                return replayed
            uow.load(expected_revision)
            result = await work(uow)
            payload = encode(result)
            await uow.check_growth()
            if not validate_only:
                await uow.commit(result, payload, encode)
        return payload

    async def _read_session(
        self,
        tenant: str,
        session_id: str,
        work: Callable[[SessionRepository, SessionRecord], Awaitable[R]],
    ) -> R:
        validation.check_session_id(session_id, self.limits)
        async with (
            self.quotas.call(tenant),
            self.storage.unit(tenant, session_id, snapshot=True) as unit,
        ):
            record = await unit.store.read(lock=False)
            if record is None:
                raise SessionNotFound(session_id)
            return await work(unit.store, record)

    # ---- session lifecycle --------------------------------------------------------------

    async def create_session(
        self,
        tenant: str,
        session_id: str,
        idempotency: Idempotency | None,
        encode: Callable[[SessionInfo], bytes],
    ) -> bytes:
        if idempotency is not None:
            validation.check_request_id(idempotency.request_id, self.limits)
        if not session_id:
            # A retried create without an id must land on the same session: derive the id
            # from the request id when there is one.
            session_id = (
                str(uuid.uuid5(_SESSION_NAMESPACE, f"{tenant}\x00{idempotency.request_id}"))
                if idempotency is not None
                else str(uuid.uuid4())
            )
        validation.check_session_id(session_id, self.limits)

        async def create(uow: UnitOfWork) -> SessionInfo:
            await uow.check_new_session()
            return session_info(uow.record)

        return await self._mutate(
            "CreateSession", tenant, session_id, idempotency, None, create, encode, create=True
        )

    async def get_session(self, tenant: str, session_id: str) -> SessionInfo:
        async def get(store: SessionRepository, record: SessionRecord) -> SessionInfo:
            return session_info(record)

        return await self._read_session(tenant, session_id, get)

    async def list_sessions(
        self, tenant: str, page_size: int, page_token: str
    ) -> Page[SessionInfo]:
        limit = validation.check_page_size(page_size, self.limits)
        after = None
        if page_token:
            cursor = self.page_tokens.decode(f"sessions/{tenant}", page_token, "page_token")
            after = (datetime.fromisoformat(cursor["t"]), str(cursor["i"]))

        async with self.quotas.call(tenant), self.storage.unit(tenant, snapshot=True) as unit:
            records = await unit.list_sessions(after, limit + 1)
        items = tuple(session_info(r) for r in records[:limit])
        token = ""
        if len(records) > limit:
            last = records[limit - 1]
            cursor = {"t": last.create_time.isoformat(), "i": last.session_id}
            token = self.page_tokens.encode(f"sessions/{tenant}", cursor)
        return Page(items, token)

    async def delete_session(
        self,
        tenant: str,
        session_id: str,
        expected_revision: int | None,
        idempotency: Idempotency | None,
        encode: Callable[[None], bytes],
    ) -> bytes:
        validation.check_session_id(session_id, self.limits)
        validation.check_expected_revision(expected_revision)

        async def delete(tx: UnitOfWork) -> None:
            await tx.store.delete()

        return await self._mutate(
            "DeleteSession", tenant, session_id, idempotency, expected_revision, delete, encode
        )

    # ---- admission and reconciliation ---------------------------------------------------

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
        encode: Callable[[AttemptResult], bytes],
    ) -> bytes:
        validation.check_admit(command, self.limits)
        output = command.previous_output
        if output is not None:
            with fields_under("previous_output"):
                validation.check_record(output, self.limits)
        route = self._route(command.route)
        await load_off_the_loop(route.provider)

        async def work(tx: UnitOfWork) -> AttemptResult:
            if output is None:
                return await admit(tx)
            # One call per step: Record's transition, then Admit's, in this one transaction.
            with fields_under("previous_output"):
                recorded = await self._record_output(tx, output)
            # Sent now, not merged with the admission's writes: both update the session row,
            # which one statement must not do twice.
            await tx.store.flush()
            return replace(await admit(tx), recorded=recorded)

        async def admit(tx: UnitOfWork) -> AttemptResult:
            admission_id = "" if tx.validate_only else uuid.uuid4().hex
            attempt = rules.Attempt(
                admission_id=admission_id,
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
            await tx.reached(Phase.VALIDATE)
            result = await self._attempt(
                tx, attempt, 0, command.wire_format, command.selection, first=True
            )
            if not tx.validate_only:
                await tx.store.add_admission(
                    admission_id,
                    command.turn,
                    command.step,
                    command.rendered_prompt,
                    command.tools,
                    result.user_seqs,
                )
                await self._add_request(tx, admission_id, 0, result)
            return result

        return await self._mutate(
            "Admit",
            tenant,
            command.session_id,
            idempotency,
            command.expected_revision,
            work,
            encode,
            validate_only=command.validate_only,
        )

    async def reconcile(
        self,
        tenant: str,
        command: ReconcileCommand,
        idempotency: Idempotency | None,
        encode: Callable[[AttemptResult], bytes],
    ) -> bytes:
        validation.check_reconcile(command, self.limits)
        route = self._route(command.route)
        await load_off_the_loop(route.provider)

        async def work(tx: UnitOfWork) -> AttemptResult:
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
            await tx.reached(Phase.VALIDATE)
            number = admitted.attempts
            result = await self._attempt(
                tx, attempt, number, command.wire_format, command.selection, first=False
            )
            await tx.store.count_attempt(admitted.admission_id)
            await self._add_request(tx, admitted.admission_id, number, result)
            return result

        return await self._mutate(
            "Reconcile",
            tenant,
            command.session_id,
            idempotency,
            command.expected_revision,
            work,
            encode,
            validate_only=command.validate_only,
        )

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
        if tx.record.surface_nodes and _session_counter(tx.record).name != counter.name:
            await self._reprice(tx, counter)
        record = tx.record
        # One statement reads the system nodes and the frames the request needs if this attempt
        # shadows nothing (the usual case); a replacement reads the frames again below.
        planned = _FramesQuery.plan(record, record.shadowed, selection, wire)
        system_nodes, early, open_calls = await tx.store.system_nodes_and_frames(
            planned.from_position, planned.split_position
        )
        state = rules.AdmissionState(record.next_seq, system_nodes, record.series, open_calls)
        outcome = rules.admit(state, attempt) if first else rules.reconcile(state, attempt)
        await tx.reached(Phase.PROJECT)
        written = await tx.store.write_events(outcome.events, record.next_position, counter)
        shadowed = written.shadowed
        if record.shadowed is not None:
            shadowed = record.shadowed.earliest(shadowed)
        key = _request_key(attempt.route, attempt.tools, counter)
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
        revision = await tx.store.save(
            record,
            next_seq=record.next_seq + len(outcome.events),
            next_position=written.next_position,
            series=outcome.series,
            last_request=(PreviousRequest(key, derived.totals.messages), derived.prefix),
            shadowed=None,  # the next forecast compares with this request
            request_count=record.request_count + 1,
            surface_tokens=record.surface_tokens + written.tokens,
        )
        prompt = effective_prompt(fold_system_nodes(system_nodes, outcome.events))
        await tx.reached(Phase.DERIVE)
        return AttemptResult(
            admission_id=attempt.admission_id,
            attempt=number,
            revision=record.revision if tx.validate_only else revision,
            commits=outcome.commits,
            user_seqs=outcome.user_seqs,
            header=outcome.header,
            context=outcome.context,
            starts_series=outcome.starts_series,
            request=derived.view,
            effective_prompt=prompt,
            forecast=predicted,
            route=attempt.route,
            log_seq=record.next_seq + len(outcome.events),
        )

    @staticmethod
    async def _reprice(tx: UnitOfWork, counter: TokenCounter) -> None:
        """A change of route family (another tokenizer): price every surviving node again with
        the new route's tokenizer, so the breakdown, ``retain_tokens``, the summary-size rule
        and the forecast never mix two tokenizers. Costs one pass over the surface, once per
        change of family; leaves ``tx.record`` with the new running price and prefix price."""
        record = tx.record
        rows = await tx.store.surface(with_empty=False)
        prices = [
            (row.seq, message_tokens(decode_message(row.message), counter))
            for row in rows
            if row.message is not None
        ]
        await tx.store.reprice(prices)
        total = sum(price for _, price in prices)
        prefix = record.prefix
        if prefix is not None:
            before_end = sum(
                price
                for row, (_, price) in zip(rows, prices, strict=True)
                if row.position < prefix.end_position
            )
            prefix = replace(prefix, tokens=before_end)
        tx.record = replace(record, surface_tokens=total, prefix=prefix)

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

    async def _derive(
        self,
        store: SessionRepository,
        record: SessionRecord,
        route: Route,
        tools: tuple[Tool, ...],
        wire: WireFormat,
        shadowed: Shadowed | None,
        selection: RequestSelection,
        *,
        end_position: int,
        tail: Frames = NO_FRAMES,
        read: Frames | None = None,
        degrade: bool = False,
    ) -> _Derived:
        """The derived request (every message node in surface order), the totals its cache
        forecast needs, and the prefix the next request extends.

        The previous request is an exact prefix of this one unless a node before its end was
        shadowed since. Then only the frames appended since are new: a DELTA request whose held
        prefix is the previous request reads just those (an index range scan from
        ``end_position``), and the digest chains over them. Otherwise the database concatenates
        every stored frame. Either way no stored message is decoded or re-encoded, except to
        render a provider body (non-NEUTRAL wire formats), which reads the returned messages.
        ``tail`` holds this transaction's appended nodes, whose rows are not written yet: they
        end the surface, after everything the database returns. ``read`` is the frames already
        read for exactly this query (``_FramesQuery.plan``), if any. With ``degrade`` (Inspect)
        a body the wire format cannot express is reported in the view instead of raised.
        """
        prefix = record.prefix
        query = _FramesQuery.plan(record, shadowed, selection, wire)
        intact, delta = query.intact, query.delta
        if read is None:
            read = await store.frames(query.from_position, query.split_position)
        if prefix is not None and intact:
            if delta:
                new = read.frames + tail.frames
                body, first_index = new, prefix.messages
            else:
                new = read.frames[prefix.size :] + tail.frames
                # Copy a long surface's frames only when there is a tail to add.
                body = read.frames + tail.frames if tail.frames else read.frames
                first_index = 0
            messages = prefix.messages + (read.messages - read.before_messages) + tail.messages
            tokens = prefix.tokens + (read.tokens - read.before_tokens) + tail.tokens
            digest = hashlib.sha256(prefix.digest + new).digest() if new else prefix.digest
            totals = RequestTotals(messages, tokens, prefix.messages, prefix.tokens, False)
            size = prefix.size + len(new)
        else:
            body, first_index = read.frames + tail.frames, 0
            messages, tokens = read.messages + tail.messages, read.tokens + tail.tokens
            digest = hashlib.sha256(DIGEST_SEED + body).digest()
            size = len(body)
            if shadowed is not None:
                # Every node before the first shadowed position was in the previous request.
                totals = RequestTotals(
                    messages, tokens, read.before_messages, read.before_tokens, shadowed.system
                )
            else:
                totals = RequestTotals(messages, tokens, messages, tokens, False)
        encoded = EncodedMessages(body)
        rendered = ""
        render_error = None
        try:
            rendered = render(
                encoded,
                wire,
                in_history=route.in_history,
                provider=route.provider,
                tools=tools,
                offset=first_index,
            )
        except WireFormatError as error:
            if not degrade:
                raise
            render_error = error
        bounds.check_derived_request_size(len(body) + len(rendered), self.limits)
        view = DerivedRequestView(
            wire,
            encoded,
            rendered,
            tools,
            view=RequestView.DELTA if first_index else RequestView.FULL,
            first_message_index=first_index,
            total_messages=messages,
            digest=digest,
            render_error=render_error,
        )
        prefix_now = RequestPrefix(messages, tokens, size, digest, end_position)
        return _Derived(view, totals, prefix_now)

    # ---- what the model and tools produced ------------------------------------------------

    async def record(
        self,
        tenant: str,
        command: RecordCommand,
        idempotency: Idempotency | None,
        encode: Callable[[RecordResult], bytes],
    ) -> bytes:
        validation.check_record(command, self.limits)

        async def work(tx: UnitOfWork) -> RecordResult:
            return await self._record_output(tx, command)

        return await self._mutate(
            "Record",
            tenant,
            command.session_id,
            idempotency,
            command.expected_revision,
            work,
            encode,
        )

    async def _record_output(self, tx: UnitOfWork, command: RecordCommand) -> RecordResult:
        """Record's transition inside ``tx`` (Record, and an Admit's previous_output). Leaves
        ``tx.record`` as the session row it saved, so a transition after it in the same
        transaction starts from there."""
        admitted = await tx.store.admission(command.admission_id)
        if admitted is None:
            raise AdmissionNotFound(command.admission_id)
        record = tx.record
        calls = command.assistant.tool_call_ids() if command.assistant is not None else ()
        outcome = recording.record(
            record.next_seq,
            recording.Admitted(admitted.admission_id, admitted.turn, admitted.step),
            command.assistant,
            command.tool_results,
            taken_call_ids=await tx.store.known_tool_calls(calls) if calls else (),
        )
        await tx.reached(Phase.VALIDATE)
        await tx.reached(Phase.PROJECT)
        written = await tx.store.write_events(
            outcome.events, record.next_position, _session_counter(record)
        )
        answered = await tx.store.answer_tool_calls(outcome.answers(command.tool_results))
        recording.check_answered(command.tool_results, answered)
        if command.usage is not None:
            usage = codec.dumps(usage_json(command.usage))
            await tx.store.observe_usage(admitted.admission_id, usage)
        await tx.reached(Phase.DERIVE)
        revision = await tx.store.save(
            record,
            next_seq=outcome.next_seq,
            next_position=written.next_position,
            series=record.series,
            last_request=_previous(record),
            shadowed=record.shadowed,
            request_count=record.request_count,
            surface_tokens=record.surface_tokens + written.tokens,
        )
        tx.record = replace(
            record,
            revision=revision,
            next_seq=outcome.next_seq,
            next_position=written.next_position,
            surface_tokens=record.surface_tokens + written.tokens,
        )
        return RecordResult(revision, outcome.assistant_seq, outcome.tool_result_seqs)

    # ---- compaction -----------------------------------------------------------------------

    @staticmethod
    def _compaction_nodes(rows: list[NodeRecord]) -> list[CompactionNode]:
        result = []
        for row in rows:
            message = decode_message(row.message) if row.message is not None else None
            result.append(
                CompactionNode(
                    row.seq,
                    row.tokens,
                    row.is_system,
                    message,
                    message.tool_call_ids() if message else (),
                    message.tool_result_ids() if message else (),
                )
            )
        return result

    @staticmethod
    def _system_nodes(
        rows: list[NodeRecord], nodes: list[CompactionNode]
    ) -> tuple[SystemNode, ...]:
        return tuple(
            SystemNode(node.seq, node.message.text if node.message else "")
            for node in nodes
            if node.is_system
        )

    async def plan_compaction(self, tenant: str, command: PlanCompactionCommand) -> PlanResult:
        validation.check_plan(command, self.limits)
        scope = f"compaction/{tenant}/{command.session_id}"

        async def plan(store: SessionRepository, record: SessionRecord) -> PlanResult:
            nodes = self._compaction_nodes(await store.surface())
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
                sum(len(protowire.frame(message)) for message in to_summarize), self.limits
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
        encode: Callable[[CompactResult], bytes],
    ) -> bytes:
        validation.check_compact(command, self.limits)
        scope = f"compaction/{tenant}/{command.session_id}"
        token = _plan_cursor(self.page_tokens.decode(scope, command.plan_token, "plan_token"))

        async def work(tx: UnitOfWork) -> CompactResult:
            record = tx.record
            if (token["generation"], token["next_seq"]) != (
                record.series.replace_generation,
                record.next_seq,
            ):
                raise StaleCompactionPlan()
            rows = await tx.store.surface()
            nodes = self._compaction_nodes(rows)
            selected = plan_range(nodes, token["start"], token["end"])
            state = rules.AdmissionState(
                record.next_seq, self._system_nodes(rows, nodes), record.series
            )
            await tx.reached(Phase.VALIDATE)
            counter = _session_counter(record)
            outcome = compact(state, selected, command.summary, counter=counter)
            await tx.reached(Phase.PROJECT)
            written = await tx.store.write_events(outcome.events, record.next_position, counter)
            shadowed = written.shadowed
            if record.shadowed is not None:
                shadowed = record.shadowed.earliest(shadowed)
            prompt = effective_prompt(await tx.store.system_nodes())
            await tx.reached(Phase.DERIVE)
            revision = await tx.store.save(
                record,
                next_seq=record.next_seq + len(outcome.events),
                next_position=written.next_position,
                series=outcome.series,
                last_request=_previous(record),
                shadowed=shadowed,
                request_count=record.request_count,
                surface_tokens=record.surface_tokens + written.tokens,
            )
            return CompactResult(
                revision, outcome.summary_seq, selected.shadowed_seqs, outcome.commits, prompt
            )

        return await self._mutate(
            "Compact",
            tenant,
            command.session_id,
            idempotency,
            command.expected_revision,
            work,
            encode,
        )

    # ---- reads ------------------------------------------------------------------------------

    async def inspect(
        self,
        tenant: str,
        session_id: str,
        wire: WireFormat,
        selection: RequestSelection = FULL_VIEW,
    ) -> InspectResult:
        """What the model sees and why. Reads the session row, the system nodes and the ledger;
        the token breakdown comes from the session's running price, and only the derived
        request reads the surface (just the tail for a DELTA with a current held prefix)."""

        async def inspect(store: SessionRepository, record: SessionRecord) -> InspectResult:
            details = await store.system_node_details()
            system_nodes = tuple(
                SystemNodeView(
                    row.seq,
                    row.commit_time,
                    row.turn,
                    row.step,
                    row.system_text.decode(),
                    bool(codec.loads(row.payload).get("update", False)),
                )
                for row in details
            )
            series = record.series
            header = series.last_header
            tools = header.header.tools if header else ()
            context = series.last_context
            route = Route(
                context.context.provider if context else "",
                context.context.model if context else "",
                context.context.context_window if context else 0,
                in_history=context.context.in_history if context else False,
                tool_update=False,
            )
            derived = await self._derive(
                store,
                record,
                route,
                tools,
                wire,
                record.shadowed,
                selection,
                end_position=record.next_position,
                degrade=True,
            )
            counter = _session_counter(record)
            ledger = tuple(ledger_entry_of(row) for row in await store.ledger(LEDGER_ROWS))
            return InspectResult(
                session=session_info(record),
                effective_prompt=effective_prompt(
                    tuple(SystemNode(n.seq, n.text) for n in system_nodes)
                ),
                system_nodes=system_nodes,
                request=derived.view,
                breakdown=breakdown(
                    [PricedNode(row.seq, row.tokens, True) for row in details],
                    tools,
                    counter,
                    total=record.surface_tokens,
                    calibration=calibration_of(ledger, route.provider),
                ),
                series=series,
                ledger=ledger,
            )

        return await self._read_session(tenant, session_id, inspect)

    def _session_page(
        self, kind: str, tenant: str, session_id: str, page_size: int, page_token: str
    ) -> tuple[int, str, int]:
        """A paged read of one session's ``kind``: the page size, the page tokens' scope and
        the position the page starts after (-1 for the first page)."""
        limit = validation.check_page_size(page_size, self.limits)
        # Before the token is checked: its scope holds the session id (a 64 KiB one broke the
        # token's signature, INTERNAL; found by the fuzzer).
        validation.check_session_id(session_id, self.limits)
        scope = f"{kind}/{tenant}/{session_id}"
        after = -1
        if page_token:
            after = int(self.page_tokens.decode(scope, page_token, "page_token")["after"])
        return limit, scope, after

    async def list_events(
        self, tenant: str, session_id: str, page_size: int, page_token: str
    ) -> Page[EventView]:
        limit, scope, after = self._session_page(
            "events", tenant, session_id, page_size, page_token
        )

        async def page(store: SessionRepository, record: SessionRecord) -> Page[EventView]:
            budget = self.limits.max_events_page_bytes
            rows, more = await store.events_page(after, limit, budget)
            items = tuple(EventView(event_of(row), row.commit_time) for row in rows)
            token = self.page_tokens.encode(scope, {"after": rows[-1].seq}) if more else ""
            return Page(items, token)

        return await self._read_session(tenant, session_id, page)

    async def list_trajectory(
        self, tenant: str, session_id: str, page_size: int, page_token: str
    ) -> Page[TrajectoryEntry]:
        """One page of the session's derived requests with the prompt each saw (a read)."""
        limit, scope, after = self._session_page(
            "trajectory", tenant, session_id, page_size, page_token
        )

        async def page(store: SessionRepository, record: SessionRecord) -> Page[TrajectoryEntry]:
            # The request before the page (if any) bounds what its first entry introduced.
            rows = list(await store.requests_from(max(after, 0), limit + 2))
            before = rows.pop(0) if after >= 0 and rows and rows[0].request_index == after else None
            more, rows = len(rows) > limit, rows[:limit]
            if not rows:
                return Page((), "")
            requests = [(ledger_entry_of(row), request_log_seq(row.forecast)) for row in rows]
            ends = [seq for _, seq in requests if seq is not None]
            complete = len(ends) == len(requests)
            events = await store.prompt_events(max(ends) if complete else record.next_seq)
            since = request_log_seq(before.forecast) if before is not None else 0
            entries = trajectory_entries(
                requests, [(event_of(row), row.commit_time) for row in events], since=since or 0
            )
            token = (
                self.page_tokens.encode(scope, {"after": entries[-1].request_index}) if more else ""
            )
            return Page(entries, token)

        return await self._read_session(tenant, session_id, page)


@dataclass(frozen=True, slots=True)
class _FramesQuery:
    """Which stored frames a derived request reads: from ``from_position`` on, counting those
    before ``split_position``; ``intact`` when the previous request is still a prefix, ``delta``
    when the caller holds exactly that prefix and gets only what follows it."""

    from_position: int
    split_position: int | None
    intact: bool
    delta: bool

    @classmethod
    def plan(
        cls,
        record: SessionRecord,
        shadowed: Shadowed | None,
        selection: RequestSelection,
        wire: WireFormat,
    ) -> _FramesQuery:
        prefix = record.prefix
        if prefix is None or (shadowed is not None and shadowed.position < prefix.end_position):
            return cls(0, shadowed.position if shadowed is not None else None, False, False)
        held = selection.held
        delta = (
            selection.view is RequestView.DELTA
            and wire is not WireFormat.ANTHROPIC_MESSAGES
            and held is not None
            and (held.message_count, held.digest) == (prefix.messages, prefix.digest)
        )
        if delta:
            return cls(prefix.end_position, None, True, True)
        return cls(0, prefix.end_position, True, False)


@dataclass(frozen=True, slots=True)
class _Derived:
    view: DerivedRequestView
    totals: RequestTotals
    prefix: RequestPrefix


def _request_key(route: Route, tools: tuple[Tool, ...], counter: TokenCounter) -> RequestKey:
    return RequestKey(
        route.provider,
        route.model,
        message_digest(tools_json(tools).encode()),
        tools_tokens(tools, counter),
    )


def _session_counter(record: SessionRecord) -> TokenCounter:
    """The tokenizer of the session's route in force (that of its last admission), which
    priced every surviving node (``AdmissionApp._reprice``): Record, Compact and Inspect price
    with it."""
    context = record.series.last_context
    return counter_for(context.context.provider if context else "")


def _previous(record: SessionRecord) -> tuple[PreviousRequest, RequestPrefix] | None:
    if record.last_request is None or record.prefix is None:
        return None
    return record.last_request, record.prefix
