"""Property tests of the kit's converters against the official SDKs' types.

Random responses are built with the SDKs' own response types (``model_validate``, which refuses a
shape the SDK does not accept); each converter's output must keep every id, name, argument text,
signature and reasoning text in order, map the usage as documented, and — rendered back by the
service's own wire renderer into the next request — give the assistant turn the provider sent.
"""

from __future__ import annotations

import json
from typing import Any

from admission_service.api.convert import assistant_from_proto
from admission_service.domain.messages import user_text
from admission_service.domain.wire import WireFormat, render
from anthropic.types import Message
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from promptadmission.kit import model_output, tool_result
from promptadmission.kit.json_text import dumps

from tests.provider.oracles import check_body

Json = dict[str, Any]
# Texts the providers send: any Unicode but surrogates (not valid UTF-8, so never in JSON).
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
WORD = st.text("abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=20)
COUNT = st.integers(0, 2**31)
JSON_LEAF = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TEXT
JSON_FLOAT = st.floats(allow_nan=False, allow_infinity=False)
JSON_VALUE = st.recursive(
    JSON_LEAF | JSON_FLOAT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
JSON_OBJECT = st.dictionaries(TEXT, JSON_VALUE, max_size=5)
SETTINGS = settings(max_examples=100, deadline=None)


# ---- OpenAI Chat Completions and DeepSeek -----------------------------------------------------


@st.composite
def chat_completions(draw: st.DrawFn) -> Json:
    calls = [
        {
            "id": f"call_{index}_{draw(WORD)}",
            "type": "function",
            "function": {"name": draw(WORD), "arguments": dumps(draw(JSON_OBJECT))},
        }
        for index in range(draw(st.integers(0, 3)))
    ]
    message: Json = {"role": "assistant", "content": draw(st.none() | TEXT.filter(bool))}
    if calls:
        message["tool_calls"] = calls
    if message["content"] is None and not calls:
        message["content"] = draw(TEXT)
    reasoning = draw(st.none() | TEXT.filter(bool))
    if reasoning is not None:
        message["reasoning_content"] = reasoning  # DeepSeek's field beyond OpenAI's schema
    prompt, hit = draw(COUNT), draw(COUNT)
    usage: Json = {"prompt_tokens": prompt, "completion_tokens": draw(COUNT), "total_tokens": 0}
    if draw(st.booleans()):
        usage["prompt_tokens_details"] = {"cached_tokens": hit}
    else:
        usage |= {"prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": prompt - hit}
    return {
        "id": "chatcmpl-p",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage,
    }


@SETTINGS
@given(chat_completions())
def test_a_chat_completion_keeps_reasoning_text_and_calls_in_order(raw: Json) -> None:
    output = model_output(ChatCompletion.model_validate(raw))
    message = raw["choices"][0]["message"]
    expected: list[tuple[str, ...]] = []
    if message.get("reasoning_content"):
        expected.append(("reasoning", message["reasoning_content"], ""))
    if message["content"]:
        expected.append(("text", message["content"]))
    expected += [
        ("tool_call", call["id"], call["function"]["name"], call["function"]["arguments"])
        for call in message.get("tool_calls", [])
    ]
    assert _kinds(output.assistant) == expected
    usage = raw["usage"]
    assert output.usage is not None
    assert (output.usage.input_tokens, output.usage.output_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    hit = usage.get("prompt_tokens_details", {}).get(
        "cached_tokens", usage.get("prompt_cache_hit_tokens")
    )
    assert output.usage.cache_read_tokens == hit


@SETTINGS
@given(chat_completions())
def test_a_deepseek_completion_renders_back_as_the_assistant_turn_it_was(raw: Json) -> None:
    output = model_output(ChatCompletion.model_validate(raw))
    sent = raw["choices"][0]["message"]
    body = _next_request(output.assistant, WireFormat.OPENAI_CHAT, "deepseek")
    turns = json.loads(body)["messages"][1:]
    if not (sent["content"] or sent.get("tool_calls") or sent.get("reasoning_content")):
        assert turns == []  # an empty assistant derives to nothing
        return
    (turn,) = turns
    assert turn.get("tool_calls", []) == sent.get("tool_calls", [])
    assert turn.get("reasoning_content") == sent.get("reasoning_content")
    assert (turn["content"] or None) == (sent["content"] or None)


# ---- OpenAI Responses -------------------------------------------------------------------------


@st.composite
def responses(draw: st.DrawFn) -> Json:
    items: list[Json] = []
    for index in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["reasoning", "message", "function_call"]))
        if kind == "reasoning":
            summaries = draw(st.lists(TEXT, max_size=2))
            items.append(
                {
                    "id": f"rs_{index}",
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": text} for text in summaries],
                    "encrypted_content": draw(st.none() | WORD),
                }
            )
        elif kind == "message":
            parts = [
                {"type": "output_text", "text": text, "annotations": []}
                if draw(st.booleans())
                else {"type": "refusal", "refusal": text}
                for text in draw(st.lists(TEXT, min_size=1, max_size=3))
            ]
            items.append(
                {
                    "id": f"msg_{index}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "phase": draw(st.none() | st.sampled_from(["commentary", "final_answer"])),
                    "content": parts,
                }
            )
        else:
            items.append(
                {
                    "id": f"fc_{index}",
                    "type": "function_call",
                    "call_id": f"call_{index}_{draw(WORD)}",
                    "name": draw(WORD),
                    "arguments": dumps(draw(JSON_OBJECT)),
                }
            )
    inputs, cached = draw(COUNT), draw(COUNT)
    return {
        "id": "resp_p",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "status": "completed",
        "output": items,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": inputs,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": draw(COUNT),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 0,
        },
    }


