"""The providers' official SDKs as oracles for a derived request's body (SPEC §7).

``check_body`` validates a body against the SDK's own param types (pydantic ``TypeAdapter`` over
the SDK's TypedDicts; every lazy ``Iterable`` consumed, so each item is really validated) and
requires the validated value to equal the body: pydantic drops keys a TypedDict does not
declare, so a difference is a field the provider's schema does not have. The only undeclared
fields allowed are the documented extensions of the route's provider (DeepSeek's
``reasoning_content``). Then it applies ``acceptance``: the providers' documented rules that
the types cannot express.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from anthropic.types import MessageParam, TextBlockParam, ToolParam
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from openai.types.responses import FunctionToolParam, ResponseInputParam
from pydantic import TypeAdapter

from tests.provider import acceptance

Json = dict[str, Any]

# Kept alive for the whole run: a lazy iterable validates its items through its adapter.
CHAT_MESSAGES: TypeAdapter[Any] = TypeAdapter(list[ChatCompletionMessageParam])
CHAT_TOOLS: TypeAdapter[Any] = TypeAdapter(list[ChatCompletionFunctionToolParam])
RESPONSES_INPUT: TypeAdapter[Any] = TypeAdapter(ResponseInputParam)
RESPONSES_TOOLS: TypeAdapter[Any] = TypeAdapter(list[FunctionToolParam])
ANTHROPIC_MESSAGES: TypeAdapter[Any] = TypeAdapter(list[MessageParam])
ANTHROPIC_SYSTEM: TypeAdapter[Any] = TypeAdapter(str | list[TextBlockParam])
ANTHROPIC_TOOLS: TypeAdapter[Any] = TypeAdapter(list[ToolParam])

# Fields a provider's API takes beyond the SDK's schema (docs/WIRE_FORMATS.md cites them).
EXTENSIONS = {("openai_chat", "deepseek"): {"reasoning_content"}}


def consumed(value: Any) -> Any:
    """``value`` with every lazy iterable pydantic returned read to the end, recursively."""
    if isinstance(value, dict):
        return {key: consumed(item) for key, item in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple) or hasattr(value, "__iter__"):
        return [consumed(item) for item in value]
    return value


def _without(body: Any, fields: set[str]) -> Any:
    if not fields:
        return body
    if isinstance(body, dict):
        return {key: _without(item, fields) for key, item in body.items() if key not in fields}
    if isinstance(body, list):
        return [_without(item, fields) for item in body]
    return body


def _validated(adapter: TypeAdapter[Any], value: Any, allowed: set[str]) -> list[str]:
    expected = _without(value, allowed)
    try:
        result = consumed(adapter.validate_python(expected))
    except Exception as error:  # pydantic.ValidationError, with the offending location
        return [f"SDK types: {error}"]
    if result != expected:
        difference = _first_difference(result, expected)
        return [f"SDK types: fields outside the schema or coerced: {difference}"]
    return []


def _first_difference(got: Any, want: Any, path: str = "") -> str:
    if isinstance(got, dict) and isinstance(want, dict):
        for key in sorted(set(got) | set(want)):
            if got.get(key, "<absent>") != want.get(key, "<absent>"):
                return _first_difference(
                    got.get(key, "<absent>"), want.get(key, "<absent>"), f"{path}.{key}"
                )
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            if a != b:
                return _first_difference(a, b, f"{path}[{index}]")
    return f"{path or '<body>'}: validated {got!r}, sent {want!r}"


def check_body(wire: str, body_json: str, *, provider: str, in_history: bool) -> list[str]:
    """Every way ``body_json`` would fail at the provider; empty when it is accepted."""
    body: Json = json.loads(body_json)
    allowed = EXTENSIONS.get((wire, provider), set())
    problems: list[str] = []
    if wire == "openai_chat":
        assert set(body) <= {"messages", "tools"}, body.keys()
        problems += _validated(CHAT_MESSAGES, body["messages"], allowed)
        problems += _validated(CHAT_TOOLS, body.get("tools", []), set())
        problems += acceptance.openai_chat(body, provider=provider, in_history=in_history)
    elif wire == "openai_responses":
        assert set(body) <= {"input", "tools"}, body.keys()
        problems += _validated(RESPONSES_INPUT, body["input"], allowed)
        problems += _validated(RESPONSES_TOOLS, body.get("tools", []), set())
        problems += acceptance.openai_responses(body, in_history=in_history)
    else:
        assert wire == "anthropic_messages"
        assert set(body) <= {"messages", "system", "tools"}, body.keys()
        problems += _validated(ANTHROPIC_MESSAGES, body["messages"], allowed)
        if "system" in body:
            problems += _validated(ANTHROPIC_SYSTEM, body["system"], set())
        problems += _validated(ANTHROPIC_TOOLS, body.get("tools", []), set())
        problems += acceptance.anthropic_messages(body, provider=provider, in_history=in_history)
    return problems


def walk(value: Any) -> Iterator[Any]:
    """Every dict and list inside ``value``, depth first."""
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)
