"""The use cases' inputs and outputs: plain frozen values, independent of gRPC and SQL."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Generic, TypeVar, overload

from admission_service.domain.accounting import (
    CacheForecast,
    TokenBreakdown,
    observed_input_tokens,
)
from admission_service.domain.admission import AppliedCommit
from admission_service.domain.catalog import Capability
from admission_service.domain.compaction import CompactionPlan
from admission_service.domain.errors import WireFormatError
from admission_service.domain.events import Event
from admission_service.domain.messages import Message, Tool, ToolResult
from admission_service.domain.series import ContextLog, HeaderLog, Route, SeriesState
from admission_service.domain.session import (
    FULL_VIEW,
    RequestSelection,
    RequestView,
    Session,
)
from admission_service.domain.surface import EffectivePrompt
from admission_service.domain.wire import MessagesEnd, Omission, WireFormat
from admission_service.storage import codec

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


class RequestContent(Enum):
    """Which forms of a derived request a response carries. The typed messages and the
    rendered provider body are the same conversation: a response carries one of them unless
    the caller asks for both (issue 23)."""

    MESSAGES = "messages"
    BODY = "body"
    BOTH = "both"

    @property
    def messages(self) -> bool:
        return self is not RequestContent.BODY

    @property
    def body(self) -> bool:
        return self is not RequestContent.MESSAGES


@dataclass(frozen=True, slots=True)
class Delivery:
    """What of a derived request a response carries (``content``; None: the wire format's one
    form) and how it travels: ``streamed`` responses (StreamAdmit, StreamReconcile) go out in
    chunks, so they are bounded by the streamed bound instead of a message's."""

    content: RequestContent | None = None
    streamed: bool = False

    def content_for(self, wire: WireFormat) -> RequestContent:
        """The content asked for, or the format's one form: a NEUTRAL request is its messages,
        a provider format's is the body a harness posts."""
        if self.content is not None:
            return self.content
        return RequestContent.MESSAGES if wire is WireFormat.NEUTRAL else RequestContent.BODY


DEFAULT_DELIVERY = Delivery()


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
    selection: RequestSelection = FULL_VIEW
    # The harness's request configuration, canonical: (key, value) pairs sorted by key.
    config: tuple[tuple[str, str], ...] = ()
    # The previous step's output, recorded in the same transaction before this admission (its
    # expected_revision is None: the Admit's applies to the whole call).
    previous_output: RecordCommand | None = None
    delivery: Delivery = DEFAULT_DELIVERY


@dataclass(frozen=True, slots=True)
class ReconcileCommand:
    session_id: str
    admission_id: str
    route: RouteRequest
    wire_format: WireFormat = WireFormat.NEUTRAL
    validate_only: bool = False
    expected_revision: int | None = None
    selection: RequestSelection = FULL_VIEW
    delivery: Delivery = DEFAULT_DELIVERY


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

    @property
    def call_ids(self) -> tuple[str, ...]:
        """The ids of the tool calls the assistant message makes."""
        return self.assistant.tool_call_ids() if self.assistant is not None else ()


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


def session_info(record: Session) -> SessionInfo:
    return SessionInfo(
        record.session_id,
        record.create_time,
        record.update_time,
        record.revision,
        record.next_seq,
        record.series.replace_generation,
    )


class EncodedMessages(Sequence[Message]):
    """Derived messages kept as the stored protobuf frames (``storage.codec``), in one or more
    consecutive ``parts`` (the frames read from the database, then this transaction's tail):
    the API edge splices the parts into the response as they are, in its one join; the values
    are decoded, and the parts joined into ``frames``, only if read."""

    __slots__ = ("_decoded", "_frames", "parts")

    def __init__(self, *parts: bytes) -> None:
        self.parts = tuple(part for part in parts if part)
        self._frames: bytes | None = None
        self._decoded: tuple[Message, ...] | None = None

    @property
    def frames(self) -> bytes:
        """The parts as one ``bytes`` (joined once, on first use)."""
        if self._frames is None:
            parts = self.parts
            self._frames = parts[0] if len(parts) == 1 else b"".join(parts)
        return self._frames

    @property
    def size(self) -> int:
        return sum(map(len, self.parts))

    def _values(self) -> tuple[Message, ...]:
        if self._decoded is None:
            self._decoded = codec.decode_frames(self.frames)
        return self._decoded

    def __len__(self) -> int:
        return len(self._values())

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        return self._values()[index]

    def __iter__(self) -> Iterator[Message]:
        return iter(self._values())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EncodedMessages):
            return self.frames == other.frames
        if isinstance(other, Sequence):
            return self._values() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.frames)

    def __getstate__(self) -> bytes:
        return self.frames

    def __setstate__(self, state: bytes) -> None:
        self.parts = (state,) if state else ()
        self._frames = None
        self._decoded = None


