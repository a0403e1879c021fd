"""The trajectory fold: synthetic header facts for in-history updates, the comparison state,
and per-request changes, case by case and as properties over simulated sessions."""

from __future__ import annotations

import contextlib
from dataclasses import replace

from admission_service.domain.admission import Attempt, admit
from admission_service.domain.errors import SummaryNotSmaller
from admission_service.domain.messages import Tool
from admission_service.domain.prompt_fold import ChangeKind
from admission_service.domain.series import HeaderReason, Route
from admission_service.domain.trajectory import (
    TrajectoryPoint,
    prompt_version,
    tool_set_version,
    trajectory,
)
from hypothesis import given
from hypothesis import strategies as st

from .sim import CAPABLE, INCAPABLE, Sim, user

READ = Tool("read", "", "{}")
WRITE = Tool("write", "", "{}")
TOOL_CAPABLE = replace(CAPABLE, tool_update=True)


# PromptNode compares by identity (the fold asks "the same node?"), so points built by two
# folds are compared by their printed values.


class Recorder(Sim):
    """A simulated session that remembers each request's log position."""

    positions: list[int]
    expected: list[tuple[str, tuple[Tool, ...], Route, tuple[tuple[str, str], ...]]]

    def request(self, rendered: str, route: Route = CAPABLE, **fields: object) -> None:
        if not hasattr(self, "positions"):
            self.positions = []
        self.admit(rendered, route, users=(user("u"),), **fields)  # type: ignore[arg-type]
        self.positions.append(self.log.next_seq)

    def retry(self) -> None:
        self.reconcile()
        self.positions.append(self.log.next_seq)

    def points(self, since_index: int = 0) -> tuple[TrajectoryPoint, ...]:
        events = [(event, None) for event in self.log.events]
        since = self.positions[since_index - 1] if since_index else 0
        return trajectory(events, self.positions[since_index:], since=since)


def test_a_b_c_reports_b_as_the_previous_prompt_of_c() -> None:
    sim = Recorder()
    for prompt in "ABC":
        sim.request(prompt)
    first, b, c = sim.points()
    assert first.change is not None and first.change.kind is ChangeKind.INITIAL
    assert first.header is not None and first.header.reason is HeaderReason.INITIAL
    for point, text, previous in ((b, "B", "A"), (c, "C", "B")):
        assert point.header is not None and point.header.synthetic
        assert point.header.prompt.system == text
        assert point.change is not None and point.change.kind is ChangeKind.SYSTEM
        assert point.change.previous is not None and point.change.previous.system == previous
        assert point.effective is not None and point.effective.update


def test_a_real_header_after_an_update_has_no_system_change_of_its_own() -> None:
    sim = Recorder()
    sim.request("A", TOOL_CAPABLE, tools=(READ,))
    sim.request("B", TOOL_CAPABLE, tools=(READ, WRITE))
    _, second = sim.points()
    synthetic, real = second.headers
    assert synthetic.synthetic and real.reason is HeaderReason.CHANGE
    assert real.change is not None and real.change.kind is ChangeKind.TOOLS
    assert real.change.previous is not None and real.change.previous.system == "B"
    assert second.change is not None and second.change.kind is ChangeKind.SYSTEM_AND_TOOLS


def test_a_header_without_a_change_inherits_the_update_but_later_requests_do_not() -> None:
    sim = Recorder()
    sim.request("A")
    sim.request("B")
    # A resume logs a header that changes nothing: it inherits B's change as a header fact…
    sim.request("B", resume=True)
    _, b, resumed = sim.points()
    (fact,) = resumed.headers
    assert fact.reason is HeaderReason.RESUME
    assert b.header is not None and fact.change is b.header.change
    # …but the request reports no change of its own: B was the previous request's prompt.
    assert resumed.change is None


def test_an_incapable_route_consolidates_and_reports_a_system_change() -> None:
    sim = Recorder()
    sim.request("A", INCAPABLE)
    sim.request("B", INCAPABLE)
    _, second = sim.points()
    assert second.header is not None and not second.header.synthetic
    assert second.header.reason is HeaderReason.SERIES and second.starts_series
    assert second.change is not None and second.change.kind is ChangeKind.SYSTEM
    assert second.change.previous is not None and second.change.previous.system == "A"


def test_a_retry_that_logs_nothing_sees_the_same_prompt_and_introduces_nothing() -> None:
    sim = Recorder()
    sim.request("A")
    sim.retry()
    first, retry = sim.points()
    assert retry.headers == () and retry.change is None
    assert retry.header is first.header


