"""Compaction: range selection, summarisation input, and the commit (SPEC §3 Compact, §5).

Compaction folds a contiguous range of the surface into one user-role summary node. It never
shadows a system node 0, never splits a tool call from its result, and never changes the
effective prompt: when the range would shadow the prompt in force, the same commit consolidates
that prompt into the head (the bug class of seeds/004).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from admission_service.domain.accounting import HEURISTIC_COUNTER, TokenCounter, message_tokens
from admission_service.domain.admission import (
    AdmissionState,
    AppliedCommit,
    commit_events,
    replaces_in,
)
from admission_service.domain.errors import InvalidArgument, SummaryNotSmaller
from admission_service.domain.events import Event, EventKind, Replace
from admission_service.domain.messages import Message, user_text
from admission_service.domain.projection import SystemCommit, effective_text, project
from admission_service.domain.series import SeriesState


@dataclass(frozen=True, slots=True)
class CompactionNode:
    """A surface node as compaction sees it: price, message, and its tool-call pairing."""

    seq: int
    tokens: int
    is_system: bool
    message: Message | None
    tool_call_ids: tuple[str, ...] = ()
    tool_result_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    start_seq: int
    end_seq: int
    shadowed_seqs: tuple[int, ...]
    shadowed_tokens: int


def first_compactable_index(nodes: Sequence[CompactionNode]) -> int:
    """1 when node 0 is a system node (head protection), else 0."""
    return 1 if nodes and nodes[0].is_system else 0


def _split_boundaries(nodes: Sequence[CompactionNode]) -> list[bool]:
    """``split[k]`` is true when cutting before index k separates a tool call from its result."""
    called_at: dict[str, int] = {}
    depth = [0] * (len(nodes) + 2)
    for index, node in enumerate(nodes):
        for call_id in node.tool_call_ids:
            called_at.setdefault(call_id, index)
        for call_id in node.tool_result_ids:
            call_index = called_at.get(call_id)
            if call_index is not None and call_index < index:
                depth[call_index + 1] += 1
                depth[index + 1] -= 1
    split, running = [], 0
    for k in range(len(nodes) + 1):
        running += depth[k]
        split.append(running > 0)
    return split


def _plan(nodes: Sequence[CompactionNode], start: int, end: int) -> CompactionPlan:
    shadowed = nodes[start : end + 1]
    return CompactionPlan(
        nodes[start].seq,
        nodes[end].seq,
        tuple(node.seq for node in shadowed),
        sum(node.tokens for node in shadowed),
    )


def plan_by_tokens(nodes: Sequence[CompactionNode], retain_tokens: int) -> CompactionPlan | None:
    """Keep at least ``retain_tokens`` of the newest nodes; fold what lies before them.

    Returns None when nothing is compactable.
    """
    first = first_compactable_index(nodes)
    keep, kept = len(nodes), 0
    while keep > first and kept < retain_tokens:
        keep -= 1
        kept += nodes[keep].tokens
    split = _split_boundaries(nodes)
    while keep > first and split[keep]:
        keep -= 1
    if keep <= first:
        return None
    return _plan(nodes, first, keep - 1)


def plan_range(nodes: Sequence[CompactionNode], start_seq: int, end_seq: int) -> CompactionPlan:
    """Validate an explicit range (surface order) and plan it."""
    index = {node.seq: i for i, node in enumerate(nodes)}
    if start_seq not in index:
        raise InvalidArgument(
            "range.start_seq", "{seq} is not a surviving surface node", seq=start_seq
        )
    if end_seq not in index:
        raise InvalidArgument("range.end_seq", "{seq} is not a surviving surface node", seq=end_seq)
    start, end = index[start_seq], index[end_seq]
    if start > end:
        raise InvalidArgument("range", "start_seq comes after end_seq in surface order")
    if start < first_compactable_index(nodes):
        raise InvalidArgument(
            "range.start_seq", "the system head (the first node) cannot be compacted"
        )
    split = _split_boundaries(nodes)
    if split[start] or split[end + 1]:
        raise InvalidArgument("range", "the range would split a tool call from its result")
    return _plan(nodes, start, end)


def summarization_input(
    nodes: Sequence[CompactionNode], plan: CompactionPlan
) -> tuple[Message, ...]:
    """The head's message, then every shadowed node's message in surface order.

    A shadowed in-history prompt is replayed in place, so the summarisation call is a genuine
    prefix of the conversation.
    """
    shadowed = set(plan.shadowed_seqs)
    head = nodes[0].message if nodes and nodes[0].is_system else None
    messages = [head] if head is not None else []
    messages += [node.message for node in nodes if node.seq in shadowed and node.message]
    return tuple(messages)


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    events: tuple[Event, ...]
    summary_seq: int
    commits: tuple[AppliedCommit, ...]
    series: SeriesState


def compact(
    state: AdmissionState,
    plan: CompactionPlan,
    summary: str,
    *,
    turn: int = 0,
    step: int = 0,
    counter: TokenCounter = HEURISTIC_COUNTER,
) -> CompactionOutcome:
    """Replace the planned range with one summary node, keeping the effective prompt.

    If the range shadows the prompt in force, the same commit empties the later active system
    nodes and rewrites the head to that prompt (appending a head if none survives). The summary
    is priced with ``counter``, the tokenizer that priced the shadowed nodes.
    """
    if not summary:
        raise InvalidArgument("summary", "must not be empty")
    summary_message = user_text(summary)
    summary_tokens = message_tokens(summary_message, counter)
    if summary_tokens >= plan.shadowed_tokens:
        raise SummaryNotSmaller(summary_tokens, plan.shadowed_tokens)

    seq = state.next_seq
    events: list[Event] = [
        Event(
            seq,
            EventKind.COMPACTION_SUMMARY,
            turn,
            step,
            Replace(plan.start_seq, plan.end_seq),
            plan.shadowed_seqs,
            summary_message,
        )
    ]
    summary_seq = seq
    seq += 1
    generation = state.series.replace_generation + 1

    prompt_in_force = effective_text(state.system_nodes)
    shadowed = set(plan.shadowed_seqs)
    surviving = tuple(node for node in state.system_nodes if node.seq not in shadowed)
    commits: tuple[SystemCommit, ...] = ()
    if effective_text(surviving) != prompt_in_force:
        commits = project(surviving, prompt_in_force, in_history=False, starts_series=True)
    consolidation = commit_events(commits, seq, turn=turn, step=step)
    events.extend(consolidation)
    applied = [AppliedCommit(e.seq, c) for e, c in zip(consolidation, commits, strict=True)]
    generation += replaces_in(commits)
    series = SeriesState(
        replace_generation=generation,
        last_request_generation=state.series.last_request_generation,
        last_header=state.series.last_header,
        last_context=state.series.last_context,
    )
    return CompactionOutcome(tuple(events), summary_seq, tuple(applied), series)


def compaction_node(
    seq: int, tokens: int, is_system: bool, message: Message | None
) -> CompactionNode:
    """How compaction sees one surviving node: its price, and the tool calls and results its
    message makes and answers."""
    return CompactionNode(
        seq,
        tokens,
        is_system,
        message,
        message.tool_call_ids() if message else (),
        message.tool_result_ids() if message else (),
    )
