"""Compaction: range selection, summarisation input, and the effective-prompt guarantee."""

from __future__ import annotations

import pytest
from admission_service.domain.compaction import (
    CompactionNode,
    compact,
    plan_by_tokens,
    plan_range,
    summarization_input,
)
from admission_service.domain.errors import InvalidArgument, SummaryNotSmaller
from admission_service.domain.events import EventKind, Replace

from .sim import CAPABLE, Sim, user


def node(
    seq: int,
    tokens: int = 10,
    *,
    system: bool = False,
    calls: tuple[str, ...] = (),
    results: tuple[str, ...] = (),
) -> CompactionNode:
    return CompactionNode(seq, tokens, system, None, calls, results)


def test_range_starts_after_a_system_node_zero() -> None:
    nodes = [node(0, system=True), node(1), node(2), node(3)]
    plan = plan_by_tokens(nodes, retain_tokens=10)
    assert plan is not None
    assert (plan.start_seq, plan.end_seq, plan.shadowed_seqs) == (1, 2, (1, 2))
    assert plan.shadowed_tokens == 20


def test_range_starts_at_zero_when_node_zero_is_not_a_system_node() -> None:
    plan = plan_by_tokens([node(0), node(1), node(2)], retain_tokens=0)
    assert plan is not None and plan.shadowed_seqs == (0, 1, 2)


def test_nothing_to_compact() -> None:
    assert plan_by_tokens([node(0, system=True), node(1)], retain_tokens=10) is None
    assert plan_by_tokens([node(0, system=True)], retain_tokens=0) is None


def test_never_splits_a_tool_call_from_its_result() -> None:
    nodes = [
        node(0, system=True),
        node(1),
        node(2, calls=("c1",)),
        node(3, results=("c1",)),
        node(4),
    ]
    # Retaining 20 tokens would cut between the call (2) and its result (3): move left.
    plan = plan_by_tokens(nodes, retain_tokens=20)
    assert plan is not None and plan.shadowed_seqs == (1,)
    with pytest.raises(InvalidArgument, match="split a tool call"):
        plan_range(nodes, 1, 2)
    with pytest.raises(InvalidArgument, match="split a tool call"):
        plan_range(nodes, 3, 4)
    assert plan_range(nodes, 2, 3).shadowed_seqs == (2, 3)


def test_explicit_range_validation() -> None:
    nodes = [node(0, system=True), node(1), node(2)]
    with pytest.raises(InvalidArgument, match=r"range\.start_seq"):
        plan_range(nodes, 9, 2)
    with pytest.raises(InvalidArgument, match=r"range\.end_seq"):
        plan_range(nodes, 1, 9)
    with pytest.raises(InvalidArgument, match="after end_seq"):
        plan_range(nodes, 2, 1)
    with pytest.raises(InvalidArgument, match="system head"):
        plan_range(nodes, 0, 1)


def test_summarization_input_replays_a_shadowed_prompt_in_place() -> None:
    sim = Sim()
    sim.admit("A", users=(user("1"),))
    sim.assistant("a1")
    sim.admit("B", users=(user("2"),))
    sim.assistant("a2")
    sim.admit("", users=(user("3"),))  # clears: B becomes a dormant empty node
    sim.admit("C", users=(user("4"),))
    plan = sim.plan(retain_tokens=0)
    assert plan is not None
    texts = [(m.role.value, m.text) for m in summarization_input(sim.compaction_nodes(), plan)]
    # Node 0 was emptied by the clear, so no head message; C is replayed in place.
    assert texts == [
        ("user", "1"),
        ("assistant", "a1"),
        ("user", "2"),
        ("assistant", "a2"),
        ("user", "3"),
        ("system", "C"),
        ("user", "4"),
    ]


def test_summarization_input_starts_with_the_head() -> None:
    sim = Sim()
    sim.admit("A", users=(user("1"),))
    sim.admit("B", users=(user("2"),))
    plan = sim.plan()
    assert plan is not None
    messages = summarization_input(sim.compaction_nodes(), plan)
    assert [m.text for m in messages] == ["A", "1", "B", "2"]


def test_compaction_keeps_the_shadowed_in_history_prompt_in_force() -> None:
    sim = Sim()
    sim.admit("A", users=(user("1" * 40),))
    sim.admit("B", users=(user("2" * 40),))
    sim.admit("C", users=(user("3" * 40),))
    outcome = sim.compact(retain_tokens=0)
    # Summary replaces [1..], then the tail C... is gone, so the head is rewritten to C.
    kinds = [e.kind for e in outcome.events]
    assert kinds == [EventKind.COMPACTION_SUMMARY, EventKind.SYSTEM_MESSAGE]
    assert sim.log.effective_prompt().text == "C"
    assert sim.log.effective_prompt().location == "head"
    assert [m.text for m in sim.log.derived_messages()] == ["C", "sum"]
    summary = outcome.events[0]
    assert isinstance(summary.op, Replace)
    # It cites every shadowed node (header and context events are not nodes).
    assert summary.source_seqs == (1, 4, 5, 6, 7)


def test_compaction_empties_surviving_tails_when_it_consolidates() -> None:
    sim = Sim()
    sim.admit("A", users=(user("1" * 40),))
    sim.admit("B", users=(user("2" * 40),))
    sim.admit("C", users=(user("3" * 40),))
    sim.admit("C", users=(user("4" * 40),))
    # Keep the newest user only: C (seq 5) is shadowed, head rewritten, nothing else active.
    sim.compact(retain_tokens=1)
    assert sim.log.effective_prompt().text == "C"
    assert [m.role.value for m in sim.log.derived_messages()] == ["system", "user", "user"]


def test_compaction_that_leaves_the_prompt_in_force_adds_no_system_event() -> None:
    sim = Sim()
    sim.admit("A", users=(user("1" * 40),))
    sim.assistant("x" * 40)
    sim.admit("B", users=(user("2"),))
    outcome = sim.compact(retain_tokens=10)
    assert [e.kind for e in outcome.events] == [EventKind.COMPACTION_SUMMARY]
    assert sim.log.effective_prompt().text == "B"


def test_summary_must_be_smaller_and_non_empty() -> None:
    sim = Sim()
    sim.admit("A", users=(user("1"),))
    plan = sim.plan()
    assert plan is not None
    with pytest.raises(SummaryNotSmaller):
        compact(sim.state(), plan, "a much longer summary than the range it replaces")
    with pytest.raises(InvalidArgument, match="summary"):
        compact(sim.state(), plan, "")


def test_compaction_bumps_the_generation_so_the_next_request_starts_a_series() -> None:
    sim = Sim()
    sim.admit("A", CAPABLE, users=(user("1" * 80),))
    sim.compact()
    assert sim.series.generation_moved()
