"""Pure conversion between protos and commands/results, without a server."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from admission_service.api import convert
from admission_service.app import commands as app
from admission_service.domain.accounting import CacheForecast, DivergenceReason
from admission_service.domain.admission import AppliedCommit
from admission_service.domain.catalog import Capability
from admission_service.domain.errors import InvalidArgument, InvalidModelInfo
from admission_service.domain.events import Append, Event, EventKind, Replace
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    Role,
    Text,
    Tool,
    ToolCall,
    ToolResult,
)
from admission_service.domain.projection import CommitOp, SystemCommit
from admission_service.domain.series import (
    CapabilitySource,
    ContextLog,
    HeaderLog,
    HeaderReason,
    RequestContext,
    RequestHeader,
    Route,
)
from admission_service.domain.surface import EffectivePrompt
from admission_service.domain.wire import WireFormat
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import admit_request

NOW = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
ODD_TEXT = "nul\x00 astral \U0001f600 end"


def text_block(text: str) -> pb.ContentBlock:
    return pb.ContentBlock(text=pb.TextBlock(text=text))


def test_an_admit_request_becomes_a_command() -> None:
    request = admit_request(
        "s1",
        ODD_TEXT,
        "hello",
        turn=3,
        step=4,
        tools=[pb.Tool(name="read", description="d", parameters_json='{"type":"object"}')],
        starts_request_series=True,
        resume=True,
        wire_format=pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
        validate_only=True,
        expected_revision=0,
    )
    request.users[0].content.append(pb.ContentBlock(image=pb.ImageBlock(uri="u", media_type="m")))
    request.route.system_prompt_update = pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY
    request.route.tool_update = pb.TOOL_UPDATE_REPLACE

    command = convert.admit_command(request)

    assert command == app.AdmitCommand(
        session_id="s1",
        turn=3,
        step=4,
        rendered_prompt=ODD_TEXT,
        tools=(Tool("read", "d", '{"type":"object"}'),),
        route=app.RouteRequest(
            "deepseek", "deepseek-flash", 128_000, Capability.IN_HISTORY, Capability.REPLACE
        ),
        users=(Message(Role.USER, (Text("hello"), Image("u", "m"))),),
        starts_request_series=True,
        resume=True,
        wire_format=WireFormat.ANTHROPIC_MESSAGES,
        validate_only=True,
        expected_revision=0,
    )


def test_absent_optionals_stay_absent() -> None:
    command = convert.admit_command(admit_request("s1", ""))
    assert command.expected_revision is None
    assert command.wire_format is WireFormat.NEUTRAL
    assert command.route.system_prompt_update is Capability.UNSPECIFIED
    assert command.route.tool_update is Capability.UNSPECIFIED


def test_an_unspecified_user_role_is_read_as_user() -> None:
    request = admit_request("s1", "p", "hi")
    request.users[0].role = pb.MESSAGE_ROLE_UNSPECIFIED
    assert convert.admit_command(request).users[0].role is Role.USER


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("system_prompt_update", 3, "route.system_prompt_update"),
        ("tool_update", -1, "route.tool_update"),
    ],
)
def test_unknown_capabilities_are_invalid_model_info(field: str, value: int, path: str) -> None:
    request = admit_request("s1", "p")
    setattr(request.route, field, value)
    with pytest.raises(InvalidModelInfo) as caught:
        convert.admit_command(request)
    assert caught.value.field == path
    assert caught.value.reason == "INVALID_MODEL_INFO"


def test_an_unknown_wire_format_is_invalid() -> None:
    with pytest.raises(InvalidArgument) as caught:
        convert.wire_format_from_proto(99)
    assert (caught.value.field, caught.value.reason) == ("wire_format", "INVALID_FIELD")


def test_the_record_command_keeps_blocks_results_and_usage() -> None:
    request = api.RecordRequest(
        session_id="s1",
        admission_id="a1",
        assistant=pb.Message(
            role=pb.MESSAGE_ROLE_ASSISTANT,
            content=[
                pb.ContentBlock(reasoning=pb.ReasoningBlock(text="think")),
                text_block("say"),
                pb.ContentBlock(
                    tool_call=pb.ToolCallBlock(call_id="c1", name="read", arguments_json="{}")
                ),
            ],
        ),
        tool_results=[pb.ToolResult(call_id="c1", content=[text_block("r")], is_error=True)],
        usage=pb.Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4),
    )
    assert convert.record_command(request) == app.RecordCommand(
        session_id="s1",
        admission_id="a1",
        assistant=Message(
            Role.ASSISTANT, (Reasoning("think"), Text("say"), ToolCall("c1", "read", "{}"))
        ),
        tool_results=(ToolResult("c1", (Text("r"),), True),),
        usage=app.Usage(1, 2, 3, 4),
    )


def test_a_record_without_assistant_or_usage() -> None:
    command = convert.record_command(api.RecordRequest(session_id="s", admission_id="a"))
    assert (command.assistant, command.usage, command.tool_results) == (None, None, ())


@pytest.mark.parametrize(
    ("request_", "path"),
    [
        (
            api.RecordRequest(
                assistant=pb.Message(
                    role=pb.MESSAGE_ROLE_ASSISTANT, content=[text_block("x"), pb.ContentBlock()]
                )
            ),
            "assistant.content[1]",
        ),
        (
            api.RecordRequest(
                assistant=pb.Message(
                    content=[pb.ContentBlock(image=pb.ImageBlock(uri="u"))],
                )
            ),
            "assistant.content[0]",
        ),
        (api.RecordRequest(assistant=pb.Message(role=pb.MESSAGE_ROLE_USER)), "assistant.role"),
        (api.RecordRequest(assistant=pb.Message(role=17)), "assistant.role"),  # type: ignore[arg-type]
        (
            api.RecordRequest(
                tool_results=[
                    pb.ToolResult(call_id="c"),
                    pb.ToolResult(
                        call_id="c",
                        content=[
                            pb.ContentBlock(tool_call=pb.ToolCallBlock(call_id="x", name="y"))
                        ],
                    ),
                ]
            ),
            "tool_results[1].content[0]",
        ),
    ],
)
def test_malformed_records_name_the_field(request_: api.RecordRequest, path: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        convert.record_command(request_)
    assert caught.value.field == path
    assert caught.value.reason == "INVALID_FIELD"


def test_plan_compaction_selection() -> None:
    by_tokens = convert.plan_compaction_command(
        api.PlanCompactionRequest(session_id="s", retain_tokens=0)
    )
    assert (by_tokens.retain_tokens, by_tokens.seq_range) == (0, None)
    by_range = convert.plan_compaction_command(
        api.PlanCompactionRequest(session_id="s", range=pb.SeqRange(start_seq=1, end_seq=4))
    )
    assert (by_range.retain_tokens, by_range.seq_range) == (None, (1, 4))
    with pytest.raises(InvalidArgument) as caught:
        convert.plan_compaction_command(api.PlanCompactionRequest(session_id="s"))
    assert caught.value.field == "selection"


def test_the_request_digest_covers_the_whole_request() -> None:
    one = admit_request("s1", "p", "hi", request_id="r1")
    # the same request, as the server receives it again: parsed from the client's bytes
    again = type(one).FromString(one.SerializeToString())
    assert convert.request_digest(again) == convert.request_digest(one)
    two = admit_request("s1", "p", "hi!", request_id="r1")
    assert convert.request_digest(one) != convert.request_digest(two)
    deep = type(one).FromString(one.SerializeToString())
    deep.users[0].content[0].text.text += " "
    assert convert.request_digest(deep) != convert.request_digest(one)
    assert convert.idempotency_of("", one) is None
    idempotency = convert.idempotency_of("r1", one)
    assert idempotency == app.Idempotency("r1", convert.request_digest(one))


def _attempt_result(**overrides: object) -> app.AttemptResult:
    values: dict[str, object] = {
        "admission_id": "a1",
        "attempt": 2,
        "revision": 7,
        "commits": (
            AppliedCommit(5, SystemCommit(CommitOp.REPLACE, "", replaced_seq=3)),
            AppliedCommit(6, SystemCommit(CommitOp.APPEND, ODD_TEXT, update=True)),
        ),
        "user_seqs": (7, 8),
        "header": HeaderLog(
            9, HeaderReason.CHANGE, True, RequestHeader("p", "m", (Tool("t", "", ""),))
        ),
        "context": ContextLog(10, RequestContext("p", "m", 1000, True)),
        "starts_series": True,
        "request": app.DerivedRequestView(
            WireFormat.OPENAI_CHAT,
            (
                Message(Role.SYSTEM, (Text("sys"),)),
                Message(Role.TOOL, (ToolResult("c", (Text("r"), Image("u", "")), False),)),
            ),
            b'{"messages":[]}',
            (Tool("t", "", ""),),
        ),
        "effective_prompt": EffectivePrompt(ODD_TEXT, 6, "in_history"),
        "forecast": CacheForecast(1, 2, 3, 4, 1, DivergenceReason.SYSTEM_CHANGED),
        "route": Route("p", "m", 1000, True, False, CapabilitySource.CATALOG),
    }
    values.update(overrides)
    return app.AttemptResult(**values)  # type: ignore[arg-type]


def test_the_admit_response_carries_every_part() -> None:
    response = api.AdmitResponse.FromString(convert.encode_admit(_attempt_result()))
    assert response.admission_id == "a1"
    assert response.revision == 7
    assert [(c.operation, c.seq, c.text, c.replaced_seq) for c in response.commits] == [
        (pb.COMMIT_OPERATION_REPLACE, 5, "", 3),
        (pb.COMMIT_OPERATION_APPEND, 6, ODD_TEXT, 0),
    ]
    assert list(response.user_seqs) == [7, 8]
    assert response.header.reason == pb.HEADER_REASON_CHANGE
    assert response.header.starts_series
    assert [t.name for t in response.header.header.tools] == ["t"]
    assert response.context.context.system_prompt_update == pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY
    assert response.request.wire_format == pb.WIRE_FORMAT_OPENAI_CHAT
    tool_message = response.request.messages[1]
    assert tool_message.role == pb.MESSAGE_ROLE_TOOL
    assert tool_message.content[0].tool_result.content[1].image.uri == "u"
    assert response.effective_prompt.location == pb.PROMPT_LOCATION_IN_HISTORY
    assert response.effective_prompt.text == ODD_TEXT
    assert response.forecast.divergence_reason == pb.DIVERGENCE_REASON_SYSTEM_CHANGED
    assert response.system_prompt_update == pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY
    assert response.capability_source == pb.CAPABILITY_SOURCE_CATALOG
    assert response.tool_update == pb.TOOL_UPDATE_REPLACE


def test_absent_header_and_context_stay_absent() -> None:
    response = convert.admit_response(_attempt_result(header=None, context=None))
    assert not response.HasField("header")
    assert not response.HasField("context")


def test_the_reconcile_response_has_the_attempt_number() -> None:
    response = api.ReconcileResponse.FromString(convert.encode_reconcile(_attempt_result()))
    assert response.attempt == 2
    assert response.admission_id == "a1"


def test_encoding_is_deterministic() -> None:
    """The stored response is the deterministic encoding (map entries sorted by key), so a
    replay's bytes are the same in every process: given out of order, a plain encoding would
    keep the map's insertion order."""
    config = (("top_p", "1"), ("temperature", "0"), ("max_tokens", "5"))
    encoded = set()
    for order in (config, config[::-1]):
        header = HeaderLog(9, HeaderReason.CHANGE, True, RequestHeader("p", "m", (), order))
        encoded.add(convert.encode_admit(_attempt_result(header=header)))
    assert len(encoded) == 1
    parsed = api.AdmitResponse.FromString(encoded.pop())
    assert dict(parsed.header.header.config) == dict(config)
    # Without tools (which follow the head as their own occurrence), the bytes are protobuf's
    # deterministic encoding itself.
    result = _attempt_result(header=header)
    result = replace(result, request=replace(result.request, tools=()))
    alone = convert.encode_admit(result)
    assert api.AdmitResponse.FromString(alone).SerializeToString(deterministic=True) == alone


