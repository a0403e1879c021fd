"""Admission and reconciliation over a whole session (design note, "Testing")."""

from __future__ import annotations

from dataclasses import replace

import pytest
from admission_service.domain.errors import UnansweredToolCall
from admission_service.domain.events import EventKind
from admission_service.domain.messages import Tool
from admission_service.domain.series import HeaderReason

from .sim import CAPABLE, INCAPABLE, Sim, user

SYSTEM, USER = EventKind.SYSTEM_MESSAGE.value, EventKind.USER_MESSAGE.value
HEADER, CONTEXT = EventKind.REQUEST_HEADER.value, EventKind.REQUEST_CONTEXT.value
TOOL_A = Tool("read", "Read a file", '{"type":"object"}')
TOOL_B = Tool("write", "Write a file", '{"type":"object"}')
TOOL_UPDATE_ROUTE = replace(CAPABLE, tool_update=True)


def test_first_admission_reserves_the_head_then_users_header_context() -> None:
    sim = Sim()
    outcome = sim.admit("A", users=(user("hi"),))
    assert sim.kinds_since(0) == [SYSTEM, USER, HEADER, CONTEXT]
    assert outcome.header is not None and outcome.header.reason is HeaderReason.INITIAL
    assert outcome.header.starts_series is False
    assert outcome.context is not None and outcome.context.context.in_history is True
    assert outcome.user_seqs == (1,)
    assert sim.texts() == [("system", "A"), ("user", "hi")]


def test_append_on_a_continuing_in_history_series_needs_no_header() -> None:
    sim = Sim()
    sim.admit("A", users=(user("1"),))
    sim.assistant()
    mark = sim.log.next_seq
    outcome = sim.admit("B", users=(user("2"),))
    assert sim.kinds_since(mark) == [SYSTEM, USER]
    assert outcome.header is None and outcome.context is None
    assert outcome.commits[0].commit.update is True
    assert sim.texts() == [
        ("system", "A"),
        ("user", "1"),
        ("assistant", "ok"),
        ("system", "B"),
        ("user", "2"),
    ]
    assert sim.log.effective_prompt().location == "in_history"


def test_unchanged_prompt_commits_nothing() -> None:
    sim = Sim()
    sim.admit("A")
    mark = sim.log.next_seq
    outcome = sim.admit("A")
    assert sim.kinds_since(mark) == []
    assert outcome.events == ()


def test_incapable_route_rewrites_the_head_under_a_series_header() -> None:
    sim = Sim()
    sim.admit("A", INCAPABLE, users=(user("1"),))
    mark = sim.log.next_seq
    outcome = sim.admit("B", INCAPABLE, users=(user("2"),))
    # The head rewrite moves the generation, so the unchanged header is logged as "series".
    assert sim.kinds_since(mark) == [SYSTEM, USER, HEADER]
    assert outcome.header is not None and outcome.header.reason is HeaderReason.SERIES
    assert outcome.starts_series is True
    assert sim.texts() == [("system", "B"), ("user", "1"), ("user", "2")]


def test_declared_series_start_folds_the_prompt_into_node_zero() -> None:
    sim = Sim()
    sim.admit("A", users=(user("1"),))
    sim.admit("B", users=(user("2"),))
    mark = sim.log.next_seq
    outcome = sim.admit("B", users=(user("3"),), starts=True)
    # Effective text unchanged, yet consolidation runs: tail emptied, head rewritten.
    assert [c.commit.op.value for c in outcome.commits] == ["replace", "replace"]
    assert sim.kinds_since(mark) == [SYSTEM, SYSTEM, USER, HEADER]
    assert outcome.header is not None and outcome.header.reason is HeaderReason.SERIES
    assert sim.texts() == [("system", "B"), ("user", "1"), ("user", "2"), ("user", "3")]
    assert sim.log.effective_prompt().location == "head"


def test_series_start_with_only_the_head_and_unchanged_text_commits_no_prompt() -> None:
    sim = Sim()
    sim.admit("A")
    outcome = sim.admit("A", starts=True)
    assert outcome.commits == ()
    assert outcome.header is not None and outcome.header.reason is HeaderReason.SERIES


