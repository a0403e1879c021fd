"""The inspector's views built from a simulated session (pure: no server, no browser)."""

from __future__ import annotations

from datetime import UTC, datetime

from admission_service.app.commands import EventView, LedgerEntry, Usage
from admission_service.app.trajectory_page import trajectory_entries
from admission_service.domain.accounting import CacheForecast, DivergenceReason
from admission_service.domain.messages import Tool
from admission_service.inspector.views import chat_items_of_log as chat_items
from admission_service.inspector.views import ledger_chart, prompt_diff, trajectory_rows

from tests.unit.domain.sim import INCAPABLE, Sim, user

TIME = datetime(2026, 1, 1, tzinfo=UTC)


def views(sim: Sim) -> list[EventView]:
    return [EventView(event, TIME) for event in sim.log.events]


def test_chat_shows_the_surface_in_order_with_update_cards_and_headers_where_logged() -> None:
    sim = Sim()
    sim.admit("A", users=(user("u1"),))
    sim.assistant("a1")
    sim.admit("B", users=(user("u2"),))
    items = chat_items(views(sim))
    assert [(i.kind, i.seq) for i in items] == [
        ("system", 0),
        ("message", 1),
        ("header", 2),
        ("message", 4),
        ("update", 5),
        ("message", 6),
    ]
    header = items[2]
    assert header.header is not None and header.header.label == "initial"
    assert header.prompt is None  # the head card of the same step already shows it


def test_chat_hides_empty_nodes_and_shows_a_header_prompt_for_a_change_from_another_step() -> None:
    sim = Sim()
    sim.admit("A", users=(user("u1"),))
    sim.admit("B", users=(user("u2"),))
    sim.admit("", users=(user("u3"),))  # cleared: the head and B are emptied
    sim.admit("C", INCAPABLE, users=(user("u4"),))
    items = chat_items(views(sim))
    assert [i.text for i in items if i.kind in ("system", "update")] == ["C"]
    series = [i for i in items if i.kind == "header" and i.change]
    assert series[-1].change == "system"


def test_ledger_chart_scales_to_the_largest_value_and_skips_missing_usage() -> None:
    sim = Sim()
    sim.admit("A", users=(user("u1"),))
    first = sim.log.next_seq
    sim.admit("B", users=(user("u2"),))
    second = sim.log.next_seq
    forecasts = [
        CacheForecast(0, 0, 2, 20, 0, DivergenceReason.FIRST_REQUEST),
        CacheForecast(2, 50, 4, 80, 2, DivergenceReason.NONE),
    ]
    ledger = [
        (
            LedgerEntry(0, "a1", 0, forecasts[0], Usage(input_tokens=20, cache_read_tokens=100)),
            first,
        ),
        (LedgerEntry(1, "a2", 0, forecasts[1], None), second),
    ]
    entries = trajectory_entries(ledger, [(e, TIME) for e in sim.log.events], since=0)
    chart = ledger_chart([entry.ledger for entry in entries], height=228)
    assert chart.maximum == 100
    assert [(bar.kind, bar.value) for bar in chart.bars] == [
        ("forecast", 0),
        ("observed", 100),
        ("forecast", 50),
    ]
    tallest = max(chart.bars, key=lambda bar: bar.height)
    assert tallest.height == chart.plot_height and tallest.y == chart.top
    rows = trajectory_rows(entries)
    assert [row.change for row in rows] == ["initial", "system"]
    assert rows[1].previous_prompt == "A" and rows[1].forecast.endswith("(prefix kept)")
    assert rows[1].observed == "not recorded"


def chat_order(sim: Sim) -> list[tuple[str, int, int, str]]:
    """(kind, turn, step, text or header label) of each card, in the order Chat shows them."""
    return [
        (i.kind, i.turn, i.step, i.header.label if i.header is not None else i.text)
        for i in chat_items(views(sim))
    ]


def test_header_cards_stay_at_their_surface_place_after_a_head_replacement() -> None:
    # A route without in-history updates: every change rewrites node 0 (a new seq, position 0).
    sim = Sim()
    for step, prompt in enumerate(["A", "B", "C", "B"], start=1):
        sim.admit(prompt, INCAPABLE, users=(user(f"u{step}"),), step=step)
        sim.assistant(f"a{step}")
    order = chat_order(sim)
    # Node 0 shows the prompt in force; each header sits before the answer of its own step.
    assert order[0][0] == "system" and order[0][3] == "B"
    texts = [entry[3] if entry[0] != "header" else f"header {entry[2]}" for entry in order[1:]]
    assert texts == [
        "u1", "header 1", "a1",
        "u2", "header 2", "a2",
        "u3", "header 3", "a3",
        "u4", "header 4", "a4",
    ]  # fmt: skip


def test_header_cards_stay_in_place_after_a_series_start_consolidation() -> None:
    sim = Sim()
    sim.admit("A", users=(user("u1"),), step=1)
    sim.assistant("a1")
    sim.admit("B", users=(user("u2"),), step=2)  # in-history update
    sim.assistant("a2")
    sim.admit("B", users=(user("u3"),), step=3, starts=True)  # consolidated into the head
    sim.assistant("a3")
    order = [(kind, step, text) for kind, _, step, text in chat_order(sim)]
    assert order[0][0] == "system" and order[0][2] == "B"
    rest = [text if kind != "header" else f"header {step}" for kind, step, text in order[1:]]
    assert rest == ["u1", "header 1", "a1", "u2", "a2", "u3", "header 3", "a3"]


