"""Admission and reconciliation as pure transitions (SPEC §2, §3 Admit/Reconcile).

Given the indexed state of a session (surviving system nodes, series state, next seq) and one
attempt's input, return the events to commit in order — system commits, then the users (first
attempt only), then the header, then the context — and the session's new series state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from admission_service.domain.errors import UnansweredToolCall
from admission_service.domain.events import Append, Event, EventKind, Replace, system_event
from admission_service.domain.messages import Message, Tool
from admission_service.domain.projection import CommitOp, SystemCommit, SystemNode, project
from admission_service.domain.series import (
    ContextLog,
    HeaderLog,
    RequestHeader,
    Route,
    SeriesState,
    context_changed,
    context_of,
    header_reason,
    series_starts,
)


@dataclass(frozen=True, slots=True)
class AdmissionState:
    """What the rule needs of a session; storage keeps exactly this indexed."""

    next_seq: int
    system_nodes: tuple[SystemNode, ...]
    series: SeriesState
    # The ids of the tool calls on the surface that no result answers yet, in call order.
    open_tool_calls: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a step. Admission is the first; a reconciliation passes no users."""

    admission_id: str
    turn: int
    step: int
    rendered_prompt: str
    tools: tuple[Tool, ...]
    route: Route
    starts_request_series: bool = False
    users: tuple[Message, ...] = ()
    resume: bool = False
    # The harness's sampling configuration, canonical (sorted by key); part of the header.
    config: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class AppliedCommit:
    """A system commit with the seq it was logged at."""

    seq: int
    commit: SystemCommit


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    events: tuple[Event, ...]
    commits: tuple[AppliedCommit, ...]
    user_seqs: tuple[int, ...]
    header: HeaderLog | None
    context: ContextLog | None
    starts_series: bool
    series: SeriesState


def commit_events(
    commits: tuple[SystemCommit, ...], next_seq: int, *, turn: int, step: int
) -> tuple[Event, ...]:
    """The `system/message` events for ``commits``, logged from ``next_seq`` on."""
    events = []
    for seq, commit in enumerate(commits, start=next_seq):
        op: Append | Replace = Append()
        if commit.op is CommitOp.REPLACE:
            assert commit.replaced_seq is not None
            op = Replace(commit.replaced_seq, commit.replaced_seq)
        events.append(
            system_event(seq, commit.text, op, turn=turn, step=step, update=commit.update)
        )
    return tuple(events)


def replaces_in(commits: tuple[SystemCommit, ...]) -> int:
    return sum(commit.op is CommitOp.REPLACE for commit in commits)


def admit(state: AdmissionState, attempt: Attempt) -> AttemptOutcome:
    """The first attempt of a step: the prompt and the step's users are admitted."""
    return _run(state, attempt, first_attempt=True)


def reconcile(state: AdmissionState, attempt: Attempt) -> AttemptOutcome:
    """A retry of an admitted step: same rendered prompt and tools, never the users again.

    A declared series start counts only on the first attempt, and a retry is never a resume.
    """
    retry = replace(attempt, users=(), starts_request_series=False, resume=False)
    return _run(state, retry, first_attempt=False)


def check_tool_calls_answered(state: AdmissionState) -> None:
    """The tool-call ordering rule: no attempt while a tool call on the surface is unanswered.

    Every provider format needs each tool call's result right after it (Chat's ``tool``
    messages after the ``tool_calls`` message, Responses' ``function_call_output`` items, one
    user message of ``tool_result`` blocks after the ``tool_use`` blocks). A request derived now
    would end with a call and no result, and anything the attempt appended (a system update, a
    user) would sit between the call and the result recorded later. So the results are recorded
    first (Record, or AdmitRequest.previous_output), then the next step is admitted.
    """
    if state.open_tool_calls:
        raise UnansweredToolCall(state.open_tool_calls)


def _run(state: AdmissionState, attempt: Attempt, *, first_attempt: bool) -> AttemptOutcome:
    check_tool_calls_answered(state)
    series = state.series
    # The baseline for "generation moved" is the last request; before any request it is the
    # generation the session had when this attempt began (so creating a session is no start).
    if series.last_request_generation is None:
        series = replace(series, last_request_generation=series.replace_generation)
    starts = series_starts(
        series, declared=attempt.starts_request_series, tools=attempt.tools, route=attempt.route
    )
    commits = project(
        state.system_nodes,
        attempt.rendered_prompt,
        in_history=attempt.route.in_history,
        starts_series=starts,
    )
    events = list(commit_events(commits, state.next_seq, turn=attempt.turn, step=attempt.step))
    applied = [
        AppliedCommit(event.seq, commit) for event, commit in zip(events, commits, strict=True)
    ]
    seq = state.next_seq + len(events)
    generation = series.replace_generation + replaces_in(commits)

    user_seqs: list[int] = []
    if first_attempt:
        for user in attempt.users:
            events.append(
                Event(seq, EventKind.USER_MESSAGE, attempt.turn, attempt.step, Append(), (), user)
            )
            user_seqs.append(seq)
            seq += 1

    # The header's series flag is computed after the system commits (SPEC §2).
    series = replace(series, replace_generation=generation)
    header_starts = series_starts(
        series, declared=attempt.starts_request_series, tools=attempt.tools, route=attempt.route
    )
    header = RequestHeader(
        attempt.route.provider, attempt.route.model, attempt.tools, attempt.config
    )
    reason = header_reason(series, header, resume=attempt.resume, starts_series=header_starts)
    header_log = None
    if reason is not None:
        header_log = HeaderLog(seq, reason, header_starts, header)
        events.append(
            Event(seq, EventKind.REQUEST_HEADER, attempt.turn, attempt.step, header=header_log)
        )
        seq += 1

    context = context_of(attempt.route)
    context_log = None
    if context_changed(series, context):
        context_log = ContextLog(seq, context)
        events.append(
            Event(seq, EventKind.REQUEST_CONTEXT, attempt.turn, attempt.step, context=context_log)
        )
        seq += 1

    events = [replace(event, admission_id=attempt.admission_id) for event in events]
    new_series = SeriesState(
        replace_generation=generation,
        last_request_generation=generation,
        last_header=header_log or series.last_header,
        last_context=context_log or series.last_context,
    )
    return AttemptOutcome(
        tuple(events),
        tuple(applied),
        tuple(user_seqs),
        header_log,
        context_log,
        header_starts,
        new_series,
    )
