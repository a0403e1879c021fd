"""Record's checks of the reasoning blocks (issue 25) and of tool results that say nothing
(issue 24): every refusal names its field; the valid forms pass."""

from __future__ import annotations

import pytest
from admission_service.app.commands import AdmitCommand, RecordCommand, RouteRequest
from admission_service.app.limits import Limits
from admission_service.app.validation import check_admit, check_record
from admission_service.domain.errors import InvalidArgument
from admission_service.domain.messages import (
    Block,
    Message,
    ReasoningItem,
    RedactedReasoning,
    Role,
    Text,
    ToolResult,
)

LIMITS = Limits()


def record(*blocks: Block, results: tuple[ToolResult, ...] = ()) -> RecordCommand:
    assistant = Message(Role.ASSISTANT, blocks) if blocks else None
    return RecordCommand("s", "a1", assistant, results)


def test_the_reasoning_blocks_and_phases_pass() -> None:
    check_record(
        record(
            RedactedReasoning("anthropic", "EmwK"),
            ReasoningItem("rs_1"),
            ReasoningItem("rs_2", "gAAA", ("a", ""), ("b",)),
            Text("x", "commentary"),
            Text("y", "final_answer"),
        ),
        LIMITS,
    )


@pytest.mark.parametrize(
    ("block", "field"),
    [
        (RedactedReasoning("", "EmwK"), "assistant.content[0].redacted_reasoning.provider"),
        (RedactedReasoning("anthropic", ""), "assistant.content[0].redacted_reasoning.data"),
        (ReasoningItem(""), "assistant.content[0].reasoning_item.id"),
        (Text("x", "draft"), "assistant.content[0].text.phase"),
    ],
)
def test_an_incomplete_block_is_refused_by_name(block: Block, field: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        check_record(record(block), LIMITS)
    assert raised.value.field == field


def test_only_assistant_text_carries_a_phase() -> None:
    result = ToolResult("c1", (Text("out", "commentary"),))
    with pytest.raises(InvalidArgument) as raised:
        check_record(record(results=(result,)), LIMITS)
    assert raised.value.field == "tool_results[0].content[0].text.phase"
    user = Message(Role.USER, (Text("hi", "final_answer"),))
    command = AdmitCommand("s", 0, 0, "", (), RouteRequest("p", "m", 0), (user,))
    with pytest.raises(InvalidArgument) as raised:
        check_admit(command, LIMITS)
    assert raised.value.field == "users[0].content[0].text.phase"


def test_a_tool_result_may_be_empty_but_an_error_must_say_why() -> None:
    check_record(record(results=(ToolResult("c1", ()),)), LIMITS)
    with pytest.raises(InvalidArgument) as raised:
        check_record(record(results=(ToolResult("c1", (), is_error=True),)), LIMITS)
    assert raised.value.field == "tool_results[0].content"
