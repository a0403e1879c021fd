"""Counting every call attempt: a client interceptor and the figures a scenario reports."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

REPORT_VARIABLE = "PAS_RELIABILITY_REPORT"


def percentile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def latency_summary(values: list[float]) -> dict[str, float]:
    """p50 / p95 / p99 / max in milliseconds."""
    return {
        "p50_ms": round(percentile(values, 0.50) * 1000, 1),
        "p95_ms": round(percentile(values, 0.95) * 1000, 1),
        "p99_ms": round(percentile(values, 0.99) * 1000, 1),
        "max_ms": round(max(values, default=0.0) * 1000, 1),
    }


@dataclass
class CallStats:
    """Every attempt's status code, per method, with its latency."""

    codes: Counter[str] = field(default_factory=Counter)
    by_method: Counter[tuple[str, str]] = field(default_factory=Counter)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    # (code, seconds, the attempt's deadline in seconds or None) of every failed attempt
    failures: list[tuple[str, float, float | None, float]] = field(default_factory=list)
    ok_times: list[float] = field(default_factory=list)  # when each successful attempt ended

    def record(self, method: str, code: str, seconds: float, timeout: float | None) -> None:
        self.codes[code] += 1
        self.by_method[(method, code)] += 1
        self.latencies.setdefault(code, []).append(seconds)
        if code == "OK":
            self.ok_times.append(time.monotonic())
        else:
            self.failures.append((code, seconds, timeout, time.monotonic()))

    @property
    def calls(self) -> int:
        return sum(self.codes.values())

    def errors(self) -> dict[str, int]:
        return {code: n for code, n in sorted(self.codes.items()) if code != "OK"}

    def ok_latency(self) -> dict[str, float]:
        return latency_summary(self.latencies.get("OK", []))


def _method_name(method: str | bytes) -> str:
    text = method.decode() if isinstance(method, bytes) else method
    return text.rsplit("/", 1)[-1]


class CountingInterceptor(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    """Records every unary attempt (including each retry the client makes) in ``stats``."""

    def __init__(self, stats: CallStats) -> None:
        self.stats = stats

    async def intercept_unary_unary(
        self,
        continuation: Callable[[Any, Any], Any],
        client_call_details: Any,
        request: Any,
    ) -> Any:
        method = _method_name(client_call_details.method)
        started = time.monotonic()
        try:
            call = await continuation(client_call_details, request)
            code = await call.code()
        except asyncio.CancelledError:
            self.stats.record(method, "CANCELLED", time.monotonic() - started, None)
            raise
        self.stats.record(
            method, code.name, time.monotonic() - started, client_call_details.timeout
        )
        return call


def counting_channel(target: str, stats: CallStats, options: list[tuple[str, int]]) -> Any:
    from tests.api.support import DefaultDeadline

    # The stubs' interceptor type is partial.
    interceptors: list[Any] = [CountingInterceptor(stats), DefaultDeadline()]
    return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)


@dataclass
class Figures:
    """One scenario's reported figures; written to ``$PAS_RELIABILITY_REPORT`` (JSON lines)
    and shown in pytest's terminal summary."""

    scenario: str
    profile: str
    values: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def set(self, **values: Any) -> None:
        self.values.update(values)

    def finish(self) -> dict[str, Any]:
        record = {
            "scenario": self.scenario,
            "profile": self.profile,
            "time_s": round(time.monotonic() - self.started, 1),
            **self.values,
        }
        COLLECTED.append(record)
        path = os.environ.get(REPORT_VARIABLE, "").strip()
        if path:
            with Path(path).open("a") as out:
                out.write(json.dumps(record, sort_keys=False) + "\n")
        return record


COLLECTED: list[dict[str, Any]] = []
