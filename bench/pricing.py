"""``python -m bench.pricing``: what pricing costs on the step path, per tokenizer, in isolation.

A one-call step (S1) prices the nodes it writes: the previous output's 200-character assistant
message and the next step's 200-character user message (bench/scenarios.py). This times that
with each route family's tokenizer and with the heuristic, and the price of a 20-tool set
(done once per tool set and process: domain/accounting.py remembers it), in microseconds.
"""

from __future__ import annotations

import json
import time
import timeit
import warnings

from admission_service.domain.accounting import (
    HEURISTIC_COUNTER,
    TokenCounter,
    message_tokens,
    tools_tokens,
)
from admission_service.domain.messages import Message, Role, Text, Tool
from admission_service.tokenizers import counter_for

from bench.client import text

STEP = (
    Message(Role.ASSISTANT, (Text(text(200, "reply")),)),
    Message(Role.USER, (Text(text(200, "s1")),)),
)
SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "A file path relative to the workspace."},
            "content": {"type": "string", "description": "The new content of the file."},
        },
        "required": ["path"],
    }
)
TOOLS = tuple(Tool(f"tool_{i}", f"Does thing number {i} to a file.", SCHEMA) for i in range(20))


def measure(counter: TokenCounter, runs: int = 2000) -> tuple[float, float]:
    """Microseconds to price one step's two messages, and one 20-tool set."""
    step = timeit.timeit(lambda: [message_tokens(m, counter) for m in STEP], number=runs)
    tools = timeit.timeit(lambda: tools_tokens(TOOLS, counter), number=runs // 10)
    return step / runs * 1e6, tools / (runs // 10) * 1e6


def main() -> int:
    warnings.simplefilter("ignore", DeprecationWarning)
    lines = [f"{'tokenizer':12} {'load ms':>8} {'step us':>8} {'20 tools us':>12}"]
    for provider in ("", "deepseek", "anthropic", "openai"):
        started = time.perf_counter()
        counter = counter_for(provider) if provider else HEURISTIC_COUNTER
        load = (time.perf_counter() - started) * 1e3
        step, tools = measure(counter)
        lines.append(f"{counter.name:12} {load:8.0f} {step:8.1f} {tools:12.1f}")
    print("\n".join(lines))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
