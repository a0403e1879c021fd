"""Request series, headers and contexts (SPEC §2, "Series start" and "Headers and context").

A request series is a run of requests whose messages extend each other as a prefix. These pure
decisions say when a series starts and which `request/header` and `request/context` log events
a request needs. Both are log events, never surface nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from admission_service.domain.messages import Tool


class CapabilitySource(StrEnum):
    REQUEST = "request"
    CATALOG = "catalog"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class Route:
    """The provider/model a step's request is prepared for, with its resolved capabilities."""

    provider: str
    model: str
    context_window: int
    in_history: bool
    tool_update: bool
    capability_source: CapabilitySource = CapabilitySource.REQUEST


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The request configuration a provider cache keys on before the messages: route and tools,
    and the harness's sampling configuration (``config``: canonical key/value pairs, sorted by
    key; a change logs a ``change`` header but does not start a series)."""

    provider: str
    model: str
    tools: tuple[Tool, ...]
    config: tuple[tuple[str, str], ...] = ()


def canonical_config(config: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A header's configuration in canonical form: its pairs sorted by key (code point order,
    which is also UTF-8 byte order). Values are opaque and compared byte for byte."""
    return tuple(sorted(config.items()))


class HeaderReason(StrEnum):
    INITIAL = "initial"
    RESUME = "resume"
    CHANGE = "change"
    SERIES = "series"


@dataclass(frozen=True, slots=True)
class HeaderLog:
    """A logged `request/header`: the header, why it was logged, and whether a series starts."""

    seq: int
    reason: HeaderReason
    starts_series: bool
    header: RequestHeader


@dataclass(frozen=True, slots=True)
class RequestContext:
    provider: str
    model: str
    context_window: int
    in_history: bool


@dataclass(frozen=True, slots=True)
class ContextLog:
    seq: int
    context: RequestContext


@dataclass(frozen=True, slots=True)
class SeriesState:
    """What a session remembers between requests to decide series starts and headers.

    ``last_request_generation`` is the replace generation seen by the last derived request
    (None before the first request).
    """

    replace_generation: int = 0
    last_request_generation: int | None = None
    last_header: HeaderLog | None = None
    last_context: ContextLog | None = None

    def generation_moved(self) -> bool:
        last = self.last_request_generation
        return last is not None and last != self.replace_generation


def tools_changed(state: SeriesState, tools: tuple[Tool, ...]) -> bool:
    """The visible tool-schema set differs from the last logged header (in order, byte for byte)."""
    return state.last_header is not None and state.last_header.header.tools != tools


def series_starts(
    state: SeriesState, *, declared: bool, tools: tuple[Tool, ...], route: Route
) -> bool:
    """SPEC §2 "Series start": declared, generation moved, or tools changed without support.

    A provider or model swap alone is not a series start, nor is a resume.
    """
    return (
        declared
        or state.generation_moved()
        or (tools_changed(state, tools) and not route.tool_update)
    )


def header_reason(
    state: SeriesState, header: RequestHeader, *, resume: bool, starts_series: bool
) -> HeaderReason | None:
    """Which `request/header` the request needs, if any.

    ``starts_series`` must be computed after the step's system commits, so a consolidation's
    own replacements count (an incapable route's head rewrite logs a ``series`` header).
    """
    if state.last_header is None:
        return HeaderReason.INITIAL
    if resume:
        return HeaderReason.RESUME
    if state.last_header.header != header:
        return HeaderReason.CHANGE
    if starts_series:
        return HeaderReason.SERIES
    return None


def context_of(route: Route) -> RequestContext:
    return RequestContext(route.provider, route.model, route.context_window, route.in_history)


def context_changed(state: SeriesState, context: RequestContext) -> bool:
    return state.last_context is None or state.last_context.context != context
