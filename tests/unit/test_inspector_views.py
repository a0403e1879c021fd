"""The inspector's views built from a simulated session (pure: no server, no browser)."""

from __future__ import annotations

from datetime import UTC, datetime

from admission_service.app.commands import EventView, LedgerEntry, Usage
from admission_service.app.trajectory import trajectory_entries
from admission_service.domain.accounting import CacheForecast, DivergenceReason
from admission_service.inspector.views import chat_items, ledger_chart, trajectory_rows

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
    chart = ledger_chart(entries, height=228)
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
