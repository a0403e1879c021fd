"""Pure conversion between the v1 protos and the use cases' commands, results and domain values.

Inbound, only the *shape* of a request is checked here: enum numbers the contract does not
define (proto3 enums are open), content blocks with nothing set, roles and block kinds a message
may not carry, and required sub-messages. Sizes, ranges and everything that needs the session are
the use cases' business. Errors name the offending field by its proto path
(``users[2].content[0]``).

Outbound, responses of mutating RPCs are encoded with ``SerializeToString(deterministic=True)``
(``WRITES``): the use cases store those bytes with the effect and replay them for a repeated
``request_id``, and the servicer sends them as they are (``EncodedResponse``).
A derived request's messages arrive already encoded (the stored frames, ``app.EncodedMessages``)
and are spliced, with the rendered body, after the rest of the response as a second occurrence
of its ``request`` field, which protobuf parsers merge (repeated fields concatenate): no message
is re-encoded, and the idempotency record stores only the rest (``SplitAttemptEncoder``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from google.protobuf.message import Message as ProtoMessage
from google.protobuf.timestamp_pb2 import Timestamp
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb
from promptadmission.v1 import trajectory_pb2 as tpb

from admission_service.app import commands as app
from admission_service.app.trajectory_page import TrajectoryEntry, TrajectoryPage
from admission_service.domain.accounting import (
    CacheForecast,
    DivergenceReason,
    TokenBreakdown,
    seen_tool_set,
    tool_set_key,
)
from admission_service.domain.admission import AppliedCommit
from admission_service.domain.catalog import Capability
from admission_service.domain.errors import InvalidArgument, InvalidModelInfo, fields_under
from admission_service.domain.events import Append, Event, EventKind, Replace
from admission_service.domain.memo import BoundedMemo
from admission_service.domain.messages import (
    Block,
    Image,
    Message,
    Role,
    Text,
    Tool,
    ToolResult,
)
from admission_service.domain.projection import CommitOp
from admission_service.domain.prompt_fold import (
    ChangeKind,
    PromptChange,
    PromptNode,
    PromptSnapshot,
)
from admission_service.domain.series import (
    CapabilitySource,
    ContextLog,
    HeaderLog,
    HeaderReason,
    RequestContext,
    SeriesState,
    canonical_config,
)
from admission_service.domain.session import FULL_VIEW, HeldPrefix, RequestSelection, RequestView
from admission_service.domain.surface import EffectivePrompt
from admission_service.domain.trajectory import HeaderFact
from admission_service.domain.wire import WireFormat
from admission_service.storage import codec

if TYPE_CHECKING:
    from admission_service.app.unit_of_work import Reply

V = TypeVar("V")
K = TypeVar("K", bound=Enum)
P = TypeVar("P", bound=int)

# ---- enums --------------------------------------------------------------------------------


def _named(members: Iterable[K], value: Callable[[str], P], prefix: str) -> dict[K, P]:
    """Each member to the proto enum value named ``prefix`` + the member's name (a member the
    proto lacks fails at import)."""
    return {member: value(prefix + member.name) for member in members}


def _inbound(table: Mapping[K, P], unspecified: K) -> dict[int, K]:
    """The inverse of an outbound table, with the proto's zero value (UNSPECIFIED) read as
    ``unspecified``."""
    return {0: unspecified, **{int(value): member for member, value in table.items()}}


_WIRE_FORMATS_OUT = _named(WireFormat, pb.WireFormat.Value, "WIRE_FORMAT_")
_WIRE_FORMATS = _inbound(_WIRE_FORMATS_OUT, WireFormat.NEUTRAL)
_SYSTEM_PROMPT_UPDATES = _inbound(
    _named(Capability, pb.SystemPromptUpdate.Value, "SYSTEM_PROMPT_UPDATE_"),
    Capability.UNSPECIFIED,
)
_TOOL_UPDATES = _inbound(
    _named(Capability, pb.ToolUpdate.Value, "TOOL_UPDATE_"), Capability.UNSPECIFIED
)
_CAPABILITY_SOURCES = _named(CapabilitySource, pb.CapabilitySource.Value, "CAPABILITY_SOURCE_")
_COMMIT_OPS = _named(CommitOp, pb.CommitOperation.Value, "COMMIT_OPERATION_")
_HEADER_REASONS = _named(HeaderReason, pb.HeaderReason.Value, "HEADER_REASON_")
_LOCATIONS: Mapping[str, pb.PromptLocation.ValueType] = {
    "none": pb.PROMPT_LOCATION_NONE,
    "head": pb.PROMPT_LOCATION_HEAD,
    "in_history": pb.PROMPT_LOCATION_IN_HISTORY,
}
_DIVERGENCE_REASONS = _named(DivergenceReason, pb.DivergenceReason.Value, "DIVERGENCE_REASON_")
_REQUEST_VIEWS_OUT = _named(RequestView, pb.RequestView.Value, "REQUEST_VIEW_")
_REQUEST_VIEWS = _inbound(_REQUEST_VIEWS_OUT, RequestView.FULL)
_EVENT_KINDS = _named(EventKind, pb.EventKind.Value, "EVENT_KIND_")
_REQUEST_CONTENTS_OUT = _named(app.RequestContent, pb.RequestContent.Value, "REQUEST_CONTENT_")
_REQUEST_CONTENTS: dict[int, app.RequestContent | None] = {
    0: None,
    **{int(value): member for member, value in _REQUEST_CONTENTS_OUT.items()},
}

# Block kinds (the ContentBlock oneof names) each kind of inbound message may carry.
USER_BLOCKS = frozenset({"text", "image"})
ASSISTANT_BLOCKS = frozenset(
    {"text", "reasoning", "redacted_reasoning", "reasoning_item", "tool_call"}
)
TOOL_RESULT_BLOCKS = frozenset({"text", "image"})


def _enum_in(
    table: Mapping[int, V], value: int, field: str, enum_name: str, *, model_info: bool = False
) -> V:
    try:
        return table[value]
    except KeyError:
        message = "{value} is not a " + enum_name + " value"
        if model_info:
            raise InvalidModelInfo(field, message, value=value) from None
        raise InvalidArgument(field, message, value=value) from None


def wire_format_from_proto(value: int, field: str = "wire_format") -> WireFormat:
    """``WIRE_FORMAT_UNSPECIFIED`` means ``NEUTRAL``."""
    return _enum_in(_WIRE_FORMATS, value, field, "WireFormat")


def wire_format_to_proto(value: WireFormat) -> pb.WireFormat.ValueType:
    return _WIRE_FORMATS_OUT[value]


def selection_from_proto(
    request: api.AdmitRequest | api.ReconcileRequest | api.InspectRequest,
) -> RequestSelection:
    """The requested view; REQUEST_VIEW_UNSPECIFIED means FULL, and held_prefix counts only
    for DELTA."""
    view = _enum_in(_REQUEST_VIEWS, request.view, "view", "RequestView")
    if view is RequestView.FULL:
        return FULL_VIEW
    held = request.held_prefix
    if held.message_count < 0:
        raise InvalidArgument("held_prefix.message_count", "must not be negative")
    if held.body_items < 0:
        raise InvalidArgument("held_prefix.body_items", "must not be negative")
    return RequestSelection(view, HeldPrefix(held.message_count, held.digest, held.body_items))


def delivery_from_proto(
    request: api.AdmitRequest | api.ReconcileRequest | api.InspectRequest,
    *,
    streamed: bool = False,
) -> app.Delivery:
    """The requested content (REQUEST_CONTENT_UNSPECIFIED: the wire format's one form); a
    NEUTRAL request has no body to carry alone."""
    content = _enum_in(_REQUEST_CONTENTS, request.content, "content", "RequestContent")
    neutral = request.wire_format in (pb.WIRE_FORMAT_UNSPECIFIED, pb.WIRE_FORMAT_NEUTRAL)
    if content is app.RequestContent.BODY and neutral:
        raise InvalidArgument(
            "content",
            "REQUEST_CONTENT_BODY needs a provider wire_format: WIRE_FORMAT_NEUTRAL has no body",
        )
    if content is None and not streamed:
        return app.DEFAULT_DELIVERY
    return app.Delivery(content, streamed)


# ---- requests: idempotency ----------------------------------------------------------------


def request_digest(request: ProtoMessage) -> bytes:
    """What a repeated ``request_id`` is compared on: the whole request, deterministically."""
    return hashlib.sha256(request.SerializeToString(deterministic=True)).digest()


def idempotency_of(request_id: str, request: ProtoMessage) -> app.Idempotency | None:
    if not request_id:
        return None
    return app.Idempotency(request_id, request_digest(request))


def _expected_revision(
    request: api.DeleteSessionRequest
    | api.AdmitRequest
    | api.ReconcileRequest
    | api.RecordRequest
    | api.CompactRequest,
) -> int | None:
    return request.expected_revision if request.HasField("expected_revision") else None


# ---- requests: messages and tools ---------------------------------------------------------


def _block_from_proto(block: pb.ContentBlock, field: str, allowed: frozenset[str]) -> Block:
    which = block.WhichOneof("block")
    if which is None:
        raise InvalidArgument(field, "the content block is empty; set exactly one block kind")
    if which not in allowed:
        raise InvalidArgument(
            field, f"a {which} block is not allowed here (allowed: {', '.join(sorted(allowed))})"
        )
    if which != "tool_result":
        return codec.block_from_proto(block)
    # Inbound tool results travel as RecordRequest.tool_results, so no caller allows this kind;
    # their content is checked block by block with the field path.
    result = block.tool_result
    return ToolResult(
        result.call_id,
        _result_content(result.content, f"{field}.tool_result.content"),
        result.is_error,
    )


def _blocks_from_proto(
    blocks: Iterable[pb.ContentBlock], field: str, allowed: frozenset[str]
) -> tuple[Block, ...]:
    return tuple(
        _block_from_proto(block, f"{field}[{index}]", allowed) for index, block in enumerate(blocks)
    )


def _result_content(blocks: Iterable[pb.ContentBlock], field: str) -> tuple[Text | Image, ...]:
    content: list[Text | Image] = []
    for block in _blocks_from_proto(blocks, field, TOOL_RESULT_BLOCKS):
        assert isinstance(block, Text | Image)
        content.append(block)
    return tuple(content)


def _check_role(
    role: pb.MessageRole.ValueType, expected: pb.MessageRole.ValueType, field: str
) -> None:
    """The role must be ``expected``; ``MESSAGE_ROLE_UNSPECIFIED`` is read as ``expected``."""
    if role in (expected, pb.MESSAGE_ROLE_UNSPECIFIED):
        return
    if role not in pb.MessageRole.values():
        raise InvalidArgument(field, "{value} is not a MessageRole value", value=role)
    raise InvalidArgument(
        field, f"must be {pb.MessageRole.Name(expected)}, not {pb.MessageRole.Name(role)}"
    )


def user_from_proto(message: pb.Message, field: str) -> Message:
    _check_role(message.role, pb.MESSAGE_ROLE_USER, f"{field}.role")
    return Message(Role.USER, _blocks_from_proto(message.content, f"{field}.content", USER_BLOCKS))


def assistant_from_proto(message: pb.Message, field: str = "assistant") -> Message:
    _check_role(message.role, pb.MESSAGE_ROLE_ASSISTANT, f"{field}.role")
    content = _blocks_from_proto(message.content, f"{field}.content", ASSISTANT_BLOCKS)
    return Message(Role.ASSISTANT, content)


def tool_result_from_proto(result: pb.ToolResult, field: str) -> ToolResult:
    return ToolResult(
        result.call_id, _result_content(result.content, f"{field}.content"), result.is_error
    )


def tool_from_proto(tool: pb.Tool) -> Tool:
    return Tool(tool.name, tool.description, tool.parameters_json)


def route_from_proto(request: api.AdmitRequest | api.ReconcileRequest) -> app.RouteRequest:
    """The request's route; unknown capability numbers are INVALID_MODEL_INFO."""
    if not request.HasField("route"):
        raise InvalidArgument("route", "is required")
    route = request.route
    return app.RouteRequest(
        provider=route.provider,
        model=route.model,
        context_window=route.context_window,
        system_prompt_update=_enum_in(
            _SYSTEM_PROMPT_UPDATES,
            route.system_prompt_update,
            "route.system_prompt_update",
            "SystemPromptUpdate",
            model_info=True,
        ),
        tool_update=_enum_in(
            _TOOL_UPDATES, route.tool_update, "route.tool_update", "ToolUpdate", model_info=True
        ),
    )


# ---- requests: commands -------------------------------------------------------------------


def admit_command(request: api.AdmitRequest, *, streamed: bool = False) -> app.AdmitCommand:
    return app.AdmitCommand(
        session_id=request.session_id,
        turn=request.turn,
        step=request.step,
        rendered_prompt=request.rendered_prompt,
        tools=seen_tool_set(tuple(tool_from_proto(tool) for tool in request.tools)),
        route=route_from_proto(request),
        users=tuple(
            user_from_proto(user, f"users[{index}]") for index, user in enumerate(request.users)
        ),
        starts_request_series=request.starts_request_series,
        resume=request.resume,
        wire_format=wire_format_from_proto(request.wire_format),
        validate_only=request.validate_only,
        expected_revision=_expected_revision(request),
        selection=selection_from_proto(request),
        previous_output=_previous_output(request),
        config=canonical_config(request.config),
        delivery=delivery_from_proto(request, streamed=streamed),
    )


def reconcile_command(
    request: api.ReconcileRequest, *, streamed: bool = False
) -> app.ReconcileCommand:
    return app.ReconcileCommand(
        session_id=request.session_id,
        admission_id=request.admission_id,
        route=route_from_proto(request),
        wire_format=wire_format_from_proto(request.wire_format),
        validate_only=request.validate_only,
        expected_revision=_expected_revision(request),
        selection=selection_from_proto(request),
        delivery=delivery_from_proto(request, streamed=streamed),
    )


def record_command(request: api.RecordRequest) -> app.RecordCommand:
    return _output_command(request.session_id, request, _expected_revision(request))


def _output_command(
    session_id: str, output: api.RecordRequest | api.StepOutput, expected_revision: int | None
) -> app.RecordCommand:
    """A step's output, from a RecordRequest or an AdmitRequest's previous_output (whose
    fields have the same names and meanings)."""
    usage = None
    if output.HasField("usage"):
        usage = app.Usage(
            input_tokens=output.usage.input_tokens,
            output_tokens=output.usage.output_tokens,
            cache_read_tokens=output.usage.cache_read_tokens,
            cache_write_tokens=output.usage.cache_write_tokens,
        )
    return app.RecordCommand(
        session_id=session_id,
        admission_id=output.admission_id,
        assistant=(
            assistant_from_proto(output.assistant) if output.HasField("assistant") else None
        ),
        tool_results=tuple(
            tool_result_from_proto(result, f"tool_results[{index}]")
            for index, result in enumerate(output.tool_results)
        ),
        usage=usage,
        expected_revision=expected_revision,
    )


def _previous_output(request: api.AdmitRequest) -> app.RecordCommand | None:
    if not request.HasField("previous_output"):
        return None
    with fields_under("previous_output"):
        return _output_command(request.session_id, request.previous_output, None)


def plan_compaction_command(request: api.PlanCompactionRequest) -> app.PlanCompactionCommand:
    selection = request.WhichOneof("selection")
    if selection == "retain_tokens":
        return app.PlanCompactionCommand(request.session_id, retain_tokens=request.retain_tokens)
    if selection == "range":
        seq_range = (request.range.start_seq, request.range.end_seq)
        return app.PlanCompactionCommand(request.session_id, seq_range=seq_range)
    raise InvalidArgument("selection", "set exactly one of retain_tokens and range")


def compact_command(request: api.CompactRequest) -> app.CompactCommand:
    return app.CompactCommand(
        session_id=request.session_id,
        plan_token=request.plan_token,
        summary=request.summary,
        expected_revision=_expected_revision(request),
    )


def delete_expected_revision(request: api.DeleteSessionRequest) -> int | None:
    return _expected_revision(request)


# ---- responses: values --------------------------------------------------------------------


def timestamp(value: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def _optional_time(value: datetime | None) -> Timestamp | None:
    return timestamp(value) if value is not None else None


def tool_to_proto(tool: Tool) -> pb.Tool:
    return pb.Tool(
        name=tool.name, description=tool.description, parameters_json=tool.parameters_json
    )


def _tools(tools: Iterable[Tool]) -> list[pb.Tool]:
    return [tool_to_proto(tool) for tool in tools]


def _add_tools(field: Any, tools: Iterable[Tool]) -> None:
    """``tools`` added to a message's repeated ``Tool`` field in place: each string is copied
    into the message once (a built message added is copied again, and a tool set can be
    megabytes)."""
    for tool in tools:
        field.add(
            name=tool.name, description=tool.description, parameters_json=tool.parameters_json
        )


def session_to_proto(info: app.SessionInfo) -> pb.Session:
    return pb.Session(
        session_id=info.session_id,
        create_time=timestamp(info.create_time),
        update_time=timestamp(info.update_time),
        revision=info.revision,
        event_count=info.event_count,
        replace_generation=info.replace_generation,
    )


def commit_to_proto(applied: AppliedCommit) -> pb.SystemCommit:
    commit = applied.commit
    return pb.SystemCommit(
        operation=_COMMIT_OPS[commit.op],
        seq=applied.seq,
        text=commit.text,
        replaced_seq=commit.replaced_seq or 0,
    )


def header_log_to_proto(log: HeaderLog) -> pb.HeaderLog:
    proto = pb.HeaderLog()
    _fill_header_log(proto, log)
    return proto


def _fill_header_log(proto: pb.HeaderLog, log: HeaderLog, *, with_tools: bool = True) -> None:
    """``log`` written into ``proto`` in place: a tool set is copied into the message once (a
    message built and then copied in copies it twice, and a harness's tool set can be
    megabytes); without ``with_tools``, the header without them."""
    proto.seq = log.seq
    proto.reason = _HEADER_REASONS[log.reason]
    proto.starts_series = log.starts_series
    header = log.header
    proto.header.provider = header.provider
    proto.header.model = header.model
    if with_tools:
        _add_tools(proto.header.tools, header.tools)
    proto.header.config.update(header.config)


def _system_prompt_update(in_history: bool) -> pb.SystemPromptUpdate.ValueType:
    return pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY if in_history else pb.SYSTEM_PROMPT_UPDATE_REPLACE


def request_context_to_proto(context: RequestContext) -> pb.RequestContext:
    return pb.RequestContext(
        provider=context.provider,
        model=context.model,
        context_window=context.context_window,
        system_prompt_update=_system_prompt_update(context.in_history),
    )


def context_log_to_proto(log: ContextLog) -> pb.ContextLog:
    return pb.ContextLog(seq=log.seq, context=request_context_to_proto(log.context))


def effective_prompt_to_proto(prompt: EffectivePrompt) -> pb.EffectivePrompt:
    return pb.EffectivePrompt(
        text=prompt.text, seq=prompt.seq or 0, location=_LOCATIONS[prompt.location]
    )


def forecast_to_proto(forecast: CacheForecast) -> pb.CacheForecast:
    return pb.CacheForecast(
        reused_messages=forecast.reused_messages,
        reused_tokens=forecast.reused_tokens,
        total_messages=forecast.total_messages,
        total_tokens=forecast.total_tokens,
        divergence_index=forecast.divergence_index,
        divergence_reason=_DIVERGENCE_REASONS[forecast.divergence_reason],
    )


def breakdown_to_proto(breakdown: TokenBreakdown) -> pb.TokenBreakdown:
    return pb.TokenBreakdown(
        system_tokens=breakdown.system_tokens,
        tools_tokens=breakdown.tools_tokens,
        message_tokens=breakdown.message_tokens,
        total_tokens=breakdown.total_tokens,
        tokenizer=breakdown.tokenizer,
        observed_input_ratio=breakdown.calibration.ratio,
        calibration_requests=breakdown.calibration.requests,
    )


def series_to_proto(series: SeriesState) -> pb.SeriesState:
    proto = pb.SeriesState(replace_generation=series.replace_generation)
    if series.last_request_generation is not None:
        proto.last_request_generation = series.last_request_generation
    if series.last_header is not None:
        proto.last_header.CopyFrom(header_log_to_proto(series.last_header))
    if series.last_context is not None:
        proto.last_context.CopyFrom(context_log_to_proto(series.last_context))
    return proto


def derived_request_to_proto(
    view: app.DerivedRequestView, *, with_messages: bool = True
) -> pb.DerivedRequest:
    proto = pb.DerivedRequest()
    _fill_derived_request(proto, view, with_messages=with_messages)
    return proto


def _fill_derived_request(
    proto: pb.DerivedRequest,
    view: app.DerivedRequestView,
    *,
    with_messages: bool = True,
) -> None:
    """The derived request, written into ``proto`` in place (its tools copied in once);
    ``with_messages=False`` leaves out the stored frames, the rendered body and the tools for
    ``SplitAttemptEncoder``, which splices them after the head (a body or a tool set of
    megabytes is then never copied into a message; telemetry's summary reads none of them)."""
    spliced = not with_messages and isinstance(view.messages, app.EncodedMessages)
    proto.wire_format = wire_format_to_proto(view.wire_format)
    proto.body_json = "" if spliced else view.body_json
    if with_messages:
        _add_tools(proto.tools, view.tools)
    proto.view = _REQUEST_VIEWS_OUT[view.view]
    proto.first_message_index = view.first_message_index
    proto.total_messages = view.total_messages
    proto.digest = view.digest
    proto.content = _REQUEST_CONTENTS_OUT[view.content]
    proto.replaced_body_items = view.replaced_body_items
    if view.render_error is not None:
        error = view.render_error
        proto.render_error.CopyFrom(
            pb.RenderError(
                reason=error.reason, field=error.metadata.get("field", ""), message=error.message
            )
        )
    proto.omitted.extend(pb.OmittedBlock(field=o.field, why=o.why) for o in view.omitted)
    if isinstance(view.messages, app.EncodedMessages):
        if with_messages:
            proto.MergeFromString(view.messages.frames)
    else:
        proto.messages.extend(codec.to_proto(message) for message in view.messages)


def varint(value: int) -> bytes:
    """``value`` as a protobuf base-128 varint (a tag or a length of the bytes spliced here
    and in a streamed response's chunks)."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_BODY_JSON_FIELD = pb.DerivedRequest.DESCRIPTOR.fields_by_name["body_json"].number
_PROMPT_TEXT_FIELD = pb.EffectivePrompt.DESCRIPTOR.fields_by_name["text"].number


@dataclass(frozen=True, slots=True)
class SplitAttemptEncoder:
    """Encodes an Admit or Reconcile response as its head — every field but what
    ``app.Spliced`` holds — followed by those, each as its own occurrence of its field
    (protobuf parsers merge them): the stored frames are copied once, never re-encoded, and a
    tool set is encoded once per set. The idempotency record keeps only the head
    (app/replay.py)."""

    build: Callable[..., api.AdmitResponse | api.ReconcileResponse]
    request_field: int
    prompt_field: int

    def head(self, result: app.AttemptResult) -> bytes:
        """The response's fields but the derived request's tools, messages and body, and the
        effective prompt's text when it is the admission's: what the idempotency record keeps
        (the admission's prompt and tools are stored once, by digest)."""
        response = self.build(result, with_messages=False)
        if result.prompt_is_admitted:
            response.effective_prompt.text = ""
        return _encode(response)

    def splice(self, head: bytes, parts: app.Spliced) -> bytes:
        """``head`` followed by ``parts`` (in consecutive occurrences), in one join: the frames
        are copied once, into the response (a first answer or a replay). The tools are encoded
        once per tool set (``encoded_tools``): a harness sends the same set every step, and
        encoding a 12 MiB set with the head held the worker's GIL ~20 ms a step."""
        return b"".join(
            (
                head,
                *self._prompt(parts.prompt),
                *self._tools(parts.tools),
                *self._body(parts.body, parts.frames),
            )
        )

    def __call__(self, result: app.AttemptResult) -> bytes:
        return self.splice(self.head(result), app.Spliced.of(result))

    def _prompt(self, text: str) -> tuple[bytes, ...]:
        if not text:
            return ()
        return _field(self.prompt_field, *_field(_PROMPT_TEXT_FIELD, text.encode()))

    def _tools(self, tools: Sequence[Tool]) -> tuple[bytes, ...]:
        encoded = encoded_tools(tools)
        return _field(self.request_field, encoded) if encoded else ()

    def _body(self, body: bytes, frames: Sequence[bytes]) -> tuple[bytes, ...]:
        """The ``request`` field holding the rendered body (its UTF-8 JSON) as its
        ``body_json`` field, then the frames (nothing when both are empty)."""
        inner = (*(_field(_BODY_JSON_FIELD, body) if body else ()), *frames)
        return _field(self.request_field, *inner) if any(inner) else ()


def _field(number: int, *payload: bytes) -> tuple[bytes, ...]:
    """A length-delimited field (a message or bytes) of ``payload``'s parts: its tag, its
    length, then the parts, uncopied."""
    return (varint(number << 3 | 2), varint(sum(map(len, payload))), *payload)


def encoded_tools(tools: Sequence[Tool]) -> bytes:
    """``tools`` as a ``DerivedRequest``'s ``tools`` field encodes them, remembered by the set
    (``ENCODED_TOOLS``)."""
    if not tools:
        return b""
    key = tool_set_key(tools)
    return ENCODED_TOOLS.get(
        key, sum(map(len, key)), lambda: _encode(pb.DerivedRequest(tools=_tools(tools)))
    )


# The encoded tool sets of the last responses, within 4 MiB of tools, and the last larger one
# (domain/memo.py).
ENCODED_TOOLS: BoundedMemo[tuple[str, ...], bytes] = BoundedMemo(4 * 1024 * 1024)


def usage_to_proto(usage: app.Usage) -> pb.Usage:
    return pb.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )


def ledger_entry_to_proto(entry: app.LedgerEntry) -> pb.LedgerEntry:
    proto = pb.LedgerEntry(
        request_index=entry.request_index,
        admission_id=entry.admission_id,
        attempt=entry.attempt,
        forecast=forecast_to_proto(entry.forecast),
        drift_tokens=entry.drift_tokens,
        observed_input_ratio=entry.observed_input_ratio,
    )
    if entry.observed is not None:
        proto.observed.CopyFrom(usage_to_proto(entry.observed))
    return proto


def system_node_to_proto(node: app.SystemNodeView | PromptNode) -> pb.SystemPromptNode:
    """A surviving system node (Inspect) or the node an effective prompt stands on
    (ListTrajectory, where a synthetic node has no time)."""
    return pb.SystemPromptNode(
        seq=node.seq,
        time=_optional_time(node.time),
        turn=node.turn,
        step=node.step,
        text=node.text,
        update=node.update,
    )


def event_to_proto(view: app.EventView) -> pb.Event:
    event: Event = view.event
    proto = pb.Event(
        seq=event.seq,
        commit_time=timestamp(view.commit_time),
        kind=_EVENT_KINDS[event.kind],
        turn=event.turn,
        step=event.step,
        source_seqs=event.source_seqs,
        admission_id=event.admission_id,
    )
    if isinstance(event.op, Append):
        proto.surface_op.append.SetInParent()
    elif isinstance(event.op, Replace):
        proto.surface_op.replace.start_seq = event.op.start_seq
        proto.surface_op.replace.end_seq = event.op.end_seq
    if event.message is not None:
        proto.message.CopyFrom(codec.to_proto(event.message))
    elif event.header is not None:
        proto.header.CopyFrom(header_log_to_proto(event.header))
    elif event.context is not None:
        proto.context.CopyFrom(request_context_to_proto(event.context.context))
    return proto


def _attempt_fields(
    response: api.AdmitResponse | api.ReconcileResponse,
    result: app.AttemptResult,
    *,
    with_messages: bool = True,
    with_tools: bool = True,
) -> None:
    """The fields Admit and Reconcile responses share; without ``with_messages``, no derived
    request's messages, body and tools (the head); without ``with_tools``, no header's tools
    either (what telemetry reads: a tool set can be megabytes)."""
    response.admission_id = result.admission_id
    response.revision = result.revision
    response.commits.extend(commit_to_proto(commit) for commit in result.commits)
    if result.header is not None:
        _fill_header_log(response.header, result.header, with_tools=with_tools)
    if result.context is not None:
        response.context.CopyFrom(context_log_to_proto(result.context))
    response.starts_series = result.starts_series
    _fill_derived_request(response.request, result.request, with_messages=with_messages)
    response.effective_prompt.CopyFrom(effective_prompt_to_proto(result.effective_prompt))
    response.forecast.CopyFrom(forecast_to_proto(result.forecast))
    route = result.route
    response.system_prompt_update = _system_prompt_update(route.in_history)
    response.capability_source = _CAPABILITY_SOURCES[route.capability_source]
    response.tool_update = (
        pb.TOOL_UPDATE_IN_HISTORY if route.tool_update else pb.TOOL_UPDATE_REPLACE
    )


# ---- responses: one per RPC ---------------------------------------------------------------

_REQUEST_FIELD_ADMIT = api.AdmitResponse.DESCRIPTOR.fields_by_name["request"].number
_REQUEST_FIELD_RECONCILE = api.ReconcileResponse.DESCRIPTOR.fields_by_name["request"].number
_PROMPT_FIELD_ADMIT = api.AdmitResponse.DESCRIPTOR.fields_by_name["effective_prompt"].number
_PROMPT_FIELD_RECONCILE = api.ReconcileResponse.DESCRIPTOR.fields_by_name["effective_prompt"].number


def _encode(response: ProtoMessage) -> bytes:
    return response.SerializeToString(deterministic=True)


def create_session_response(info: app.SessionInfo) -> api.CreateSessionResponse:
    return api.CreateSessionResponse(session=session_to_proto(info))


def encode_create_session(info: app.SessionInfo) -> bytes:
    return _encode(create_session_response(info))


def get_session_response(info: app.SessionInfo) -> api.GetSessionResponse:
    return api.GetSessionResponse(session=session_to_proto(info))


def list_sessions_response(page: app.Page[app.SessionInfo]) -> api.ListSessionsResponse:
    return api.ListSessionsResponse(
        sessions=[session_to_proto(info) for info in page.items],
        next_page_token=page.next_page_token,
    )


def encode_delete_session(_: None) -> bytes:
    return _encode(api.DeleteSessionResponse())


def admit_response(
    result: app.AttemptResult, *, with_messages: bool = True, with_tools: bool = True
) -> api.AdmitResponse:
    response = api.AdmitResponse(user_seqs=result.user_seqs)
    _attempt_fields(response, result, with_messages=with_messages, with_tools=with_tools)
    if result.recorded is not None:
        response.recorded.CopyFrom(record_response(result.recorded))
    return response


encode_admit = SplitAttemptEncoder(admit_response, _REQUEST_FIELD_ADMIT, _PROMPT_FIELD_ADMIT)


def reconcile_response(
    result: app.AttemptResult, *, with_messages: bool = True, with_tools: bool = True
) -> api.ReconcileResponse:
    response = api.ReconcileResponse(attempt=result.attempt)
    _attempt_fields(response, result, with_messages=with_messages, with_tools=with_tools)
    return response


encode_reconcile = SplitAttemptEncoder(
    reconcile_response, _REQUEST_FIELD_RECONCILE, _PROMPT_FIELD_RECONCILE
)


def record_response(result: app.RecordResult) -> api.RecordResponse:
    response = api.RecordResponse(
        revision=result.revision, tool_result_seqs=result.tool_result_seqs
    )
    if result.assistant_seq is not None:
        response.assistant_seq = result.assistant_seq
    return response


def encode_record(result: app.RecordResult) -> bytes:
    return _encode(record_response(result))


def plan_compaction_response(result: app.PlanResult) -> api.PlanCompactionResponse:
    plan = result.plan
    return api.PlanCompactionResponse(
        plan_token=result.plan_token,
        start_seq=plan.start_seq,
        end_seq=plan.end_seq,
        shadowed_seqs=plan.shadowed_seqs,
        shadowed_tokens=plan.shadowed_tokens,
        summarization_input=[codec.to_proto(message) for message in result.summarization_input],
        tools=_tools(result.tools),
        revision=result.revision,
    )


def compact_response(result: app.CompactResult) -> api.CompactResponse:
    return api.CompactResponse(
        revision=result.revision,
        summary_seq=result.summary_seq,
        shadowed_seqs=result.shadowed_seqs,
        commits=[commit_to_proto(commit) for commit in result.commits],
        effective_prompt=effective_prompt_to_proto(result.effective_prompt),
    )


def encode_compact(result: app.CompactResult) -> bytes:
    return _encode(compact_response(result))


def _summary(build: Callable[..., ProtoMessage]) -> Callable[[Any], ProtoMessage]:
    return functools.partial(build, with_messages=False, with_tools=False)


@dataclass(frozen=True, slots=True)
class WriteResponse:
    """How a mutating RPC's response is made: its ``message`` type; ``encode``, the bytes the
    use case stores for request_id and the edge sends as they are; ``summary``, the response
    built from the typed result without the derived request's messages and the header's tools
    (what telemetry reads)."""

    message: type[ProtoMessage]
    encode: Callable[[Any], bytes]
    summary: Callable[[Any], ProtoMessage]


WRITES: Mapping[str, WriteResponse] = {
    "CreateSession": WriteResponse(
        api.CreateSessionResponse, encode_create_session, create_session_response
    ),
    "DeleteSession": WriteResponse(
        api.DeleteSessionResponse, encode_delete_session, lambda _: api.DeleteSessionResponse()
    ),
    "Admit": WriteResponse(api.AdmitResponse, encode_admit, _summary(admit_response)),
    "Reconcile": WriteResponse(
        api.ReconcileResponse, encode_reconcile, _summary(reconcile_response)
    ),
    "Record": WriteResponse(api.RecordResponse, encode_record, record_response),
    "Compact": WriteResponse(api.CompactResponse, encode_compact, compact_response),
}
# The use cases' encoders (``Deps.compose(encoders=...)``), by method.
ENCODERS: Mapping[str, Callable[[Any], bytes]] = {
    method: write.encode for method, write in WRITES.items()
}


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A mutating RPC's response as the bytes gRPC sends unchanged (the servicer registers these
    RPCs with a pass-through serializer): no parse, no second encoding. ``result`` is the use
    case's typed result (None for a replayed response)."""

    method: str
    data: bytes = field(repr=False)
    result: Any = field(default=None, repr=False)
    # data's SHA-256 being hashed, when the use case began it (``Reply.sha256``)
    sha256: asyncio.Task[bytes] | None = field(default=None, repr=False)

    def summary(self) -> ProtoMessage:
        """The response without the derived request's messages and body, built from the typed
        result; a replayed response is parsed whole."""
        if self.result is None:
            return self.message()
        return WRITES[self.method].summary(self.result)

    def message(self) -> ProtoMessage:
        """The whole response, parsed from the bytes sent."""
        return WRITES[self.method].message.FromString(self.data)


def encoded_response(method: str, reply: Reply[Any]) -> EncodedResponse:
    """``reply``'s response bytes: those the use case encoded for its request_id (or replayed),
    else its result encoded here (no request_id, or ``validate_only``: after the commit, with
    the session's lock released)."""
    if reply.encoded is None:
        return EncodedResponse(method, WRITES[method].encode(reply.result), reply.result)
    return EncodedResponse(method, reply.encoded, reply.result, reply.sha256)


def inspect_response(result: app.InspectResult) -> api.InspectResponse:
    return api.InspectResponse(
        session=session_to_proto(result.session),
        effective_prompt=effective_prompt_to_proto(result.effective_prompt),
        system_nodes=[system_node_to_proto(node) for node in result.system_nodes],
        request=derived_request_to_proto(result.request),
        breakdown=breakdown_to_proto(result.breakdown),
        series=series_to_proto(result.series),
        revision=result.session.revision,
        ledger=[ledger_entry_to_proto(entry) for entry in result.ledger],
    )


def list_events_response(page: app.Page[app.EventView]) -> api.ListEventsResponse:
    return api.ListEventsResponse(
        events=[event_to_proto(view) for view in page.items],
        next_page_token=page.next_page_token,
    )


# ---- ListTrajectory -------------------------------------------------------------------------

_CHANGE_KINDS: Mapping[ChangeKind, tpb.PromptChangeKind.ValueType] = {
    ChangeKind.INITIAL: tpb.PROMPT_CHANGE_KIND_INITIAL,
    ChangeKind.SYSTEM: tpb.PROMPT_CHANGE_KIND_SYSTEM,
    ChangeKind.TOOLS: tpb.PROMPT_CHANGE_KIND_TOOLS,
    ChangeKind.SYSTEM_AND_TOOLS: tpb.PROMPT_CHANGE_KIND_SYSTEM_AND_TOOLS,
}


def prompt_snapshot_to_proto(prompt: PromptSnapshot, page: TrajectoryPage) -> tpb.PromptSnapshot:
    """By reference: the text and the tools are named by version, carried once by the page."""
    return tpb.PromptSnapshot(
        provider=prompt.provider,
        model=prompt.model,
        config=dict(prompt.config),
        system_prompt_id=page.prompt_id(prompt.system),
        tool_set_id=page.tool_set_id(prompt.tools),
    )


def prompt_change_to_proto(change: PromptChange, page: TrajectoryPage) -> tpb.PromptChange:
    proto = tpb.PromptChange(
        seq=change.seq, time=_optional_time(change.time), kind=_CHANGE_KINDS[change.kind]
    )
    if change.previous is not None:
        proto.previous.CopyFrom(prompt_snapshot_to_proto(change.previous, page))
    return proto


def header_fact_to_proto(fact: HeaderFact, page: TrajectoryPage) -> tpb.HeaderFact:
    proto = tpb.HeaderFact(
        seq=fact.seq,
        time=_optional_time(fact.time),
        synthetic=fact.synthetic,
        reason=_HEADER_REASONS[fact.reason]
        if fact.reason is not None
        else pb.HEADER_REASON_UNSPECIFIED,
        starts_series=fact.starts_series,
        prompt=prompt_snapshot_to_proto(fact.prompt, page),
    )
    if fact.change is not None:
        proto.change.CopyFrom(prompt_change_to_proto(fact.change, page))
    return proto


def trajectory_entry_to_proto(entry: TrajectoryEntry, page: TrajectoryPage) -> tpb.TrajectoryEntry:
    ledger, point = entry.ledger, entry.point
    proto = tpb.TrajectoryEntry(
        request_index=ledger.request_index,
        admission_id=ledger.admission_id,
        attempt=ledger.attempt,
        log_seq=entry.log_seq,
        headers=[header_fact_to_proto(fact, page) for fact in point.headers],
        starts_series=point.starts_series,
        forecast=forecast_to_proto(ledger.forecast),
    )
    if point.header is not None:
        proto.header.CopyFrom(header_fact_to_proto(point.header, page))
    if point.change is not None:
        proto.change.CopyFrom(prompt_change_to_proto(point.change, page))
    if point.effective is not None:
        node = system_node_to_proto(point.effective)
        node.ClearField("text")
        proto.effective_prompt.CopyFrom(node)
        proto.effective_prompt_id = page.prompt_id(point.effective.text)
    if point.context is not None:
        proto.context.CopyFrom(request_context_to_proto(point.context))
    if ledger.observed is not None:
        proto.observed.CopyFrom(usage_to_proto(ledger.observed))
    return proto


def list_trajectory_response(page: TrajectoryPage) -> api.ListTrajectoryResponse:
    return api.ListTrajectoryResponse(
        entries=[trajectory_entry_to_proto(entry, page) for entry in page.items],
        next_page_token=page.next_page_token,
        system_prompts=[tpb.PromptVersion(id=k, text=v) for k, v in page.prompts.items()],
        tool_sets=[tpb.ToolSetVersion(id=k, tools=_tools(v)) for k, v in page.tool_sets.items()],
    )
