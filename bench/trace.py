"""Cache economics: a deterministic, realistic agent trace replayed through the running
service, once on an in-history route and once on a route without the capability.

The trace (300 steps, seeded) is what a coding agent does: turns that start with a user
message, then tool calls and their results (file reads, searches, test runs, of very different
sizes), then a final answer. The rendered system prompt changes where harnesses change it: a
skill registers (its section joins the skills list), plan mode enters and leaves (a section
appears and disappears), and the ``{{model}}`` variable of the prompt changes. When the request
reaches 70% of the context window the harness compacts once (PlanCompaction + Compact with a
summary), as harnesses do.

For every request the service's cache forecast gives the byte-identical prefix shared with the
previous request. The replay reports the share of input tokens served from that prefix, the
cold requests (those that do not extend the previous request: the provider re-reads from the
divergence point) with their reasons, and the tokens written (input not served from the prefix).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from bench.client import IN_HISTORY, REPLACE, Session, assistant, channel, stub, tool_result, user

STEPS = 300
CONTEXT_WINDOW = 128_000
COMPACT_AT = 0.70
SEED = 7

BASE_PROMPT = (
    "You are an autonomous coding agent working in the user's repository. "
    "Read before you write, keep changes small, run the tests after every change, "
    "and explain what you did in plain words. "
) * 40
TOOLS = [
    pb.Tool(
        name=name,
        description=f"{name.replace('_', ' ')}: {description}",
        parameters_json='{"type":"object","properties":{"path":{"type":"string"},'
        '"pattern":{"type":"string"},"content":{"type":"string"}},"required":["path"]}',
    )
    for name, description in [
        ("read_file", "read a file of the workspace, with line numbers"),
        ("write_file", "replace the content of a file"),
        ("edit_file", "apply an exact search-and-replace edit to a file"),
        ("grep", "search the workspace for a regular expression"),
        ("run_tests", "run the test suite, or one test, and return its output"),
        ("list_dir", "list a directory"),
    ]
]
SKILLS = ["pdf-reports", "database-migrations", "release-notes"]
SKILL_AT = {25: 0, 110: 1, 230: 2}
PLAN_MODE = [(60, 92), (205, 220)]
MODEL_LABEL_CHANGE_AT = 150


@dataclass(frozen=True)
class Step:
    index: int
    prompt: str
    user: str | None
    assistant: str
    calls: tuple[tuple[str, str, str], ...]
    results: tuple[str, ...]


def render_prompt(step: int) -> str:
    """The system prompt a harness renders for ``step``."""
    label = "DeepSeek Flash" if step < MODEL_LABEL_CHANGE_AT else "DeepSeek Flash (reasoning on)"
    parts = [BASE_PROMPT, f"\nYou are running as {label}."]
    skills = [SKILLS[i] for at, i in SKILL_AT.items() if step >= at]
    if skills:
        parts.append("\n# Skills\n" + "\n".join(f"- {s}: load with /skill {s}" for s in skills))
    if any(start <= step < end for start, end in PLAN_MODE):
        parts.append(
            "\n# PLAN MODE\nYou are in plan mode: investigate and propose a plan; do not edit "
            "files until the user approves it."
        )
    return "".join(parts)


def _prose(rng: random.Random, tokens: int) -> str:
    words = [
        "the",
        "module",
        "function",
        "returns",
        "test",
        "config",
        "value",
        "error",
        "when",
        "we",
        "call",
        "update",
        "server",
        "request",
        "session",
        "prompt",
        "cache",
        "file",
    ]
    out: list[str] = []
    chars = 0
    while chars < tokens * 4:
        word = rng.choice(words)
        out.append(word)
        chars += len(word) + 1
    return " ".join(out)


def build_trace(steps: int = STEPS, seed: int = SEED) -> list[Step]:
    rng = random.Random(seed)
    trace: list[Step] = []
    turn_left = 0
    for index in range(steps):
        starts_turn = turn_left == 0
        if starts_turn:
            turn_left = rng.randint(4, 14)
        turn_left -= 1
        user_text = _prose(rng, rng.randint(20, 200)) if starts_turn else None
        if turn_left == 0:  # the turn's final answer
            trace.append(
                Step(
                    index,
                    render_prompt(index),
                    user_text,
                    _prose(rng, rng.randint(80, 400)),
                    (),
                    (),
                )
            )
            continue
        count = 1 if rng.random() < 0.8 else 2
        calls = []
        results = []
        for k in range(count):
            tool = rng.choice(
                ["read_file", "read_file", "grep", "edit_file", "run_tests", "list_dir"]
            )
            calls.append((f"call-{index}-{k}", tool, '{"path":"src/service/app.py"}'))
            size = {
                "read_file": rng.randint(100, 900),
                "grep": rng.randint(30, 250),
                "edit_file": rng.randint(20, 80),
                "run_tests": rng.randint(50, 500),
                "list_dir": rng.randint(30, 200),
            }[tool]
            results.append(_prose(rng, size))
        trace.append(
            Step(
                index,
                render_prompt(index),
                user_text,
                _prose(rng, rng.randint(20, 150)),
                tuple(calls),
                tuple(results),
            )
        )
    return trace


@dataclass
class Replay:
    route: str
    requests: int = 0
    input_tokens: int = 0
    reused_tokens: int = 0
    written_tokens: int = 0
    cold: list[dict[str, Any]] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    compactions: list[int] = field(default_factory=list)

    def add(
        self, step: int, forecast: pb.CacheForecast, after_compaction: bool, prompt_changed: bool
    ) -> None:
        self.requests += 1
        self.input_tokens += forecast.total_tokens
        self.reused_tokens += forecast.reused_tokens
        self.written_tokens += forecast.total_tokens - forecast.reused_tokens
        reason = pb.DivergenceReason.Name(forecast.divergence_reason).removeprefix(
            "DIVERGENCE_REASON_"
        )
        self.reasons[reason] += 1
        if forecast.divergence_reason != pb.DIVERGENCE_REASON_NONE:
            cause = "other"
            if forecast.divergence_reason == pb.DIVERGENCE_REASON_FIRST_REQUEST:
                cause = "series start (first request)"
            elif after_compaction:
                cause = "compaction"
            elif prompt_changed:
                cause = "prompt change rewrote the head"
            self.cold.append(
                {
                    "step": step,
                    "reason": reason,
                    "cause": cause,
                    "reused_tokens": forecast.reused_tokens,
                    "total_tokens": forecast.total_tokens,
                }
            )

    def summary(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "reused_tokens": self.reused_tokens,
            "prefix_share": round(self.reused_tokens / self.input_tokens, 4),
            "tokens_written": self.written_tokens,
            "cold_requests": len(self.cold),
            "cold_not_compaction_or_series_start": sum(
                c["cause"] not in ("compaction", "series start (first request)") for c in self.cold
            ),
            "divergence_reasons": dict(sorted(self.reasons.items())),
            "compaction_steps": self.compactions,
            "cold": self.cold,
        }


async def replay(
    target: str, route_name: str, trace: list[Step], context_window: int = CONTEXT_WINDOW
) -> dict[str, Any]:
    route = IN_HISTORY if route_name == "in-history" else REPLACE
    result = Replay(route_name)
    async with channel(target) as ch:
        admission = stub(ch)
        session = await Session.create(admission, route=route)
        compacted = False
        after_compaction = False
        previous_prompt = ""
        for step in trace:
            users = [user(step.user)] if step.user else []
            response, _ = await session.admit(step.prompt, users, delta=True, tools=TOOLS)
            forecast = response.forecast
            result.add(step.index, forecast, after_compaction, step.prompt != previous_prompt)
            previous_prompt = step.prompt
            after_compaction = False
            reused = forecast.reused_tokens
            await session.record(
                assistant(step.assistant, list(step.calls)),
                [
                    tool_result(call[0], text)
                    for call, text in zip(step.calls, step.results, strict=True)
                ],
                input_tokens=forecast.total_tokens,
                output_tokens=len(step.assistant) // 4,
                cache_read_tokens=reused,
                cache_write_tokens=forecast.total_tokens - reused,
            )
            if not compacted and forecast.total_tokens >= COMPACT_AT * context_window:
                planned = await admission.PlanCompaction(
                    api.PlanCompactionRequest(
                        session_id=session.session_id, retain_tokens=context_window // 8
                    )
                )
                await admission.Compact(
                    api.CompactRequest(
                        session_id=session.session_id,
                        plan_token=planned.plan_token,
                        summary="Summary of the work so far: "
                        + "the agent read and edited files. " * (context_window // 1000),
                    )
                )
                compacted = after_compaction = True
                result.compactions.append(step.index)
    return result.summary()