def test_the_tools_follow_the_head_encoded_once_per_tool_set() -> None:
    """The derived request's tools are the ``request`` field's own occurrence after the head,
    the same bytes each time: a parser merges it with the head's (the tools in order)."""
    tools = (Tool("read", "Reads.", '{"type":"object"}'), Tool("list", "", ""))
    result = _attempt_result()
    result = replace(result, request=replace(result.request, tools=tools))
    encoded = convert.encode_admit(result)
    parsed = api.AdmitResponse.FromString(encoded)
    assert [(t.name, t.description, t.parameters_json) for t in parsed.request.tools] == [
        ("read", "Reads.", '{"type":"object"}'),
        ("list", "", ""),
    ]
    assert parsed == convert.admit_response(result)
    assert convert.encoded_tools(tools) is convert.encoded_tools(tuple(tools))
    assert encoded.endswith(convert.encoded_tools(tools))


def test_no_prompt_has_seq_zero() -> None:
    proto = convert.effective_prompt_to_proto(EffectivePrompt("", None, "none"))
    assert (proto.text, proto.seq, proto.location) == ("", 0, pb.PROMPT_LOCATION_NONE)


def test_events_keep_their_operation_and_body() -> None:
    replace = Event(
        4,
        EventKind.COMPACTION_SUMMARY,
        op=Replace(1, 3),
        source_seqs=(1, 2, 3),
        message=Message(Role.USER, (Text("sum"),)),
    )
    header = Event(
        5,
        EventKind.REQUEST_HEADER,
        header=HeaderLog(5, HeaderReason.INITIAL, False, RequestHeader("p", "m", ())),
        admission_id="a",
        turn=1,
        step=2,
    )
    context = Event(
        6, EventKind.REQUEST_CONTEXT, context=ContextLog(6, RequestContext("p", "m", 0, False))
    )
    append = Event(7, EventKind.SYSTEM_MESSAGE, op=Append(), message=Message(Role.SYSTEM, ()))
    page = app.Page(tuple(app.EventView(e, NOW) for e in (replace, header, context, append)), "t")

    response = convert.list_events_response(page)

    first, second, third, fourth = response.events
    assert first.surface_op.replace == pb.SurfaceOp.Replace(start_seq=1, end_seq=3)
    assert list(first.source_seqs) == [1, 2, 3]
    assert first.kind == pb.EVENT_KIND_COMPACTION_SUMMARY
    assert first.commit_time.ToDatetime(tzinfo=UTC) == NOW
    assert second.WhichOneof("body") == "header" and not second.HasField("surface_op")
    assert (second.admission_id, second.turn, second.step) == ("a", 1, 2)
    assert third.context.system_prompt_update == pb.SYSTEM_PROMPT_UPDATE_REPLACE
    assert fourth.surface_op.WhichOneof("op") == "append"
    assert fourth.message.role == pb.MESSAGE_ROLE_SYSTEM and not fourth.message.content
    assert response.next_page_token == "t"


def test_a_held_prefix_carries_the_held_body_length() -> None:
    request = api.InspectRequest(
        session_id="s",
        view=pb.REQUEST_VIEW_DELTA,
        held_prefix=pb.HeldPrefix(message_count=3, digest=b"d", body_items=2),
    )
    held = convert.selection_from_proto(request).held
    assert held is not None and (held.message_count, held.body_items) == (3, 2)
    request.held_prefix.body_items = -1
    with pytest.raises(InvalidArgument) as refused:
        convert.selection_from_proto(request)
    assert refused.value.metadata["field"] == "held_prefix.body_items"


def test_a_derived_request_says_how_many_held_body_items_it_replaces() -> None:
    view = app.DerivedRequestView(
        WireFormat.ANTHROPIC_MESSAGES,
        (),
        b'{"messages":[]}',
        (),
        replaced_body_items=2,
    )
    assert convert.derived_request_to_proto(view).replaced_body_items == 2
