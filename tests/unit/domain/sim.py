"""A pure in-memory session driven through the domain transitions, for tests.

It plays the part storage plays in the service: keeps the log (``SessionLog``), the series
state and the admissions, and applies each transition's events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from admission_service.domain.accounting import (
    CacheForecast,
    PreviousRequest,
    PricedNode,
    RequestKey,
    RequestTotals,
    forecast_totals,
    message_tokens,
)
from admission_service.domain.admission import (
    AdmissionState,
    Attempt,
    AttemptOutcome,
    admit,
    reconcile,
)
from admission_service.domain.compaction import (
    CompactionOutcome,
    CompactionPlan,
    compact,
    compaction_node,
    plan_by_tokens,
)
from admission_service.domain.events import Append, Event, EventKind
from admission_service.domain.messages import Message, Role, Text, Tool, ToolCall, ToolResult
from admission_service.domain.series import Route, SeriesState
from admission_service.domain.surface import SessionLog

CAPABLE = Route("deepseek", "deepseek-flash", 128_000, in_history=True, tool_update=False)
INCAPABLE = Route("openai", "gpt", 128_000, in_history=False, tool_update=False)


def user(text: str) -> Message:
    return Message(Role.USER, (Text(text),))


@dataclass
class Sim:
    log: SessionLog = field(default_factory=SessionLog)
    series: SeriesState = field(default_factory=SeriesState)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    counter: int = 0

    def state(self) -> AdmissionState:
        series = replace(self.series, replace_generation=self.log.replace_generation)
        return AdmissionState(
            self.log.next_seq, self.log.system_nodes(), series, self.open_tool_calls()
        )

    def open_tool_calls(self) -> tuple[str, ...]:
        """The tool calls on the surface no result on the surface answers, in call order."""
        messages = [event.message for event in self.log.node_events() if event.message]
        answered = {call_id for message in messages for call_id in message.tool_result_ids()}
        return tuple(
            call_id
            for message in messages
            for call_id in message.tool_call_ids()
            if call_id not in answered
        )

    def _apply(self, outcome: AttemptOutcome) -> AttemptOutcome:
        self.log.extend(outcome.events)
        self.series = outcome.series
        return outcome

    def admit(
        self,
        rendered: str,
        route: Route = CAPABLE,
        *,
        users: tuple[Message, ...] = (),
        tools: tuple[Tool, ...] = (),
        starts: bool = False,
        resume: bool = False,
        turn: int = 1,
        step: int | None = None,
    ) -> AttemptOutcome:
        self.counter += 1
        attempt = Attempt(
            admission_id=f"a{self.counter}",
            turn=turn,
            step=self.counter if step is None else step,
            rendered_prompt=rendered,
            tools=tools,
            route=route,
            starts_request_series=starts,
            users=users,
            resume=resume,
        )
        self.attempts[attempt.admission_id] = attempt
        return self._apply(admit(self.state(), attempt))

    def reconcile(
        self, admission_id: str | None = None, route: Route | None = None
    ) -> AttemptOutcome:
        attempt = self.attempts[admission_id or f"a{self.counter}"]
        if route is not None:
            attempt = replace(attempt, route=route)
        return self._apply(reconcile(self.state(), attempt))

    def append(self, kind: EventKind, message: Message) -> int:
        seq = self.log.next_seq
        self.log.append(Event(seq, kind, 1, self.counter, Append(), (), message))
        return seq

    def assistant(self, text: str = "ok", *calls: str) -> int:
        calls_ = tuple(ToolCall(call, "lookup", "{}") for call in calls)
        blocks: tuple[Text | ToolCall, ...] = (Text(text), *calls_)
        return self.append(EventKind.ASSISTANT_MESSAGE, Message(Role.ASSISTANT, blocks))

    def tool_result(self, call_id: str, text: str = "result") -> int:
        message = Message(Role.TOOL, (ToolResult(call_id, (Text(text),)),))
        return self.append(EventKind.TOOL_RESULT, message)

    def compaction_nodes(self) -> list:  # type: ignore[type-arg]
        nodes = []
        for event in self.log.node_events():
            message = event.derived_message()
            nodes.append(
                compaction_node(event.seq, message_tokens(message), event.is_system, message)
            )
        return nodes

    def plan(self, retain_tokens: int = 0) -> CompactionPlan | None:
        return plan_by_tokens(self.compaction_nodes(), retain_tokens)

    def compact(self, retain_tokens: int = 0, summary: str = "sum") -> CompactionOutcome:
        plan = self.plan(retain_tokens)
        assert plan is not None
        outcome = compact(self.state(), plan, summary)
        self.log.extend(outcome.events)
        self.series = outcome.series
        return outcome

    def priced_nodes(self) -> list[PricedNode]:
        return [
            PricedNode(e.seq, message_tokens(e.derived_message()), e.is_system)
            for e in self.log.node_events()
        ]

    def texts(self) -> list[tuple[str, str]]:
        """The derived request as (role, text) pairs, for readable assertions."""
        return [(m.role.value, m.text) for m in self.log.derived_messages()]

    def system_texts(self) -> list[str]:
        return [node.text for node in self.log.system_nodes()]

    def kinds_since(self, seq: int) -> list[str]:
        return [event.kind.value for event in self.log.events[seq:]]


# The forecast from per-message prices: the reference the property tests compare with the
# byte-for-byte prefix (production gives forecast_totals the totals directly).
@dataclass(frozen=True, slots=True)
class Divergence:
    """The first place the surface changed since the previous request.

    ``unchanged_messages`` counts the current request's leading messages that lie before the
    first shadowed node; ``at_system`` tells whether that node was a system node.
    """

    unchanged_messages: int
    at_system: bool


def forecast(
    previous: PreviousRequest | None,
    current: RequestKey,
    message_tokens: Sequence[int],
    divergence: Divergence | None,
    *,
    starts_series: bool,
) -> CacheForecast:
    """How much of the current request is a byte-identical prefix of the previous one, and why
    it diverges.

    Tools precede the messages in a provider's cache key, so a model or tool change reuses
    nothing. Otherwise the reused prefix is every previous message when nothing was shadowed
    since, else the messages before the first shadowed node. That equals the longest
    byte-identical prefix (the property tests compare the two) except when a replacement
    reproduces exactly the bytes it replaced, where the forecast stays on the cautious side.
    """
    shared = previous.message_count if previous is not None else 0
    if divergence is not None:
        shared = min(shared, divergence.unchanged_messages)
    return forecast_totals(
        previous,
        current,
        RequestTotals(
            len(message_tokens),
            sum(message_tokens),
            shared,
            sum(message_tokens[:shared]),
            divergence.at_system if divergence is not None else False,
        ),
        starts_series=starts_series,
    )
