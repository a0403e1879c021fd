"""Helpers for the guarantee tests: a pausing phase hook, request builders, error details."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from admission_service.app.hooks import Phase
from admission_service.domain.events import Append, Event, EventKind, Replace
from admission_service.domain.messages import (
    Block,
    Image,
    Message,
    Reasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
)
from admission_service.domain.surface import SessionLog

from .support import (
    IN_HISTORY_ROUTE,
    REPLACE_ROUTE,
    admit_request,
    rich_error,
    user,
)

__all__ = ["admit_request", "user"]  # re-exported for the guarantee and reliability tests
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

# One source for requests and rich errors: the API tests' support module.
IN_HISTORY = IN_HISTORY_ROUTE
REPLACE = REPLACE_ROUTE


class PausingHooks:
    """Blocks the first call that reaches the armed (method, phase) until it is cancelled.

    ``reached`` is set when the handler arrives at the phase; ``unwound`` when the handler has
    left it (cancelled or released), so a test knows the transaction has rolled back.
    """

    def __init__(self) -> None:
        self.target: tuple[str, Phase] | None = None
        self.reached_phase = asyncio.Event()
        self.unwound = asyncio.Event()
        self.release = asyncio.Event()

    def arm(self, method: str, phase: Phase) -> None:
        self.target = (method, phase)
        self.reached_phase.clear()
        self.unwound.clear()
        self.release.clear()

    async def reached(self, method: str, phase: Phase) -> None:
        if self.target != (method, phase):
            return
        self.target = None
        self.reached_phase.set()
        try:
            await self.release.wait()
        finally:
            self.unwound.set()


def assistant(text: str, *calls: str) -> pb.Message:
    blocks = [pb.ContentBlock(text=pb.TextBlock(text=text))]
    blocks += [
        pb.ContentBlock(tool_call=pb.ToolCallBlock(call_id=c, name="read", arguments_json="{}"))
        for c in calls
    ]
    return pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=blocks)


def error_info(error: grpc.aio.AioRpcError) -> Any:
    """The error's one ErrorInfo (``rich_error`` asserts there is exactly one)."""
    rich = rich_error(error)
    assert rich.reason
    return rich.error_infos[0]


def violated_fields(error: grpc.aio.AioRpcError) -> list[str]:
    return rich_error(error).violated_fields


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
        return Text(block.text.text)
    if which == "image":
        return Image(block.image.uri, block.image.media_type)
    if which == "reasoning":
        return Reasoning(block.reasoning.text)
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