@SETTINGS
@given(responses())
def test_a_response_keeps_every_item_in_order(raw: Json) -> None:
    output = model_output(Response.model_validate(raw))
    expected: list[tuple[Any, ...]] = []
    for item in raw["output"]:
        if item["type"] == "reasoning":
            summary = tuple(part["text"] for part in item["summary"])
            expected.append(
                ("reasoning_item", item["id"], item["encrypted_content"] or "", summary)
            )
        elif item["type"] == "message":
            phase = (item["phase"],) if item["phase"] else ()
            expected += [
                ("text", part.get("text", part.get("refusal")), *phase) for part in item["content"]
            ]
        else:
            expected.append(("tool_call", item["call_id"], item["name"], item["arguments"]))
    assert _kinds(output.assistant) == expected
    assert output.usage is not None
    assert output.usage.input_tokens == raw["usage"]["input_tokens"]
    assert output.usage.cache_read_tokens == raw["usage"]["input_tokens_details"]["cached_tokens"]
    body = json.loads(_next_request(output.assistant, WireFormat.OPENAI_RESPONSES, "openai"))
    calls = [item for item in body["input"] if item.get("type") in {"function_call", "reasoning"}]
    assert calls == [
        {key: item[key] for key in ("type", "call_id", "name", "arguments")}
        if item["type"] == "function_call"
        else _reasoning_input(item)
        for index, item in enumerate(raw["output"])
        if item["type"] == "function_call"
        or (item["type"] == "reasoning" and _followed(raw["output"], index))
    ]


def _followed(items: list[Json], index: int) -> bool:
    """Whether an item the service sends follows ``items[index]`` (a reasoning item goes back
    only before the item that followed it; empty text sends nothing)."""
    return any(
        item["type"] == "function_call"
        or (
            item["type"] == "message"
            and any(p.get("text", p.get("refusal")) for p in item["content"])
        )
        for item in items[index + 1 :]
    )


def _reasoning_input(item: Json) -> Json:
    """A reasoning output item as the input item the service sends back."""
    sent = {"type": "reasoning", "id": item["id"], "summary": item["summary"]}
    if item["encrypted_content"]:
        sent["encrypted_content"] = item["encrypted_content"]
    return sent


# ---- Anthropic Messages -----------------------------------------------------------------------


@st.composite
def messages(draw: st.DrawFn) -> Json:
    content: list[Json] = []
    if draw(st.booleans()):
        content.append(
            {"type": "thinking", "thinking": draw(TEXT), "signature": draw(WORD)}  # signed
        )
    if draw(st.booleans()):
        content.append({"type": "redacted_thinking", "data": draw(WORD)})
    for index in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            content.append({"type": "text", "text": draw(TEXT.filter(bool))})
        else:
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{index}_{draw(WORD)}",
                    "name": draw(WORD),
                    "input": draw(JSON_OBJECT),
                }
            )
    if not content:
        content.append({"type": "text", "text": "ok"})
    return {
        "id": "msg_p",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": draw(COUNT),
            "output_tokens": draw(COUNT),
            "cache_read_input_tokens": draw(st.none() | COUNT),
            "cache_creation_input_tokens": draw(st.none() | COUNT),
        },
    }


