"""Token prices and breakdown (reference §5) and the cache forecast (SPEC §6)."""

from __future__ import annotations

from admission_service.domain.accounting import (
    Calibration,
    DivergenceReason,
    PreviousRequest,
    PricedNode,
    RequestKey,
    breakdown,
    js_length,
    message_digest,
    message_tokens,
    node_prices,
    observed_input_tokens,
    tools_digest,
    tools_json,
    tools_tokens,
)
from admission_service.domain.events import Append, Event, EventKind
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    Role,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    system_message,
)

from .sim import Divergence, forecast


def test_heuristic_prices_match_the_reference() -> None:
    # text block: ceil(len/4) + 4; non-system message: content + 4.
    assert message_tokens(Message(Role.USER, (Text("hello"),))) == 2 + 4 + 4
    # system message: ceil(total chars / 4) + 4, no block overhead; empty costs nothing.
    assert message_tokens(system_message("hello world!")) == 3 + 4
    assert message_tokens(system_message("")) == 0
    assert message_tokens(None) == 0
    # reasoning block like text; tool call: ceil(name/4) + ceil(args/4) + 4.
    assistant = Message(Role.ASSISTANT, (Reasoning("abcd"), ToolCall("c1", "lookup", '{"q":"x"}')))
    assert message_tokens(assistant) == (1 + 4) + (2 + 3 + 4) + 4
    # tool-result block: inner content + 4.
    result = Message(Role.TOOL, (ToolResult("c1", (Text("12345678"),)),))
    assert message_tokens(result) == ((2 + 4) + 4) + 4
    # image block: 4 + ceil(JSON length / 4).
    image = Message(Role.USER, (Image("u", "image/png"),))
    json_length = len('{"type":"image","uri":"u","mediaType":"image/png"}')
    assert message_tokens(image) == 4 + -(-json_length // 4) + 4
    assert message_tokens(Message(Role.ASSISTANT, ())) == 0


class WordCounter:
    """A stand-in tokenizer (one token per word) to show what a counter replaces."""

    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())


def test_a_counter_replaces_only_the_text_count_inside_the_reference_overheads() -> None:
    words = WordCounter()
    assert message_tokens(Message(Role.USER, (Text("one two three"),)), words) == 3 + 4 + 4
    assert message_tokens(system_message("one two"), words) == 2 + 4
    assistant = Message(Role.ASSISTANT, (Reasoning("a b"), ToolCall("c1", "lookup", '{"q": "x"}')))
    assert message_tokens(assistant, words) == (2 + 4) + (1 + 2 + 4) + 4
    result = Message(Role.TOOL, (ToolResult("c1", (Text("x y z"),)),))
    assert message_tokens(result, words) == ((3 + 4) + 4) + 4
    # Images keep the heuristic price of their JSON whatever the counter.
    image = Message(Role.USER, (Image("u", "image/png"),))
    assert message_tokens(image, words) == message_tokens(image)
    tool = Tool("a", "b c", "{}")
    assert tools_tokens((tool,), words) == 2 + 4  # the JSON array splits at "b c"
    assert breakdown([], (tool,), words).tokenizer == "words"
    assert breakdown([], ()).tokenizer == "heuristic"


def test_calibration_sums_observed_over_estimated() -> None:
    assert Calibration().ratio == 0.0
    calibration = Calibration().add(110, 100).add(90, 100)
    assert (calibration.requests, calibration.ratio) == (2, 1.0)
    # Anthropic reports cached input apart from input_tokens; the others include it.
    assert observed_input_tokens("anthropic", 10, 20, 5) == 35
    assert observed_input_tokens("openai", 10, 20, 5) == 10
    assert observed_input_tokens("deepseek", 10, 20, 5) == 10


def test_lengths_are_javascript_lengths() -> None:
    assert js_length("\U0001f600") == 2
    assert js_length("a\x00b") == 3
    assert message_tokens(system_message("\U0001f600" * 2)) == 1 + 4


