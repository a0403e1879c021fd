"""The use cases' inputs and outputs: plain frozen values, independent of gRPC and SQL."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from admission_service.domain.accounting import CacheForecast, TokenBreakdown
from admission_service.domain.admission import AppliedCommit
from admission_service.domain.catalog import Capability
from admission_service.domain.compaction import CompactionPlan
from admission_service.domain.events import Event
from admission_service.domain.messages import Message, Tool, ToolResult
from admission_service.domain.series import ContextLog, HeaderLog, Route, SeriesState
from admission_service.domain.surface import EffectivePrompt
from admission_service.domain.wire import WireFormat

# ---- inputs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """A route as the harness prepared it; unspecified capabilities come from the catalog."""

    provider: str
    model: str
    context_window: int
    system_prompt_update: Capability = Capability.UNSPECIFIED
    tool_update: Capability = Capability.UNSPECIFIED


@dataclass(frozen=True, slots=True)
class Idempotency:
    """A caller's ``request_id`` and the digest of the request it was first used with."""

    request_id: str
    request_digest: bytes


@dataclass(frozen=True, slots=True)
class AdmitCommand:
    session_id: str
    turn: int
    step: int
    rendered_prompt: str
    tools: tuple[Tool, ...]
    route: RouteRequest
    users: tuple[Message, ...] = ()
    starts_request_series: bool = False
    resume: bool = False
    wire_format: WireFormat = WireFormat.NEUTRAL
    validate_only: bool = False
    expected_revision: int | None = None


@dataclass(frozen=True, slots=True)
class ReconcileCommand:
    session_id: str
    admission_id: str
    route: RouteRequest
    wire_format: WireFormat = WireFormat.NEUTRAL
    validate_only: bool = False
    expected_revision: int | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RecordCommand:
    session_id: str
    admission_id: str
    assistant: Message | None = None
    tool_results: tuple[ToolResult, ...] = ()
    usage: Usage | None = None
    expected_revision: int | None = None


@dataclass(frozen=True, slots=True)
class PlanCompactionCommand:
    """Exactly one of ``retain_tokens`` and ``seq_range`` (start_seq, end_seq) is set."""

    session_id: str
    retain_tokens: int | None = None
    seq_range: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class CompactCommand:
    session_id: str
    plan_token: str
    summary: str
    expected_revision: int | None = None


# ---- outputs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionInfo:
    session_id: str
    create_time: datetime
    update_time: datetime
    revision: int
    event_count: int
    replace_generation: int


@dataclass(frozen=True, slots=True)
class DerivedRequestView:
    wire_format: WireFormat
    messages: tuple[Message, ...]
    body_json: str
    tools: tuple[Tool, ...]


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What Admit (attempt 0) and Reconcile (attempts 1, 2, …) return."""

    admission_id: str
    attempt: int
    revision: int
    commits: tuple[AppliedCommit, ...]
    user_seqs: tuple[int, ...]
    header: HeaderLog | None
    context: ContextLog | None
    starts_series: bool
    request: DerivedRequestView
    effective_prompt: EffectivePrompt
    forecast: CacheForecast
    route: Route


@dataclass(frozen=True, slots=True)
class RecordResult:
    revision: int
    assistant_seq: int | None
    tool_result_seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PlanResult:
    plan_token: str
    plan: CompactionPlan
    summarization_input: tuple[Message, ...]
    tools: tuple[Tool, ...]
    revision: int


@dataclass(frozen=True, slots=True)
class CompactResult:
    revision: int
    summary_seq: int
    shadowed_seqs: tuple[int, ...]
    commits: tuple[AppliedCommit, ...]
    effective_prompt: EffectivePrompt


@dataclass(frozen=True, slots=True)
class SystemNodeView:
    seq: int
    time: datetime
    turn: int
    step: int
    text: str
    update: bool


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    request_index: int
    admission_id: str
    attempt: int
    forecast: CacheForecast
    observed: Usage | None

    @property
    def drift_tokens(self) -> int:
        """Observed cache reads minus forecast reused tokens (0 until usage is recorded)."""
        if self.observed is None:
            return 0
        return self.observed.cache_read_tokens - self.forecast.reused_tokens


@dataclass(frozen=True, slots=True)
class InspectResult:
    session: SessionInfo
    effective_prompt: EffectivePrompt
    system_nodes: tuple[SystemNodeView, ...]
    request: DerivedRequestView
    breakdown: TokenBreakdown
    series: SeriesState
    ledger: tuple[LedgerEntry, ...]


@dataclass(frozen=True, slots=True)
class EventView:
    event: Event
    commit_time: datetime


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: tuple[T, ...]
    next_page_token: str