def test_compaction_moves_the_generation_and_the_next_request_rebaselines() -> None:
    sim = Sim()
    sim.admit("A", users=(user("1"),))
    sim.assistant("x" * 400)
    sim.admit("B", users=(user("2"),))
    sim.assistant("y" * 400)
    sim.compact(retain_tokens=0)
    assert sim.log.effective_prompt().text == "B"
    mark = sim.log.next_seq
    outcome = sim.admit("B", users=(user("3"),))
    assert outcome.starts_series is True
    assert outcome.header is not None and outcome.header.reason is HeaderReason.SERIES
    assert sim.kinds_since(mark) == [USER, HEADER]  # already consolidated by the compaction
    assert sim.texts()[0] == ("system", "B")
    assert [t for t in sim.system_texts() if t] == ["B"]


def test_tool_change_on_a_route_without_tool_update_starts_a_series() -> None:
    sim = Sim()
    sim.admit("A", tools=(TOOL_A,))
    sim.admit("B", tools=(TOOL_A,))  # appended in history
    mark = sim.log.next_seq
    outcome = sim.admit("B", tools=(TOOL_A, TOOL_B))
    assert outcome.header is not None
    assert outcome.header.reason is HeaderReason.CHANGE and outcome.header.starts_series
    assert sim.kinds_since(mark) == [SYSTEM, SYSTEM, HEADER]
    assert sim.system_texts() == ["B", ""]


def test_tool_addition_with_tool_update_support_accompanies_an_append() -> None:
    sim = Sim()
    sim.admit("A", TOOL_UPDATE_ROUTE, tools=(TOOL_A,))
    mark = sim.log.next_seq
    outcome = sim.admit("B", TOOL_UPDATE_ROUTE, tools=(TOOL_A, TOOL_B))
    assert sim.kinds_since(mark) == [SYSTEM, HEADER]
    assert outcome.header is not None
    assert outcome.header.reason is HeaderReason.CHANGE and not outcome.header.starts_series


def test_model_swap_alone_is_not_a_series_start() -> None:
    sim = Sim()
    sim.admit("A")
    other = replace(CAPABLE, model="deepseek-pro")
    outcome = sim.admit("B", other)
    assert [c.commit.op.value for c in outcome.commits] == ["append"]
    assert outcome.header is not None and outcome.header.reason is HeaderReason.CHANGE
    assert outcome.header.starts_series is False
    assert outcome.context is not None and outcome.context.context.model == "deepseek-pro"


def test_capable_to_incapable_consolidates_changed_and_unchanged_text() -> None:
    for text in ("B", "C"):
        sim = Sim()
        sim.admit("A")
        sim.admit("B")
        outcome = sim.admit(text, INCAPABLE)
        assert sim.system_texts() == [text, ""]
        assert outcome.context is not None and outcome.context.context.in_history is False
        assert [("system", text)] == [t for t in sim.texts() if t[0] == "system"]


def test_incapable_to_capable_appends() -> None:
    sim = Sim()
    sim.admit("A", INCAPABLE)
    outcome = sim.admit("B", CAPABLE)
    assert [c.commit.op.value for c in outcome.commits] == ["append"]
    assert outcome.context is not None and outcome.context.context.in_history is True


def test_resume_is_series_continuing_and_logs_a_resume_header() -> None:
    sim = Sim()
    sim.admit("A", users=(user("1"),))
    mark = sim.log.next_seq
    outcome = sim.admit("B", users=(user("2"),), resume=True)
    assert sim.kinds_since(mark) == [SYSTEM, USER, HEADER]
    assert outcome.header is not None and outcome.header.reason is HeaderReason.RESUME
    assert outcome.header.starts_series is False
    assert [c.commit.op.value for c in outcome.commits] == ["append"]
    # An unchanged prompt after resume commits no prompt event.
    outcome = sim.admit("B", resume=True)
    assert outcome.commits == ()


