"""domain/memo.py: values derived from what callers send every step, remembered within a byte
budget — and what uses it (tool sets' prices and digests, tools' parsed schemas)."""

from __future__ import annotations

import functools
import json
import threading

from admission_service.domain import accounting, json_text, wire_common
from admission_service.domain.memo import BoundedMemo
from admission_service.domain.messages import Tool


def test_a_value_is_computed_once_per_input() -> None:
    memo: BoundedMemo[str, int] = BoundedMemo(1024)
    computed: list[str] = []

    def length(key: str) -> int:
        computed.append(key)
        return len(key)

    assert memo.get("abc", 3, lambda: length("abc")) == 3
    assert memo.get("abc", 3, lambda: length("abc")) == 3
    assert computed == ["abc"] and (memo.hits, memo.misses) == (1, 1)


def test_the_least_recently_used_inputs_go_when_the_budget_is_full() -> None:
    memo: BoundedMemo[str, str] = BoundedMemo(800)  # inputs of up to 100 bytes are kept
    for key in "abcdefgh":
        memo.get(key, 100, key.upper)
    memo.get("a", 100, lambda: "recomputed")  # "a" now the most recent
    memo.get("i", 100, lambda: "I")  # over the budget: "b", the least recently used, goes
    assert memo.bytes == 800 and len(memo) == 8
    assert memo.get("a", 100, lambda: "recomputed") == "A"
    assert memo.get("b", 100, lambda: "recomputed") == "recomputed"


def test_a_value_of_none_is_remembered_too() -> None:
    """A check that passed (its value None) is not made again: the memo once took None for
    "not found", so a harness's schemas were parsed again every step while it counted hits."""
    memo: BoundedMemo[str, None] = BoundedMemo(1024)
    checks: list[str] = []
    for _ in range(3):
        memo.get("schema", 6, lambda: checks.append("schema"))
    assert checks == ["schema"] and (memo.hits, memo.misses) == (2, 1)


def test_only_the_last_input_over_an_eighth_of_the_budget_is_kept_and_found_by_equality() -> None:
    """A harness's large tool set comes back every step as new strings equal to the last: it
    is found without hashing them, and it holds no place among the others."""
    memo: BoundedMemo[tuple[str, ...], int] = BoundedMemo(800)
    computed: list[int] = []

    def compute(value: int) -> int:
        computed.append(value)
        return value

    huge = ("x" * 101,)
    assert memo.get(huge, 101, lambda: compute(1)) == 1
    again = ("".join(["x" * 50, "x" * 51]),)  # equal, another string
    assert again[0] is not huge[0]
    assert memo.get(again, 101, lambda: compute(2)) == 1
    assert len(memo) == 0 and memo.bytes == 0
    assert memo.get(("y" * 101,), 101, lambda: compute(3)) == 3  # the next one replaces it
    assert memo.get(huge, 101, lambda: compute(4)) == 4
    assert computed == [1, 3, 4]


def test_callers_sending_new_large_tool_sets_every_call_cannot_grow_the_memory() -> None:
    """A tenant sending a different 300 KB tool set with every call: the prices and digests
    kept stay within their budget (an entry-counted cache would keep 256 of them: 77 MB)."""
    schema = json.dumps({"type": "object", "description": "x" * 100_000})
    for call in range(60):
        tools = tuple(Tool(f"t{call}_{i}", "d", schema) for i in range(3))
        accounting.tools_tokens(tools)
        accounting.tools_digest(tools)
    for memo in (accounting.TOOL_PRICES, accounting.TOOL_DIGESTS):
        assert memo.bytes <= memo.max_bytes


def test_a_tools_schema_is_parsed_once_and_equal_to_its_text() -> None:
    text = '{"type": "object", "properties": {"path": {"type": "string"}}, "x": 1.50}'
    first = wire_common.tool_schema(Tool("read", "", text))
    again = wire_common.tool_schema(Tool("read_again", "", text))
    assert first is again  # shared: never changed by a body that carries it
    assert first == json_text.loads(text)
    assert wire_common.tool_schema(Tool("none", "", "")) == {"type": "object", "properties": {}}


def test_threads_share_a_memo_safely() -> None:
    memo: BoundedMemo[int, int] = BoundedMemo(64 * 8)  # inputs of up to 64 bytes are kept
    failures: list[BaseException] = []

    def hammer(offset: int) -> None:
        try:
            for i in range(5_000):
                key = (i * 7 + offset) % 40
                assert memo.get(key, 64, functools.partial(int.__mul__, key, 2)) == key * 2
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    assert memo.bytes <= memo.max_bytes and memo.bytes == 64 * len(memo)


class CountingCounter:
    """A tokenizer that counts how often it counts (a length, as the heuristic's)."""

    name = "counting"

    def __init__(self) -> None:
        self.counted = 0

    def count(self, text: str) -> int:
        self.counted += 1
        return len(text) // 4


def test_a_tool_set_too_large_to_keep_has_its_price_kept_by_digest() -> None:
    """A 1 MiB tool set sent every step: DeepSeek's tokenizer takes half a second over it, and
    its price was counted again every step (the memo keeps no input over 512 KiB); now it is
    kept by the set's digest, for a few bytes."""
    schema = json.dumps({"type": "object", "description": "y" * (300 * 1024)})
    tools = tuple(Tool(f"big{i}", "d", schema) for i in range(4))
    counter = CountingCounter()
    assert not accounting.tools_price_known(tools, counter.name)
    before = accounting.TOOL_PRICES.bytes
    price = accounting.tools_tokens(tools, counter)
    assert accounting.TOOL_PRICES.bytes - before < 1024  # the digest's entry, not the set
    again = tuple(Tool(t.name, t.description, "".join(t.parameters_json)) for t in tools)
    assert accounting.tools_price_known(again, counter.name)
    assert accounting.tools_tokens(again, counter) == price and counter.counted == 1
    # Another tokenizer prices it itself; another set (one schema changed) is another price.
    assert not accounting.tools_price_known(tools, "another")
    changed = (*tools[:3], Tool("big3", "d", schema.replace("y", "z", 1)))
    accounting.tools_tokens(changed, counter)
    assert counter.counted == 2


def test_holds_says_whether_a_value_would_be_found_without_counting() -> None:
    memo: BoundedMemo[str, int] = BoundedMemo(800)
    assert not memo.holds("a", 10) and not memo.holds("big", 101)
    memo.get("a", 10, lambda: 1)
    memo.get("big", 101, lambda: 2)
    assert memo.holds("a", 10) and memo.holds("".join(["b", "ig"]), 101)
    assert not memo.holds("other", 101)
    assert (memo.hits, memo.misses) == (0, 2)


def test_a_tool_set_seen_before_is_answered_with_its_first_objects() -> None:
    """Every memo keyed by the set then compares its strings by identity."""
    schema = json.dumps({"type": "object", "description": "d" * 1000})
    first = (Tool("read", "reads", schema),)
    again = (Tool("".join(["re", "ad"]), "reads", "".join([schema[:10], schema[10:]])),)
    assert again[0].parameters_json is not schema
    assert accounting.seen_tool_set(first) is first
    assert accounting.seen_tool_set(again) is first
    other = (Tool("write", "writes", schema),)
    assert accounting.seen_tool_set(other) is other
    huge = (Tool("big", "", "x" * accounting.TOOL_SETS.max_bytes),)
    assert accounting.seen_tool_set(huge) is huge
    assert (
        accounting.seen_tool_set((Tool("big", "", "x" * accounting.TOOL_SETS.max_bytes),)) is huge
    )