@SETTINGS
@given(messages())
def test_a_message_renders_back_as_the_content_claude_sent(raw: Json) -> None:
    output = model_output(Message.model_validate(raw))
    body = _next_request(output.assistant, WireFormat.ANTHROPIC_MESSAGES, "anthropic")
    assert check_body("anthropic_messages", body, provider="anthropic", in_history=False) == [] or (
        output.tool_calls  # a turn with tool calls waits for its results: checked by the loop
    )
    turn = json.loads(body)["messages"][1]
    assert doubles(turn) == doubles({"role": "assistant", "content": raw["content"]})
    for call, block in zip(
        output.tool_calls, [b for b in raw["content"] if b["type"] == "tool_use"], strict=True
    ):
        assert doubles(json.loads(call.arguments_json)) == doubles(block["input"])
    usage = raw["usage"]
    assert output.usage is not None
    assert output.usage.cache_read_tokens == (usage["cache_read_input_tokens"] or 0)
    assert output.usage.cache_write_tokens == (usage["cache_creation_input_tokens"] or 0)


# ---- tool results and JSON text ---------------------------------------------------------------


@SETTINGS
@given(JSON_VALUE.filter(lambda value: not isinstance(value, str)))
def test_a_json_tool_value_is_its_json_text(value: Any) -> None:
    result = tool_result("call_1", value)
    (block,) = result.content
    assert doubles(json.loads(block.text.text)) == doubles(value)
    assert not result.is_error


# Keys that are not array indices (JavaScript moves those first; tested below).
NAMED_KEY = TEXT.filter(lambda key: not (key.isascii() and key.isdigit()))


@SETTINGS
@given(st.recursive(JSON_LEAF, lambda inner: st.lists(inner) | st.dictionaries(NAMED_KEY, inner)))
def test_json_text_without_fractions_is_pythons_compact_json(value: Any) -> None:
    assert dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_json_text_puts_array_index_keys_first_as_javascript_does() -> None:
    # node -e 'console.log(JSON.stringify(JSON.parse(TEXT)))' printed the expected text: an
    # object parsed in JavaScript keeps array-index keys first, ascending (hypothesis found
    # {"": null, "0": null} written in two orders by the two kits).
    text = '{"": null, "b": 1, "10": 2, "2": 3, "01": 4, "4294967294": 5, "4294967295": 6, "-1": 7}'
    assert dumps(json.loads(text)) == (
        '{"2":3,"10":2,"4294967294":5,"":null,"b":1,"01":4,"4294967295":6,"-1":7}'
    )


@SETTINGS
@given(JSON_FLOAT)
def test_a_number_reads_back_as_itself(value: float) -> None:
    text = dumps(value)
    assert float(text) == value
    assert not text.endswith(".0") and "e+0" not in text and "e-0" not in text  # JavaScript's form


def doubles(value: Any) -> Any:
    """``value`` with every number as a double: JSON numbers are doubles to the provider (and to
    JavaScript), so ``47676406130923890`` and ``4.767640613092389e16`` are the same number."""
    if isinstance(value, dict):
        return {key: doubles(item) for key, item in value.items()}
    if isinstance(value, list):
        return [doubles(item) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def _kinds(message: Any) -> list[tuple[Any, ...]]:
    kinds: list[tuple[Any, ...]] = []
    for block in message.content:
        kind = block.WhichOneof("block")
        if kind == "text" and block.text.phase:
            kinds.append(("text", block.text.text, block.text.phase))
        elif kind == "text":
            kinds.append(("text", block.text.text))
        elif kind == "reasoning":
            kinds.append(("reasoning", block.reasoning.text, block.reasoning.signature))
        elif kind == "reasoning_item":
            item = block.reasoning_item
            kinds.append(("reasoning_item", item.id, item.encrypted_content, tuple(item.summary)))
        else:
            call = block.tool_call
            kinds.append(("tool_call", call.call_id, call.name, call.arguments_json))
    return kinds


def _next_request(assistant: Any, wire: WireFormat, provider: str) -> str:
    """The body of the request after this output (before its tool results)."""
    return render(
        [user_text("go"), assistant_from_proto(assistant)],
        wire,
        in_history=False,
        provider=provider,
    )
