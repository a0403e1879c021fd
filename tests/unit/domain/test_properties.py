"""Property-based tests over random operation sequences (issue 2, SPEC §2 and §5)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from admission_service.domain.accounting import (
    PreviousRequest,
    RequestKey,
    message_tokens,
)
from admission_service.domain.admission import admit
from admission_service.domain.errors import UnansweredToolCall
from admission_service.domain.events import Replace
from admission_service.domain.messages import Message, Role, Tool
from admission_service.domain.series import Route
from admission_service.domain.surface import SessionLog
from admission_service.domain.wire import WireFormat, render
from admission_service.storage import codec
from hypothesis import given
from hypothesis import strategies as st

from .sim import Divergence, Sim, forecast, user

PROMPTS = ["", "A", "B", "C", "A\x00\U0001f600"]
TOOLSETS = [(), (Tool("t1", "", "{}"),), (Tool("t1", "", "{}"), Tool("t2", "", "{}"))]


@dataclass(frozen=True)
class AdmitOp:
    rendered: str
    in_history: bool
    tool_update: bool
    tools: int
    starts: bool
    resume: bool
    users: int
    model: str


@dataclass(frozen=True)
class AssistantOp:
    calls: int


@dataclass(frozen=True)
class ToolResultOp:
    pass


@dataclass(frozen=True)
class ReconcileOp:
    in_history: bool
    model: str


@dataclass(frozen=True)
class CompactOp:
    retain_tokens: int


models = st.sampled_from(["m1", "m2"])
admit_ops = st.builds(
    AdmitOp,
    st.sampled_from(PROMPTS),
    st.booleans(),
    st.booleans(),
    st.integers(0, len(TOOLSETS) - 1),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2),
    models,
)
operations = st.lists(
    st.one_of(
        admit_ops,
        st.builds(AssistantOp, st.integers(0, 2)),
        st.just(ToolResultOp()),
        st.builds(ReconcileOp, st.booleans(), models),
        st.builds(CompactOp, st.sampled_from([0, 10, 40, 200])),
    ),
    max_size=40,
)


def route(in_history: bool, tool_update: bool, model: str) -> Route:
    return Route("p", model, 1000, in_history=in_history, tool_update=tool_update)


def system_positions(messages: list[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.role is Role.SYSTEM]


class Checker:
    """Drives a Sim through the operations and checks the invariants after each one."""

    def __init__(self) -> None:
        self.sim = Sim()
        self.previous_request: list[Message] | None = None
        self.previous_nodes: list[int] = []
        self.previous_key: RequestKey | None = None
        self.summaries = 0
        self.generation_at_request = 0
        self.open_calls: list[str] = []
        self.calls = 0

    def run(self, op: object) -> None:
        if isinstance(op, AdmitOp | ReconcileOp) and self.sim.open_tool_calls():
            self.refused_while_a_call_is_open(op)
        elif isinstance(op, AdmitOp):
            self.admit(op)
        elif isinstance(op, ReconcileOp) and self.sim.attempts:
            self.reconcile(op)
        elif isinstance(op, AssistantOp) and self.sim.attempts:
            ids = [f"c{self.calls + i}" for i in range(op.calls)]
            self.calls += op.calls
            self.sim.assistant("answer", *ids)
            self.open_calls += ids
        elif isinstance(op, ToolResultOp) and self.open_calls:
            self.sim.tool_result(self.open_calls.pop(0))
        elif isinstance(op, CompactOp):
            self.compact(op)
        self.check_log()

    def refused_while_a_call_is_open(self, op: AdmitOp | ReconcileOp) -> None:
        """The tool-call ordering rule: no attempt commits anything while a call is open."""
        before = self.sim.log.next_seq
        if isinstance(op, AdmitOp):
            with pytest.raises(UnansweredToolCall):
                self.admit(op)
        elif self.sim.attempts:
            with pytest.raises(UnansweredToolCall):
                self.reconcile(op)
        assert self.sim.log.next_seq == before

    def admit(self, op: AdmitOp) -> None:
        r = route(op.in_history, op.tool_update, op.model)
        users = tuple(user(f"u{i}") for i in range(op.users))
        generation_before = self.sim.log.replace_generation
        outcome = self.sim.admit(
            op.rendered,
            r,
            users=users,
            tools=TOOLSETS[op.tools],
            starts=op.starts,
            resume=op.resume,
        )
        self.after_request(op.rendered, r, outcome.starts_series, generation_before)
        assert len(outcome.user_seqs) == op.users

    def reconcile(self, op: ReconcileOp) -> None:
        attempt = self.sim.attempts[f"a{self.sim.counter}"]
        r = replace(attempt.route, in_history=op.in_history, model=op.model)
        generation_before = self.sim.log.replace_generation
        outcome = self.sim.reconcile(route=r)
        assert outcome.user_seqs == ()
        self.after_request(attempt.rendered_prompt, r, outcome.starts_series, generation_before)

    def after_request(self, rendered: str, r: Route, starts: bool, generation_before: int) -> None:
        log = self.sim.log
        # After any admission the effective prompt equals the rendered prompt.
        assert log.effective_prompt().text == rendered
        messages = log.derived_messages()
        if not r.in_history:
            # Never a non-leading system message on a route that is not in-history.
            assert system_positions(messages) in ([], [0])
            for wire in WireFormat:
                render(messages, wire, in_history=False)
        else:
            render(messages, WireFormat.OPENAI_CHAT, in_history=True)
            render(messages, WireFormat.OPENAI_RESPONSES, in_history=True)
        continuing = (
            self.previous_request is not None
            and r.in_history
            and not starts
            and generation_before == self.generation_at_request == log.replace_generation
        )
        if continuing:
            assert self.previous_request is not None
            assert messages[: len(self.previous_request)] == self.previous_request
        self.check_forecast(r, messages, starts)
        # Admitting the same rendered prompt again commits nothing.
        attempt = self.sim.attempts[f"a{self.sim.counter}"]
        again = admit(
            self.sim.state(),
            replace(attempt, route=r, users=(), resume=False, starts_request_series=False),
        )
        assert again.events == ()
        self.previous_request = messages
        self.generation_at_request = log.replace_generation

    def check_forecast(self, r: Route, messages: list[Message], starts: bool) -> None:
        """The forecast from the first shadowed node equals the byte-for-byte comparison."""
        log = self.sim.log
        key = RequestKey(r.provider, r.model, "tools", 0)
        divergence = None
        surviving = set(log.nodes)
        for index, seq in enumerate(self.previous_nodes):
            if seq not in surviving:
                before = [log.events[s].derived_message() for s in self.previous_nodes[:index]]
                divergence = Divergence(
                    sum(m is not None for m in before), log.events[seq].is_system
                )
                break
        previous = None
        if self.previous_request is not None and self.previous_key is not None:
            previous = PreviousRequest(self.previous_key, len(self.previous_request))
        tokens = [message_tokens(m) for m in messages]
        predicted = forecast(previous, key, tokens, divergence, starts_series=starts)
        if previous is not None and previous.key == key:
            assert self.previous_request is not None
            shared = 0
            for old, new in zip(self.previous_request, messages, strict=False):
                if codec.encode(old) != codec.encode(new):
                    break
                shared += 1
            reused = predicted.reused_messages
            # Exact, except that a replacement reproducing the very bytes it shadowed (a head
            # rewritten B and back to A) is still counted as a divergence: cautious, never more.
            assert reused <= shared
            if reused < shared:
                assert codec.encode(self.previous_request[reused]) == codec.encode(messages[reused])
        self.previous_nodes = list(log.nodes)
        self.previous_key = key

    def compact(self, op: CompactOp) -> None:
        plan = self.sim.plan(op.retain_tokens)
        # Distinct summaries, so a summary never reproduces the bytes it replaced.
        self.summaries += 1
        summary = f"s{self.summaries}"
        if plan is None or plan.shadowed_tokens <= message_tokens(user(summary)):
            return
        before = self.sim.log.effective_prompt().text
        self.sim.compact(op.retain_tokens, summary=summary)
        # Compaction never changes the effective prompt (SPEC §5).
        assert self.sim.log.effective_prompt().text == before

    def check_log(self) -> None:
        log = self.sim.log
        assert [event.seq for event in log.events] == list(range(len(log.events)))
        # Re-folding the log from scratch gives the same surface; every replace cites all it
        # shadows (SessionLog refuses a replace that does not).
        refolded = SessionLog(log.events)
        assert refolded.nodes == log.nodes
        assert refolded.replace_generation == sum(isinstance(e.op, Replace) for e in log.events)


@given(operations)
def test_invariants_hold_over_random_sessions(ops: list[object]) -> None:
    checker = Checker()
    for op in ops:
        checker.run(op)
