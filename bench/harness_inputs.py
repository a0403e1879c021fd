"""What a harness sends with every step, unchanged, and what the service pays for it each time:
its tool set (the request key's digest and price, a provider body's tools) and a large system
prompt (counted ahead, off the event loop), and a tool set too large for the memo to keep (its
price is kept by digest). Each figure is a step's cost for that part, the
first time the worker sees the input and again on a later step (new objects, equal values, as
a parsed request carries them), in the same run.

    python -m bench.harness_inputs [--tools 40] [--prompt-kib 100] [--repeat 300]
        [--large-tools-mib 1]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import time
from collections.abc import Callable
from typing import Any

from admission_service.app.derivation import request_key
from admission_service.app.limits import Limits
from admission_service.app.pricing import counted_ahead
from admission_service.app.validation import check_tools
from admission_service.domain import messages as msg
from admission_service.domain.series import Route
from admission_service.domain.wire import WireFormat, render_body
from admission_service.tokenizers import counter_for, counter_off_the_loop

PROVIDERS = ("openai", "anthropic", "deepseek")


def tool_set(count: int, salt: str = "") -> tuple[msg.Tool, ...]:
    """``count`` tools shaped like a coding harness's (~1.1 KB of schema and description each),
    each string a new object (``salt`` makes a set unlike any other)."""
    schema = {
        "type": "object",
        "properties": {
            f"p{j}": {"type": "string", "description": "a parameter of the tool " * 4}
            for j in range(8)
        },
        "required": ["p0"],
    }
    return tuple(
        msg.Tool(
            f"tool_{i}{salt}",
            ("Reads, edits or runs what the agent asks for. " * 5).strip(),
            json.dumps(schema),
        )
        for i in range(count)
    )


def per_call_us(calls: list[Callable[[], Any]]) -> float:
    started = time.perf_counter()
    for call in calls:
        call()
    return (time.perf_counter() - started) / len(calls) * 1e6


def measure_tools(count: int, repeat: int) -> dict[str, float]:
    route = Route("openai", "gpt-5", context_window=400_000, in_history=True, tool_update=True)
    counter = counter_for("openai")
    users = [msg.Message(msg.Role.USER, (msg.Text("Fix the failing test, please."),))]
    figures = {}
    first = [tool_set(count, salt=f"-{n}") for n in range(repeat)]  # never seen before
    figures["request key, a new tool set"] = per_call_us(
        [functools.partial(request_key, route, tools, counter) for tools in first]
    )
    request_key(route, tool_set(count), counter)
    again = [tool_set(count) for _ in range(repeat)]  # equal to the one seen
    figures["request key, the same tool set again"] = per_call_us(
        [functools.partial(request_key, route, tools, counter) for tools in again]
    )
    check_tools(tool_set(count), Limits())
    again = [tool_set(count) for _ in range(repeat)]
    figures["the tool set's validation, again"] = per_call_us(
        [functools.partial(check_tools, tools, Limits()) for tools in again]
    )
    for wire in (
        WireFormat.OPENAI_CHAT,
        WireFormat.OPENAI_RESPONSES,
        WireFormat.ANTHROPIC_MESSAGES,
    ):
        render_body(users, wire, in_history=True, provider="openai", tools=tool_set(count))
        again = [tool_set(count) for _ in range(repeat)]
        figures[f"{wire.name} body, the same tool set again"] = per_call_us(
            [
                functools.partial(
                    render_body, users, wire, in_history=True, provider="openai", tools=tools
                )
                for tools in again
            ]
        )
    return figures


def measure_prompt(kib: int) -> dict[str, float]:
    """A large prompt counted ahead (``counter_off_the_loop``), the first time and again, with
    every tokenizer loaded first."""
    words = ["the", "agent", "reads", "files", "runs", "tests", "and", "edits", "code", "for"]
    prompt = " ".join(words[i % len(words)] for i in range(kib * 1024 // 5))[: kib * 1024]
    for provider in PROVIDERS:
        counter_for(provider)

    async def measure() -> dict[str, float]:
        figures = {}
        for provider in PROVIDERS:
            for label in ("first", "again"):
                text = "".join([prompt[:1], prompt[1:]])  # a new object, as a request carries
                started = time.perf_counter()
                await counter_off_the_loop(provider, [text])
                figures[f"{provider}: a {kib} KiB prompt counted ahead, {label}"] = (
                    time.perf_counter() - started
                ) * 1e6
        return figures

    return asyncio.run(measure())


def measure_large_tools(mib: float) -> dict[str, float]:
    """A tool set of ``mib`` MiB (four tools) priced as an Admit prices it: counted ahead
    (``counted_ahead``: in a thread, the first time), then its request key, per tokenizer."""
    schema = json.dumps(
        {"type": "object", "description": "a field of the schema " * int(mib * 13_000)}
    )

    def large_set() -> tuple[msg.Tool, ...]:  # new objects, equal values, as a request carries
        return tuple(
            msg.Tool(f"tool{i}", "large", "".join([schema[:1], schema[1:]])) for i in range(4)
        )

    route = Route("deepseek", "deepseek-flash", 1_000_000, in_history=True, tool_update=True)

    async def measure() -> dict[str, float]:
        figures = {}
        for provider in PROVIDERS:
            counter_for(provider)
            for label in ("first", "again"):
                tools = large_set()
                started = time.perf_counter()
                counter = await counted_ahead(provider, (), tools)
                request_key(route, tools, counter)
                figures[f"{provider}: a {mib:g} MiB tool set priced, {label}"] = (
                    time.perf_counter() - started
                ) * 1e6
        return figures

    return asyncio.run(measure())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=40)
    parser.add_argument("--prompt-kib", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--large-tools-mib", type=float, default=1.0)
    args = parser.parse_args(argv)
    figures = (
        measure_tools(args.tools, args.repeat)
        | measure_prompt(args.prompt_kib)
        | measure_large_tools(args.large_tools_mib)
    )
    for name, micros in figures.items():
        print(f"{name:58} {micros / 1000:8.3f} ms")  # noqa: T201


if __name__ == "__main__":
    main()
