"""``SessionStore`` against PostgreSQL: what it writes reads back as the same domain values, and
its derived request is the stored frames spliced in surface order."""

from __future__ import annotations

import uuid

from admission_service.domain.accounting import node_prices
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
from admission_service.domain.series import (
    ContextLog,
    HeaderLog,
    HeaderReason,
    RequestContext,
    RequestHeader,
)
from admission_service.storage import codec
from admission_service.storage.repository import SessionStore
from sqlalchemy.ext.asyncio import AsyncEngine

AWKWARD = 'nul \x00, astral \U0001f600, quote " and backslash \\'
HEADER = HeaderLog(
    0,
    HeaderReason.INITIAL,
    True,
    RequestHeader("p", "m", (Tool("grep", "find", "{}"),), (("temperature", "0"),)),
)


def session_events() -> list[Event]:
    """Every kind of event, a prompt update, an empty assistant message and a replacement."""
    assistant = Message(
        Role.ASSISTANT,
        (Reasoning("think", "sig"), Text(AWKWARD), ToolCall("c1", "grep", '{"q": 1}')),
    )
    result = Message(
        Role.TOOL, (ToolResult("c1", (Text("found"), Image("data:x", "image/png")), True),)
    )
    return [
        Event(0, EventKind.REQUEST_HEADER, 1, 1, header=HEADER, admission_id="a1"),
        Event(
            1,
            EventKind.REQUEST_CONTEXT,
            1,
            1,
            context=ContextLog(1, RequestContext("p", "m", 1000, True)),
        ),
        Event(
            2,
            EventKind.SYSTEM_MESSAGE,
            1,
            1,
            Append(),
            message=Message(Role.SYSTEM, (Text("be brief"),)),
        ),
        Event(
            3,
            EventKind.USER_MESSAGE,
            1,
            1,
            Append(),
            message=Message(Role.USER, (Text(AWKWARD),)),
            admission_id="a1",
        ),
        Event(4, EventKind.ASSISTANT_MESSAGE, 1, 1, Append(), message=assistant, admission_id="a1"),
        Event(5, EventKind.TOOL_RESULT, 1, 1, Append(), message=result, admission_id="a1"),
        Event(6, EventKind.ASSISTANT_MESSAGE, 1, 2, Append(), message=Message(Role.ASSISTANT, ())),
        Event(
            7,
            EventKind.SYSTEM_MESSAGE,
            2,
            1,
            Append(),
            message=Message(Role.SYSTEM, (Text("be kind"),)),
            update=True,
        ),
        Event(
            8,
            EventKind.COMPACTION_SUMMARY,
            2,
            1,
            Replace(3, 5),
            (3, 4, 5),
            Message(Role.USER, (Text("summary"),)),
        ),
    ]


async def test_what_is_written_reads_back_the_same(engine: AsyncEngine) -> None:
    events = session_events()
    async with engine.connect() as connection, connection.begin() as transaction:
        store = SessionStore(connection, "t", f"store-{uuid.uuid4().hex}")
        created = await store.create()
        assert created is not None
        record = created.session
        written = await store.write_events(events, record.next_position, node_prices(events))
        system_nodes, open_calls = await store.system_nodes_and_open_calls()  # a replace: read
        after = created.reread(system_nodes, open_calls)
        await store.save(after.saved(record.compacted(len(events), written, record.series)))

        assert [row.event() for row in await store.events_after(-1, 100)] == events
        page, more = await store.events_page(-1, 100, 1 << 20)
        assert ([row.event() for row in page], more) == (events, False)
        prompt_events = [row.event() for row in await store.prompt_events(len(events))]
        assert prompt_events == [events[i] for i in (0, 1, 2, 7, 8)]

        surviving = [events[i] for i in (2, 8, 6, 7)]  # the summary took position 1 (seq 3's)
        nodes = await store.surface()
        assert [node.seq for node in nodes] == [event.seq for event in surviving]
        assert [node.decoded() for node in nodes] == [e.derived_message() for e in surviving]
        messages = [e.derived_message() for e in surviving if e.derived_message() is not None]
        frames = await store.frames(0, None)
        assert codec.decode_frames(frames.frames) == tuple(messages)
        assert frames.frames == b"".join(codec.frame(m) for m in messages if m is not None)

        details = await store.system_node_details()
        assert [(row.seq, row.system_text, row.update) for row in details] == [
            (2, b"be brief", False),
            (7, b"be kind", True),
        ]
        await transaction.rollback()