def test_tool_results_keep_their_lines() -> None:
    sim = Sim()
    sim.admit("A", users=(user("u1"),))
    sim.assistant("looking", "call-1")
    sim.tool_result("call-1", "line one\nline two\n  indented three")
    result = [i for i in chat_items(views(sim)) if i.role == "tool"]
    assert result[0].text == "[tool result call-1]\nline one\nline two\n  indented three"


def test_a_compaction_summary_shows_the_turn_and_step_it_closes() -> None:
    sim = Sim()
    sim.admit("A", users=(user("u1 " * 40),), step=1)
    sim.assistant("a1 " * 40)
    sim.admit("A", users=(user("u2 " * 40),), step=2)
    sim.assistant("a2 " * 40)
    sim.compact(summary="short")
    summary = [i for i in chat_items(views(sim)) if i.role == "summary"]
    assert [(s.text, s.turn, s.step) for s in summary] == [("short", 1, 2)]


def test_a_prompt_diff_shows_added_and_removed_lines_with_the_unchanged_runs_folded() -> None:
    previous = "\n".join(["You are an agent.", "Rule 1", "Rule 2", "Rule 3", "Rule 4", "End"])
    current = "\n".join(["You are an agent.", "Rule 1", "Rule 2", "Rule 3", "Rule 4b", "End", "PS"])
    diff = [(line.kind, line.text) for line in prompt_diff(previous, current)]
    assert diff == [
        ("gap", "3 unchanged lines"),
        ("same", "Rule 3"),
        ("removed", "Rule 4"),
        ("added", "Rule 4b"),
        ("same", "End"),
        ("added", "PS"),
    ]
    assert prompt_diff(current, current) == ()
    cleared = prompt_diff("A\nB", "")
    assert [(line.kind, line.text) for line in cleared] == [("removed", "A"), ("removed", "B")]
    assert [line.kind for line in prompt_diff("1\n2\n3\n4\n5", "0\n2\n3\n4\n5")] == [
        "removed", "added", "same", "gap",
    ]  # fmt: skip


def test_trajectory_rows_carry_the_prompt_only_where_it_changed_and_the_diff() -> None:
    sim = Sim()
    ends = []  # each request's log position: the events it saw
    sim.admit("A\nkeep", users=(user("u1"),))
    ends.append(sim.log.next_seq)
    sim.assistant("a1")
    sim.admit("A\nkeep", users=(user("u2"),))  # unchanged
    ends.append(sim.log.next_seq)
    sim.assistant("a2")
    sim.admit("B\nkeep", users=(user("u3"),))  # in-history update
    ends.append(sim.log.next_seq)
    forecast = CacheForecast(0, 0, 1, 1, 0, DivergenceReason.FIRST_REQUEST)
    ledger = [(LedgerEntry(i, f"a{i}", 0, forecast, None), end) for i, end in enumerate(ends)]
    entries = trajectory_entries(ledger, [(e, TIME) for e in sim.log.events], since=0)
    rows = trajectory_rows(entries)
    assert [(row.change, row.shows_prompt) for row in rows] == [
        ("initial", True),
        ("", False),  # the same prompt: its text is not repeated
        ("system", True),
    ]
    assert [(line.kind, line.text) for line in rows[-1].diff] == [
        ("removed", "A"),
        ("added", "B"),
        ("same", "keep"),
    ]
    assert rows[0].shows_prompt and rows[0].diff == ()


def test_trajectory_rows_past_the_text_budget_are_elided_but_the_first_always_shows() -> None:
    sim = Sim()
    ends = []
    for version in range(4):
        sim.admit(f"v{version}\n" + "rule\n" * 500, users=(user(f"u{version}"),))
        ends.append(sim.log.next_seq)
    forecast = CacheForecast(0, 0, 1, 1, 0, DivergenceReason.FIRST_REQUEST)
    ledger = [(LedgerEntry(i, f"a{i}", 0, forecast, None), end) for i, end in enumerate(ends)]
    entries = trajectory_entries(ledger, [(e, TIME) for e in sim.log.events], since=0)
    # Each row shows its changed 2 503-byte prompt and an 8-byte diff: 5 100 bytes hold two.
    rows = trajectory_rows(entries, text_budget=5100)
    assert [row.elided for row in rows] == [False, False, True, True]
    assert rows[1].diff != () and rows[1].shows_prompt
    assert rows[2].diff == () and not rows[2].shows_prompt
    assert [row.elided for row in trajectory_rows(entries, text_budget=1)] == [
        False,
        True,
        True,
        True,
    ]
    assert not any(row.elided for row in trajectory_rows(entries))


def test_the_headers_of_compacted_requests_sit_before_the_summary() -> None:
    sim = Sim()
    sim.admit("A", users=(user("u1 " * 40),), step=1)
    sim.assistant("a1 " * 40)
    sim.admit("A", users=(user("u2 " * 40),), step=2, tools=(Tool("read", "", "{}"),))
    sim.assistant("a2 " * 40)
    sim.compact(summary="short")
    sim.admit("A", users=(user("u3"),), step=3)
    # Before: the summary first, then the headers of the requests it replaced.
    assert [(kind, step, text) for kind, _, step, text in chat_order(sim)] == [
        ("system", 1, "A"),
        ("header", 1, "initial"),
        ("header", 2, "change"),
        ("message", 2, "short"),
        ("message", 3, "u3"),
        ("header", 3, "change"),
    ]
