"""Record's transition: the output of an admitted step as events, and its two rules."""

from __future__ import annotations

import pytest
from admission_service.domain.errors import InvalidArgument, UnknownToolCall
from admission_service.domain.events import Append, EventKind, revision_after
from admission_service.domain.messages import Message, Role, Text, ToolCall, ToolResult
from admission_service.domain.recording import Admitted, check_answered, record

STEP = Admitted("a1", 3, 4)
CALLING = Message(
    Role.ASSISTANT, (Text("look"), ToolCall("c1", "f", "{}"), ToolCall("c2", "f", "{}"))
)
RESULTS = (ToolResult("c1", (Text("one"),)), ToolResult("c2", (Text("two"),)))


def test_the_assistant_then_each_result_is_appended_from_the_next_seq() -> None:
    outcome = record(7, STEP, CALLING, RESULTS)
    assert [e.seq for e in outcome.events] == [7, 8, 9]
    assert [e.kind for e in outcome.events] == [
        EventKind.ASSISTANT_MESSAGE,
        EventKind.TOOL_RESULT,
        EventKind.TOOL_RESULT,
    ]
    assert all(e.op == Append() and (e.turn, e.step) == (3, 4) for e in outcome.events)
    assert all(e.admission_id == "a1" for e in outcome.events)
    assert outcome.events[1].message == Message(Role.TOOL, (RESULTS[0],))
    assert (outcome.assistant_seq, outcome.tool_result_seqs, outcome.next_seq) == (7, (8, 9), 10)
    assert outcome.answers(RESULTS) == [("c1", 8), ("c2", 9)]


def test_results_alone_and_usage_alone() -> None:
    results = record(0, STEP, None, RESULTS[:1])
    assert (results.assistant_seq, results.tool_result_seqs, results.next_seq) == (None, (0,), 1)
    nothing = record(5, STEP, None, ())
    assert (nothing.events, nothing.next_seq) == ((), 5)


def test_a_tool_call_id_names_one_call_in_a_session() -> None:
    with pytest.raises(InvalidArgument) as raised:
        record(0, STEP, CALLING, (), taken_call_ids={"c2"})
    assert raised.value.metadata["call_id"] == "c2" and raised.value.metadata["index"] == "1"


def test_every_result_answers_an_open_call() -> None:
    open_calls = {result.call_id: True for result in RESULTS}
    check_answered(RESULTS, open_calls)
    with pytest.raises(UnknownToolCall) as raised:
        check_answered(RESULTS, {**open_calls, RESULTS[1].call_id: False})
    assert raised.value.metadata["field"] == "tool_results[1].call_id"
    with pytest.raises(UnknownToolCall) as raised:
        check_answered([RESULTS[0], RESULTS[0]], open_calls)  # a call answers once
    assert raised.value.metadata["field"] == "tool_results[1].call_id"


def test_the_revision_moves_only_when_events_were_logged() -> None:
    assert revision_after(4, 0) == 4
    assert (revision_after(4, 1), revision_after(4, 3)) == (5, 5)