def test_pages_give_the_same_points_as_the_whole_log() -> None:
    sim = Recorder()
    for prompt in "ABCAB":
        sim.request(prompt)
    whole = sim.points()
    for start in range(len(whole)):
        assert repr(sim.points(start)) == repr(whole[start:])


# ---- properties --------------------------------------------------------------------------

STEPS = st.lists(
    st.tuples(
        st.sampled_from(["", "A", "B", "C"]),
        st.sampled_from([CAPABLE, INCAPABLE, TOOL_CAPABLE]),
        st.sampled_from([(), (READ,), (READ, WRITE)]),
        st.sampled_from(["admit", "starts", "resume", "retry", "compact"]),
        st.sampled_from([(), (("temperature", "0.2"),), (("temperature", "0.7"),)]),
    ),
    min_size=1,
    max_size=12,
)


def run(steps: list) -> Recorder:  # type: ignore[type-arg]
    sim = Recorder()
    sim.positions = []
    expected: list[tuple[str, tuple[Tool, ...], Route, tuple[tuple[str, str], ...]]] = []
    for index, (prompt, route, tools, how, config) in enumerate(steps):
        if index and how == "retry":
            sim.retry()
            expected.append(expected[-1])
            continue
        if index and how == "compact" and sim.plan(0) is not None:
            with contextlib.suppress(SummaryNotSmaller):
                sim.compact(0, summary="s")
        sim.counter += 1
        attempt = sim.attempts.setdefault(
            f"a{sim.counter}",
            _attempt(sim.counter, prompt, route, tools, how, config),
        )
        sim._apply(admit(sim.state(), attempt))
        sim.positions.append(sim.log.next_seq)
        expected.append((sim.log.effective_prompt().text, tools, route, config))
    sim.expected = expected
    return sim


def _attempt(
    counter: int,
    prompt: str,
    route: Route,
    tools: tuple[Tool, ...],
    how: str,
    config: tuple[tuple[str, str], ...],
) -> Attempt:
    return Attempt(
        f"a{counter}",
        1,
        counter,
        prompt,
        tools,
        route,
        starts_request_series=how == "starts",
        users=(user("u"),),
        resume=how == "resume",
        config=config,
    )


@given(STEPS)
def test_each_request_sees_its_prompt_route_tools_and_config(steps: list) -> None:  # type: ignore[type-arg]
    sim = run(steps)
    points = sim.points()
    previous = None
    for point, (text, tools, route, config) in zip(points, sim.expected, strict=True):
        assert point.header is not None
        prompt = point.header.prompt
        assert prompt.system == text
        assert (point.effective.text if point.effective else "") == text
        assert (prompt.tools, prompt.provider, prompt.model, prompt.config) == (
            tools,
            route.provider,
            route.model,
            config,
        )
        change = point.change
        if previous is None:
            assert change is not None and change.kind is ChangeKind.INITIAL
        else:
            system = previous.system != prompt.system
            tools_changed = previous.tools != prompt.tools
            if change is None:
                assert not system and not tools_changed
            else:
                assert change.previous == previous
                kinds = {
                    (True, False): ChangeKind.SYSTEM,
                    (False, True): ChangeKind.TOOLS,
                    (True, True): ChangeKind.SYSTEM_AND_TOOLS,
                }
                assert change.kind is kinds[(system, tools_changed)]
        previous = prompt


@given(STEPS, st.integers(0, 12))
def test_a_page_starting_anywhere_matches_the_whole_trajectory(steps: list, start: int) -> None:  # type: ignore[type-arg]
    sim = run(steps)
    whole = sim.points()
    start = min(start, len(whole))
    assert repr(sim.points(start)) == repr(whole[start:])


def test_a_version_id_names_the_content() -> None:
    read = Tool("read", "Read a file", "{}")
    assert prompt_version("") == "" and tool_set_version(()) == ""
    assert prompt_version("A") == prompt_version("A") != prompt_version("B")
    assert len(prompt_version("A")) == 32
    assert tool_set_version((read,)) == tool_set_version((Tool("read", "Read a file", "{}"),))
    # Every field and the order count; fields are length-prefixed, so no two splits collide.
    assert tool_set_version((read,)) != tool_set_version((Tool("read", "Read a file", "{ }"),))
    assert tool_set_version((Tool("ab", "c", ""),)) != tool_set_version((Tool("a", "bc", ""),))
    write = Tool("write", "", "{}")
    assert tool_set_version((read, write)) != tool_set_version((write, read))
    # A prompt and a tool set never share an id.
    assert prompt_version("read") != tool_set_version((Tool("read", "", ""),))