def test_tools_price() -> None:
    assert tools_tokens(()) == 0
    tool = Tool("a", "b", '{"x":1}')
    text = '[{"name":"a","description":"b","parameters":{"x":1}}]'
    assert tools_tokens((tool,)) == -(-len(text) // 4) + 4


def test_a_tool_sets_digest_is_its_jsons_and_equal_sets_share_it() -> None:
    tools = (Tool("a", "b", '{"x":1}'), Tool("c", "d\u00e9", ""))
    text = '[{"name":"a","description":"b","parameters":{"x":1}},'
    text += '{"name":"c","description":"d\u00e9","parameters":{}}]'
    assert tools_json(tools) == text
    assert tools_digest(tools) == message_digest(text.encode())
    # A later step's equal tool set (new objects) has the same digest; another set its own.
    assert tools_digest([Tool("a", "b", '{"x":1}'), Tool("c", "d\u00e9", "")]) == tools_digest(
        tools
    )
    assert tools_digest(tools[:1]) != tools_digest(tools)


def test_breakdown_prices_the_last_non_empty_system_node_as_system() -> None:
    nodes = [
        PricedNode(0, 10, True),  # superseded head: counts as a message
        PricedNode(1, 5, False),
        PricedNode(2, 7, True),  # the prompt in force
        PricedNode(3, 0, True),  # dormant empty node: costs nothing
        PricedNode(4, 3, False),
    ]
    result = breakdown(nodes, (Tool("a", "b", "{}"),))
    assert result.system_tokens == 7
    assert result.message_tokens == 18
    assert result.tools_tokens == tools_tokens((Tool("a", "b", "{}"),))
    assert result.total_tokens == 7 + 18 + result.tools_tokens
    assert breakdown([], ()).total_tokens == 0
    # The system nodes alone with the surface's running price give the same breakdown.
    system_only = [node for node in nodes if node.is_system]
    assert breakdown(system_only, (Tool("a", "b", "{}"),), total=25) == result


KEY = RequestKey("p", "m", "t", 10)


def previous(count: int, key: RequestKey = KEY) -> PreviousRequest:
    return PreviousRequest(key, count)


def test_forecast_reasons_and_reused_prefix() -> None:
    tokens = [5, 5, 5]
    first = forecast(None, KEY, tokens[:2], None, starts_series=False)
    assert (first.reused_messages, first.divergence_reason) == (0, DivergenceReason.FIRST_REQUEST)
    assert first.total_tokens == 20

    extends = forecast(previous(2), KEY, tokens, None, starts_series=False)
    assert extends.divergence_reason is DivergenceReason.NONE
    assert (extends.reused_messages, extends.reused_tokens, extends.total_tokens) == (2, 20, 25)

    edited = forecast(previous(2), KEY, tokens[:2], Divergence(1, False), starts_series=False)
    assert (edited.divergence_index, edited.divergence_reason) == (
        1,
        DivergenceReason.MESSAGES_CHANGED,
    )
    head = forecast(previous(2), KEY, tokens[:2], Divergence(0, True), starts_series=False)
    assert (head.reused_messages, head.reused_tokens) == (0, 10)
    assert head.divergence_reason is DivergenceReason.SYSTEM_CHANGED
    series = forecast(previous(2), KEY, tokens[:1], Divergence(0, True), starts_series=True)
    assert series.divergence_reason is DivergenceReason.SERIES_START
    # A node shadowed after everything the previous request held changes nothing it reused.
    late = forecast(previous(2), KEY, tokens, Divergence(3, False), starts_series=False)
    assert (late.reused_messages, late.divergence_reason) == (2, DivergenceReason.NONE)

    other_model = RequestKey("p", "n", "t", 10)
    model = forecast(previous(1), other_model, tokens, None, starts_series=False)
    assert (model.reused_tokens, model.divergence_reason) == (0, DivergenceReason.MODEL_CHANGED)
    other_tools = RequestKey("p", "m", "u", 10)
    tools = forecast(previous(1), other_tools, tokens, None, starts_series=False)
    assert (tools.reused_tokens, tools.divergence_reason) == (0, DivergenceReason.TOOLS_CHANGED)


def test_each_surface_node_is_priced_by_its_derived_message() -> None:
    said = Message(Role.USER, (Text("hello there"),))
    events = [
        Event(3, EventKind.USER_MESSAGE, 1, 1, Append(), message=said),
        Event(4, EventKind.REQUEST_HEADER, 1, 1),
    ]
    assert node_prices(events) == {3: message_tokens(said)}
