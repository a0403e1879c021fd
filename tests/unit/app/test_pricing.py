"""app/pricing.py: what a call prices is counted ahead, off the event loop, when it is large."""

from __future__ import annotations

import json

from admission_service import tokenizers
from admission_service.app.pricing import counted_ahead
from admission_service.domain import accounting
from admission_service.domain.messages import Tool


def large_tools(marker: str) -> tuple[Tool, ...]:
    schema = json.dumps({"type": "object", "description": f"{marker} " * (40 * 1024)})
    return tuple(Tool(f"tool{i}", "a large schema", schema) for i in range(4))


async def test_a_large_tool_set_not_yet_priced_is_counted_ahead_once() -> None:
    tools = large_tools("first")  # ~1.2 MiB: past what the tool memo keeps by the strings
    base = tokenizers.counter_for("deepseek")
    counter = await counted_ahead("deepseek", ["small"], tools)
    assert isinstance(counter, tokenizers.Precounted)
    text = accounting.tools_json(tools)
    assert counter._counts == {text: base.count(text)}  # counted ahead, in a thread
    price = accounting.tools_tokens(tools, counter)  # a lookup now, remembered by digest
    assert price == base.count(text) + accounting.BLOCK_OVERHEAD
    # Priced once: the next step's counter counts nothing ahead, and the price is the same.
    again = await counted_ahead("deepseek", ["small"], large_tools("first"))
    assert again is base
    assert accounting.tools_tokens(large_tools("first"), again) == price


async def test_a_small_or_known_tool_set_is_priced_where_it_is_used() -> None:
    small = (Tool("read", "Read a file", '{"type":"object"}'),)
    assert await counted_ahead("deepseek", ["small"], small) is tokenizers.counter_for("deepseek")
    assert await counted_ahead("nobody", ["small"], large_tools("x")) is tokenizers.counter_for(
        "nobody"
    )  # a route without a tokenizer: the heuristic, nothing to count ahead