@dataclass(frozen=True, slots=True)
class DerivedRequestView:
    """A derived request as returned: FULL (every message) or DELTA (the messages from
    ``first_message_index`` on), with the whole request's message count and digest."""

    wire_format: WireFormat
    messages: Sequence[Message]
    body: bytes  # the rendered provider body's JSON in UTF-8, as it is sent
    tools: tuple[Tool, ...]
    view: RequestView = RequestView.FULL
    first_message_index: int = 0
    total_messages: int = 0
    digest: bytes = b""
    # Inspect only: why the wire format could not express the request (the body is empty).
    render_error: WireFormatError | None = None
    # The blocks the body leaves out (the format has no place for them on this route).
    omitted: tuple[Omission, ...] = ()
    # What the response carries: ``messages`` is empty without MESSAGES, ``body``
    # without BODY.
    content: RequestContent = RequestContent.BOTH
    # An Anthropic Messages DELTA body: how many items at the end of the held body's list its
    # items replace, and how the held list ended (what it continued; a replay renders it again
    # from there).
    replaced_body_items: int = 0
    continues: MessagesEnd | None = None

    @property
    def body_json(self) -> str:
        return self.body.decode()


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
    recorded: RecordResult | None = None  # what an Admit's previous_output committed
    # The session's event count after the attempt: the request saw the events below it.
    log_seq: int = 0
    # The effective prompt's text is the admission's rendered prompt (stored once, by digest,
    # with the admission): a stored response then keeps no copy of it (app/replay.py).
    prompt_is_admitted: bool = False


@dataclass(frozen=True, slots=True)
class Spliced:
    """What a response carries after its head, each its own occurrence of its field (protobuf
    parsers merge them): the effective prompt's text when it is the admission's rendered
    prompt, the derived request's typed tools, its rendered body and its message frames. A
    stored response keeps only the head: the prompt and tools are the admission's (stored
    once, by digest), the body and frames are rebuilt from the surface."""

    prompt: str = ""
    tools: Sequence[Tool] = ()
    body: bytes = b""
    frames: Sequence[bytes] = ()

    @classmethod
    def of(cls, result: AttemptResult) -> Spliced:
        request = result.request
        prompt = result.effective_prompt.text if result.prompt_is_admitted else ""
        if not isinstance(request.messages, EncodedMessages):  # the head holds body and messages
            return cls(prompt, request.tools)
        return cls(prompt, request.tools, request.body, request.messages.parts)


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
    # The route's provider when the request was derived ("" for requests stored before it was
    # kept): it says how to read the usage and which tokenizer priced the estimate.
    provider: str = ""

    @property
    def drift_tokens(self) -> int:
        """Observed cache reads minus forecast reused tokens (0 until usage is recorded)."""
        if self.observed is None:
            return 0
        return self.observed.cache_read_tokens - self.forecast.reused_tokens

    @property
    def observed_input_tokens(self) -> int | None:
        """The prompt tokens the provider reported for this request (None until recorded)."""
        if self.observed is None:
            return None
        usage = self.observed
        return observed_input_tokens(
            self.provider, usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens
        )

    @property
    def observed_input_ratio(self) -> float:
        """Observed prompt tokens / the forecast's estimated total (0 until recorded)."""
        observed = self.observed_input_tokens
        if observed is None or not self.forecast.total_tokens:
            return 0.0
        return observed / self.forecast.total_tokens


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
