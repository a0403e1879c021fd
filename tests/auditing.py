"""The audit of a session over the API (ISSUE: guarantees and reliability tests share it).

``audit`` re-derives the surface from the event log alone with the domain's ``SessionLog``
(which refuses gaps, invalid replaces and replaces that do not cite all they shadow) and checks
it equals what the server serves. The proto -> domain conversion here is written independently
of the server's converter, so the audit checks that too.
"""

from __future__ import annotations

from admission_service.domain.events import Append, Event, EventKind, Replace
from admission_service.domain.messages import (
    Block,
    Image,
    Message,
    Reasoning,
    ReasoningItem,
    RedactedReasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
)
from admission_service.domain.surface import SessionLog
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb


async def snapshot(stub: api_grpc.AdmissionServiceAsyncStub, session_id: str) -> tuple[object, ...]:
    """Everything a committed change would move: revision, the whole log, the derived request."""
    session = (await stub.GetSession(api.GetSessionRequest(session_id=session_id))).session
    events = await all_events(stub, session_id)
    inspected = await stub.Inspect(api.InspectRequest(session_id=session_id))
    return (
        session.revision,
        session.event_count,
        tuple(e.SerializeToString(deterministic=True) for e in events),
        inspected.request.SerializeToString(deterministic=True),
        len(inspected.ledger),
    )


async def all_events(stub: api_grpc.AdmissionServiceAsyncStub, session_id: str) -> list[pb.Event]:
    events: list[pb.Event] = []
    token = ""
    while True:
        page = await stub.ListEvents(
            api.ListEventsRequest(session_id=session_id, page_size=1000, page_token=token)
        )
        events += page.events
        token = page.next_page_token
        if not token:
            return events


async def audit(stub: api_grpc.AdmissionServiceAsyncStub, session_id: str) -> SessionLog:
    """Re-derive the surface from the log alone: seqs dense, every replace valid and citing
    all it shadows (``SessionLog`` refuses anything else), and equal to the served request."""
    events = await all_events(stub, session_id)
    assert [e.seq for e in events] == list(range(len(events)))
    log = SessionLog(event_from_proto(e) for e in events)
    inspected = await stub.Inspect(api.InspectRequest(session_id=session_id))
    served = [message_from_proto(m) for m in inspected.request.messages]
    assert served == log.derived_messages()
    assert inspected.effective_prompt.text == log.effective_prompt().text
    return log


# ---- proto -> domain, written independently of the server's converter so the audit checks it


ROLES = {
    pb.MESSAGE_ROLE_SYSTEM: Role.SYSTEM,
    pb.MESSAGE_ROLE_USER: Role.USER,
    pb.MESSAGE_ROLE_ASSISTANT: Role.ASSISTANT,
    pb.MESSAGE_ROLE_TOOL: Role.TOOL,
}
KINDS = {
    pb.EVENT_KIND_SYSTEM_MESSAGE: EventKind.SYSTEM_MESSAGE,
    pb.EVENT_KIND_USER_MESSAGE: EventKind.USER_MESSAGE,
    pb.EVENT_KIND_ASSISTANT_MESSAGE: EventKind.ASSISTANT_MESSAGE,
    pb.EVENT_KIND_TOOL_RESULT: EventKind.TOOL_RESULT,
    pb.EVENT_KIND_COMPACTION_SUMMARY: EventKind.COMPACTION_SUMMARY,
    pb.EVENT_KIND_REQUEST_HEADER: EventKind.REQUEST_HEADER,
    pb.EVENT_KIND_REQUEST_CONTEXT: EventKind.REQUEST_CONTEXT,
}


def block_from_proto(block: pb.ContentBlock) -> Block:
    which = block.WhichOneof("block")
    if which == "text":
        return Text(block.text.text, block.text.phase)
    if which == "image":
        return Image(block.image.uri, block.image.media_type)
    if which == "reasoning":
        return Reasoning(block.reasoning.text, block.reasoning.signature)
    if which == "redacted_reasoning":
        return RedactedReasoning(block.redacted_reasoning.provider, block.redacted_reasoning.data)
    if which == "reasoning_item":
        item = block.reasoning_item
        return ReasoningItem(
            item.id, item.encrypted_content, tuple(item.summary), tuple(item.content)
        )
    if which == "tool_call":
        call = block.tool_call
        return ToolCall(call.call_id, call.name, call.arguments_json)
    result = block.tool_result
    inner = tuple(block_from_proto(b) for b in result.content)
    return ToolResult(result.call_id, inner, result.is_error)  # type: ignore[arg-type]


def message_from_proto(message: pb.Message) -> Message:
    return Message(ROLES[message.role], tuple(block_from_proto(b) for b in message.content))


def event_from_proto(event: pb.Event) -> Event:
    op: Append | Replace | None = None
    if event.surface_op.HasField("append"):
        op = Append()
    elif event.surface_op.HasField("replace"):
        op = Replace(event.surface_op.replace.start_seq, event.surface_op.replace.end_seq)
    body = event.WhichOneof("body")
    return Event(
        seq=event.seq,
        kind=KINDS[event.kind],
        turn=event.turn,
        step=event.step,
        op=op,
        source_seqs=tuple(event.source_seqs),
        message=message_from_proto(event.message) if body == "message" else None,
        admission_id=event.admission_id,
    )
