"""The windowed prompt fold (design note, "Presentation and accounting"; reference
``inspectSystemPrompt`` and ``inspectRequestPrompt``), case by case and as properties."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from admission_service.domain.errors import SummaryNotSmaller
from admission_service.domain.events import Append, Event, EventKind
from admission_service.domain.messages import Tool, user_text
from admission_service.domain.prompt_fold import (
    ChangeKind,
    PromptFoldState,
    PromptNode,
    PromptSnapshot,
    inspect_request_prompt,
    inspect_system_prompt,
)
from admission_service.domain.series import HeaderReason, RequestHeader
from hypothesis import given
from hypothesis import strategies as st

from tests.prompt_fold_fixtures import summary, system

from .sim import CAPABLE, INCAPABLE, Sim, user


def fold(events: Iterable[Event], state: PromptFoldState | None = None) -> PromptFoldState | None:
    for event in events:
        state = inspect_system_prompt(state, event)
    return state


def text_of(state: PromptFoldState | None) -> str | None:
    return state.effective.text if state is not None and state.effective is not None else None


def test_withholds_unknown_replacement_order_until_the_missing_prefix_is_loaded() -> None:
    prefix = [system(1, "A"), system(3, "B"), system(5, "A2", 1)]
    tail = [system(6, "C", 3), system(7, "D", 5)]
    window = fold(tail)
    assert window is not None and window.uncertain and window.effective is None
    assert window.nodes == ()
    assert text_of(fold([*prefix, *tail])) == "C"


def test_restores_a_after_compaction_shadows_b_keeping_historical_states() -> None:
    a = fold([system(1, "A")])
    b = inspect_system_prompt(a, system(4, "B"))
    restored = inspect_system_prompt(b, summary(7, 3, 5))
    assert restored is not None and restored.effective is not None
    assert (restored.effective.text, restored.effective.seq, restored.effective.update) == (
        "A",
        7,
        False,
    )
    assert text_of(a) == "A" and text_of(b) == "B"
    again = inspect_system_prompt(restored, summary(8, 7, 7))
    assert again is not None and again.effective is restored.effective


def test_uses_surface_order_across_chained_replacements_with_reversed_endpoints() -> None:
    state = fold(
        [
            system(1, "A"),
            system(4, "B"),
            system(6, "C"),
            system(8, "new A", 1),
            summary(9, 3, 5),
            summary(10, 9, 6),
        ]
    )
    assert state is not None and state.effective is not None
    assert (state.effective.text, state.effective.seq) == ("new A", 10)
    assert [item.node.text for item in state.nodes] == ["new A"]


def test_later_nonempty_nodes_win_over_head_rewrites_and_empty_tails_are_ignored() -> None:
    b = fold([system(1, "A"), system(3, "B"), system(5, "head", 1)])
    assert text_of(b) == "B"
    head = inspect_system_prompt(b, system(6, "", 3))
    assert head is not None and head.effective is not None
    assert (head.effective.text, head.effective.seq, head.effective.update) == ("head", 6, False)
    assert text_of(inspect_system_prompt(head, system(7, "", 5))) == ""


def test_does_not_invent_an_unloaded_head_after_a_cross_window_replacement() -> None:
    state = fold([system(8, "B"), summary(12, 5, 9)])
    assert state is not None and state.nodes == () and state.effective is None
    only = fold([summary(12, 5, 9)])
    assert only is not None and only.effective is None


def test_drops_shadowed_replacement_endpoints_without_mutating_earlier_states() -> None:
    first = fold([system(1, "A"), system(2, "B", 1)])
    state = first
    for seq in range(3, 100):
        state = inspect_system_prompt(state, system(seq, "C", seq - 1))
    assert state is not None and first is not None
    assert dict(state.replacements) == {99: 1}
    assert dict(first.replacements) == {2: 1}
    assert text_of(first) == "B"


def test_an_empty_initial_node_is_no_prompt_and_ordinary_appends_are_not_folded() -> None:
    assert inspect_system_prompt(None, system(2, "")).effective is None  # type: ignore[union-attr]
    ordinary = Event(3, EventKind.USER_MESSAGE, 1, 1, Append(), (), user_text("hi"))
    assert inspect_system_prompt(None, ordinary) is None
    state = fold([system(1, "A")])
    assert inspect_system_prompt(state, ordinary) is state


def test_update_is_true_only_for_an_append_after_a_nonempty_loaded_node() -> None:
    head = fold([system(1, "")])
    first = inspect_system_prompt(head, system(2, "A"))
    assert first is not None and first.introduced is not None and not first.introduced.update
    second = inspect_system_prompt(first, system(3, "B"))
    assert second is not None and second.introduced is not None and second.introduced.update
    rewrite = inspect_system_prompt(second, system(4, "C", 1))
    assert rewrite is not None and rewrite.introduced is not None
    assert not rewrite.introduced.update
    # A window that lacks the earlier node presents the update as an initial prompt.
    window = fold([system(3, "B")])
    assert window is not None and window.introduced is not None and not window.introduced.update


CONFIG = (("temperature", "0.2"),)
READ = Tool("read", "Read a file", '{"type":"object"}')
WRITE = Tool("write", "Write", '{"type":"object"}')


def header(
    tools: tuple[Tool, ...] = (READ,), config: tuple[tuple[str, str], ...] = CONFIG
) -> RequestHeader:
    return RequestHeader("test", "test", tools, config)


def node(seq: int, text: str, update: bool = False) -> PromptNode:
    return PromptNode(seq, None, 1, seq, text, update)


def test_the_first_header_is_the_initial_prompt_anchored_at_its_system_node() -> None:
    result = inspect_request_prompt(None, header(), HeaderReason.INITIAL, (3, None), node(1, "S"))
    assert result.prompt == PromptSnapshot("test", "test", CONFIG, "S", (READ,))
    assert result.change is not None
    assert (result.change.seq, result.change.kind, result.change.previous) == (
        1,
        ChangeKind.INITIAL,
        None,
    )
    bare = inspect_request_prompt(None, header(), HeaderReason.INITIAL, (2, None), None)
    assert bare.change is not None and bare.change.seq == 2 and bare.prompt.system == ""


def test_a_resume_header_without_a_loaded_previous_prompt_reports_no_change() -> None:
    result = inspect_request_prompt(None, header(), HeaderReason.RESUME, (2, None), node(1, "S"))
    assert result.change is None


def test_classifies_system_tools_and_combined_changes() -> None:
    initial = inspect_request_prompt(
        None, header(), HeaderReason.INITIAL, (2, None), node(1, "first")
    ).prompt
    system_ = inspect_request_prompt(
        initial, header(), HeaderReason.SERIES, (4, None), node(3, "second")
    )
    tools = inspect_request_prompt(
        system_.prompt, header((WRITE,)), HeaderReason.CHANGE, (5, None), node(3, "second")
    )
    both = inspect_request_prompt(
        tools.prompt, header(()), HeaderReason.CHANGE, (7, None), node(6, "third")
    )
    assert system_.change is not None and tools.change is not None and both.change is not None
    assert (system_.change.seq, system_.change.kind, system_.change.previous) == (
        3,
        ChangeKind.SYSTEM,
        initial,
    )
    assert (tools.change.seq, tools.change.kind) == (5, ChangeKind.TOOLS)
    assert (both.change.seq, both.change.kind) == (6, ChangeKind.SYSTEM_AND_TOOLS)
    emptied = inspect_request_prompt(initial, header(), HeaderReason.SERIES, (4, None), node(3, ""))
    assert emptied.change is not None and emptied.change.kind is ChangeKind.SYSTEM


def test_a_header_after_an_update_reports_no_system_change() -> None:
    initial = inspect_request_prompt(
        None, header(), HeaderReason.INITIAL, (2, None), node(1, "first")
    ).prompt
    series = inspect_request_prompt(
        initial, header(), HeaderReason.SERIES, (4, None), node(3, "updated", update=True)
    )
    assert series.change is None and series.prompt.system == "updated"
    tools = inspect_request_prompt(
        initial, header((WRITE,)), HeaderReason.CHANGE, (5, None), node(3, "updated", update=True)
    )
    assert tools.change is not None
    assert (tools.change.seq, tools.change.kind) == (5, ChangeKind.TOOLS)


def test_a_config_change_alone_is_no_prompt_change() -> None:
    previous = inspect_request_prompt(
        None, header(), HeaderReason.INITIAL, (2, None), node(1, "same")
    ).prompt
    later = inspect_request_prompt(
        previous,
        header(config=(("temperature", "0.9"),)),
        HeaderReason.CHANGE,
        (3, None),
        node(1, "same"),
    )
    assert later.change is None and later.prompt.config == (("temperature", "0.9"),)


# ---- properties: the fold against the surface the domain keeps --------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("admit"), st.sampled_from(["", "A", "B", "C"]), st.booleans(), st.booleans()
        ),
        st.tuples(st.just("compact"), st.integers(0, 40), st.just(False), st.just(False)),
        st.tuples(st.just("assistant"), st.just(""), st.just(False), st.just(False)),
    ),
    max_size=14,
)


def simulate(ops: list[tuple[str, object, bool, bool]]) -> Sim:
    """A session as the service builds one: its first event is the head its first Admit
    reserves (so a fold of the whole log starts at seq 0 and is never uncertain)."""
    sim = Sim()
    sim.admit("A", CAPABLE, users=(user("u"),))
    for name, value, capable, starts in ops:
        if name == "admit":
            sim.admit(
                str(value), CAPABLE if capable else INCAPABLE, users=(user("u"),), starts=starts
            )
        elif name == "assistant":
            sim.assistant("reply")
        elif sim.plan(int(str(value))) is not None:
            with contextlib.suppress(SummaryNotSmaller):
                sim.compact(int(str(value)), summary="s")
    return sim


@given(OPS)
def test_the_fold_of_a_whole_log_agrees_with_the_surface(ops: list) -> None:  # type: ignore[type-arg]
    sim = simulate(ops)
    state: PromptFoldState | None = None
    log = Sim()
    for event in sim.log.events:
        state = inspect_system_prompt(state, event)
        log.log.append(event)
        expected = log.log.effective_prompt().text
        assert (text_of(state) or "") == expected
        if state is not None:
            assert not state.uncertain
            assert [i.node.seq for i in state.nodes] == [n.seq for n in log.log.system_nodes()]
            assert set(state.replacements) <= set(log.log.nodes)


@given(OPS, st.integers(0, 60))
def test_a_window_shows_the_full_prompt_or_nothing(ops: list, start: int) -> None:  # type: ignore[type-arg]
    events = simulate(ops).log.events
    full = fold(events)
    window = fold(events[start:])
    if window is None:
        return
    if window.uncertain:
        assert window.effective is None and window.nodes == ()
    elif window.effective is not None and window.effective.text:
        assert window.effective.text == text_of(full)


@given(OPS)
def test_earlier_states_never_change(ops: list) -> None:  # type: ignore[type-arg]
    events = simulate(ops).log.events
    states: list[PromptFoldState | None] = []
    snapshots = []
    state: PromptFoldState | None = None
    for event in events:
        state = inspect_system_prompt(state, event)
        states.append(state)
        snapshots.append(repr(state))
    assert [repr(s) for s in states] == snapshots
