"""Record as a pure transition (SPEC §3 Record): what the model and the tools produced for an
admitted step becomes events appended to the log — the assistant message, then each tool result,
in order — logged from the session's next seq under the admission's turn and step.

Two rules come with it: a tool call id names one call in a session (an assistant message may
not reuse one already made), and every tool result answers a tool call still open on the
surface (``check_answered``: a call answers once; storage records the answers
``RecordOutcome.answers`` chose and reports which calls were open before).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from admission_service.domain.errors import InvalidArgument, UnknownToolCall
from admission_service.domain.events import Append, Event, EventKind
from admission_service.domain.messages import Message, Role, ToolResult


@dataclass(frozen=True, slots=True)
class Admitted:
    """The step the output belongs to."""

    admission_id: str
    turn: int
    step: int


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    events: tuple[Event, ...]
    assistant_seq: int | None
    tool_result_seqs: tuple[int, ...]
    next_seq: int

    def answers(self, results: Sequence[ToolResult]) -> list[tuple[str, int]]:
        """``(call_id, result seq)``: the answer each call gets from ``results`` (the tool
        results recorded), the first in request order; a later result for the same call answers
        nothing (``check_answered``)."""
        answers: dict[str, int] = {}
        for result, seq in zip(results, self.tool_result_seqs, strict=True):
            answers.setdefault(result.call_id, seq)
        return list(answers.items())


def record(
    next_seq: int,
    admitted: Admitted,
    assistant: Message | None,
    tool_results: Sequence[ToolResult],
    *,
    taken_call_ids: Collection[str] = (),
) -> RecordOutcome:
    """The events recording ``assistant`` and ``tool_results``. ``taken_call_ids``: which of
    the assistant's tool call ids the session already made (INVALID_ARGUMENT)."""
    events: list[Event] = []
    seq = next_seq
    assistant_seq = None
    if assistant is not None:
        calls = assistant.tool_call_ids()
        for index, call_id in enumerate(calls):
            if call_id in taken_call_ids:
                raise InvalidArgument(
                    "assistant.content",
                    "tool call id {call_id!r} (call {index}) is taken",
                    call_id=call_id,
                    index=index,
                )
        events.append(_appended(seq, EventKind.ASSISTANT_MESSAGE, admitted, assistant))
        assistant_seq, seq = seq, seq + 1
    result_seqs = []
    for result in tool_results:
        events.append(
            _appended(seq, EventKind.TOOL_RESULT, admitted, Message(Role.TOOL, (result,)))
        )
        result_seqs.append(seq)
        seq += 1
    return RecordOutcome(tuple(events), assistant_seq, tuple(result_seqs), seq)


def check_answered(tool_results: Sequence[ToolResult], was_open: Mapping[str, bool]) -> None:
    """UNKNOWN_TOOL_CALL for the first result that answers no open tool call: its call was not
    made, or not open on the surface before (``was_open``, by call id), or an earlier result
    already answers it."""
    answered: set[str] = set()
    for index, result in enumerate(tool_results):
        ok = result.call_id not in answered and was_open.get(result.call_id, False)
        answered.add(result.call_id)
        if not ok:
            raise UnknownToolCall(
                f"tool_results[{index}].call_id",
                "{call_id!r} answers no open tool call on the surface",
                call_id=result.call_id,
            )


def _appended(seq: int, kind: EventKind, admitted: Admitted, message: Message) -> Event:
    return Event(
        seq,
        kind,
        admitted.turn,
        admitted.step,
        Append(),
        (),
        message,
        admission_id=admitted.admission_id,
    )
