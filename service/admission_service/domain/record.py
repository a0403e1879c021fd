"""Record as a pure transition (SPEC §3 Record): what the model and the tools produced for an
admitted step becomes events appended to the log — the assistant message, then each tool result,
in order — logged from the session's next seq under the admission's turn and step.

Two rules come with it: a tool call id names one call in a session (an assistant message may
not reuse one already made), and every tool result answers a tool call still open on the
surface (checked against what storage could mark answered, ``check_answered``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
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
        """``(call_id, result seq)`` for each of ``results`` (the tool results recorded)."""
        return [
            (result.call_id, seq)
            for result, seq in zip(results, self.tool_result_seqs, strict=True)
        ]


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


def check_answered(tool_results: Sequence[ToolResult], answered: Sequence[bool]) -> None:
    """UNKNOWN_TOOL_CALL for the first result that answered no open tool call (``answered``:
    whether each result took, in order)."""
    for index, (result, ok) in enumerate(zip(tool_results, answered, strict=True)):
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