def test_clearing_on_both_routes_removes_three_versions_and_stays_clear() -> None:
    for route in (CAPABLE, INCAPABLE):
        sim = Sim()
        sim.admit("A")
        sim.admit("B", CAPABLE)
        sim.admit("C", CAPABLE)
        sim.admit("", route)
        assert [t for t in sim.texts() if t[0] == "system"] == []
        assert sim.log.effective_prompt().location == "none"
        mark = sim.log.next_seq
        sim.admit("", route)
        sim.admit("", route, resume=True)
        assert EventKind.SYSTEM_MESSAGE.value not in sim.kinds_since(mark)
        sim.admit("N", route)
        assert [t for t in sim.texts() if t[0] == "system"] == [("system", "N")]


def test_retry_after_compaction_shadowing_the_latest_prompt() -> None:
    for earlier_update in (False, True):
        sim = Sim()
        sim.admit("A", users=(user("1"),))
        sim.assistant("x" * 200)
        if earlier_update:
            sim.admit("B", users=(user("2"),))
            sim.assistant("y" * 200)
        admitted = sim.admit("C", users=(user("3"),))
        sim.assistant("z" * 200)
        sim.compact(retain_tokens=0)  # the "context too long" recovery compaction
        assert sim.log.effective_prompt().text == "C"
        mark = sim.log.next_seq
        retry = sim.reconcile(route=CAPABLE)
        assert retry.user_seqs == ()
        assert EventKind.USER_MESSAGE.value not in sim.kinds_since(mark)
        assert retry.starts_series is True
        assert sim.texts()[0] == ("system", "C")
        users = [e for e in sim.log.events if e.kind is EventKind.USER_MESSAGE]
        assert [u.message.text for u in users if u.message] == (
            ["1", "2", "3"] if earlier_update else ["1", "3"]
        )
        assert admitted.user_seqs
        # A second retry without new replacements adds nothing, not even a header.
        mark = sim.log.next_seq
        again = sim.reconcile()
        assert again.events == () and sim.kinds_since(mark) == []


def test_reconcile_reuses_the_admitted_prompt_and_never_declares_a_series() -> None:
    sim = Sim()
    sim.admit("A")
    sim.admit("B", starts=True, users=(user("1"),))
    mark = sim.log.next_seq
    outcome = sim.reconcile()
    assert outcome.events == ()
    assert sim.kinds_since(mark) == []


def test_header_series_flag_counts_the_consolidation_replacements() -> None:
    sim = Sim()
    sim.admit("A", tools=(TOOL_A,))
    sim.admit("B")  # tools dropped on a route without tool update: change + series
    header = sim.series.last_header
    assert header is not None and header.reason is HeaderReason.CHANGE and header.starts_series


def test_context_logged_when_any_field_changes() -> None:
    sim = Sim()
    sim.admit("A")
    assert sim.admit("A", replace(CAPABLE, context_window=64_000)).context is not None
    assert sim.admit("A", replace(CAPABLE, context_window=64_000)).context is None


def test_no_attempt_while_a_tool_call_is_unanswered() -> None:
    """The tool-call ordering rule: a step is admitted only once every call has its result, so
    nothing the attempt appends (a system update, a user) separates a call from its result."""
    sim = Sim()
    sim.admit("A", users=(user("go"),))
    sim.assistant("calling", "c1", "c2")
    sim.tool_result("c1")
    mark = sim.log.next_seq
    with pytest.raises(UnansweredToolCall) as caught:
        sim.admit("B", users=(user("next"),))
    assert caught.value.metadata == {"call_id": "c2", "unanswered": "1"}
    with pytest.raises(UnansweredToolCall):
        sim.admit("A")  # not even an unchanged prompt: the request would end with a bare call
    with pytest.raises(UnansweredToolCall):
        sim.reconcile()
    assert sim.log.next_seq == mark
    sim.tool_result("c2")
    sim.admit("B", users=(user("next"),))
    assert [role for role, _ in sim.texts()][-4:] == ["tool", "tool", "system", "user"]
