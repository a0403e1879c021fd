"""The derived request: every message node in surface order, spliced from stored frames, with
the totals its cache forecast needs and the prefix the next request extends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from admission_service.app import bounds
from admission_service.app.commands import (
    DEFAULT_DELIVERY,
    Delivery,
    DerivedRequestView,
    EncodedMessages,
    RequestContent,
)
from admission_service.app.held_bodies import HeldBody
from admission_service.app.limits import Limits
from admission_service.app.ports import SessionRepository
from admission_service.app.validation import utf8_size
from admission_service.domain.accounting import (
    RequestKey,
    RequestTotals,
    TokenCounter,
    tool_set_key,
    tools_digest,
    tools_tokens,
)
from admission_service.domain.errors import WireFormatError
from admission_service.domain.messages import Tool
from admission_service.domain.series import Route
from admission_service.domain.session import (
    NO_FRAMES,
    Frames,
    FramesQuery,
    RequestPrefix,
    RequestSelection,
    RequestView,
    Session,
    Shadowed,
    derive,
)
from admission_service.domain.wire import (
    NOTHING,
    MessagesEnd,
    Rendered,
    WindowNeeded,
    WireFormat,
    continued,
    render_body,
    unrendered_tools_bytes,
)
from admission_service.off_loop import off_the_loop_if_large


async def derive_request(
    limits: Limits,
    sessions: SessionRepository,
    session: Session,
    route: Route,
    tools: tuple[Tool, ...],
    wire: WireFormat,
    shadowed: Shadowed | None,
    selection: RequestSelection,
    *,
    end_position: int,
    tail: Frames = NO_FRAMES,
    read: Frames | None = None,
    degrade: bool = False,
    delivery: Delivery = DEFAULT_DELIVERY,
    held: HeldBody | None = None,
) -> Derived:
    """The derived request (every message node in surface order): the domain's rules decide
    which stored frames it reads and what it is (``domain.session``: ``FramesQuery.plan``,
    ``derive``); here the frames are read, the body rendered and its size bounded. No stored
    message is decoded or re-encoded, except to render a provider body (non-NEUTRAL wire
    formats). ``tail`` holds this transaction's appended nodes, whose rows are not written
    yet: they end the surface, after everything the database returns. ``read`` is the frames
    already read for exactly this query, if any. With ``degrade`` (Inspect) a body the wire
    format cannot express is reported in the view instead of raised (and the messages are sent
    in its place). ``delivery`` says what the response carries: a body nobody asked for is not
    rendered, and the size bound counts only what is sent. ``held``: the body of the previous
    request this worker holds (app/held_bodies.py), which a FULL body continues when the
    domain's plan says it may (only the frames after it are then read and rendered).
    """
    query = plan_frames(session, shadowed, selection, wire, route, delivery, held)
    found = (
        read
        if read is not None
        else await sessions.frames(query.from_position, query.split_position)
    )
    # The digest hashes every frame: a long surface's, a large step's.
    derived = await off_the_loop_if_large(
        found.size + tail.size,
        lambda: derive(session.prefix, query, shadowed, found, tail, end_position),
    )
    first_index = derived.first_index
    # The body stays in its parts (what was read, chunk by chunk, then this transaction's
    # tail) until the edge's one join; the digest hashed them where they lie. A long
    # surface's frames are never copied here.
    body = EncodedMessages(*found.parts, *tail.parts)
    content = delivery.content_for(wire)
    rendered = NOTHING
    render_error = None
    if content.body:
        try:
            if query.body_held:
                assert held is not None, "planned from a held body"
                assert session.prefix is not None, "a held body continues a request"
                after = await _render(
                    sessions,
                    session.prefix,
                    held.rendered.end,
                    body,
                    session.prefix.messages,
                    wire,
                    route,
                    (),
                )
                # Its join copies the held body (bytes.join lets go of the GIL for it).
                rendered = await off_the_loop_if_large(
                    len(held.rendered.body), lambda: continued(held.rendered, after, wire, tools)
                )
            else:
                rendered = await _render(
                    sessions, session.prefix, query.continues, body, first_index, wire, route, tools
                )
        except WireFormatError as error:
            if not degrade:
                raise
            render_error = error
            content = RequestContent.MESSAGES  # the request is still shown, as its messages
    messages = body if content.messages else EncodedMessages()
    # The typed tools go with the typed messages: a body carries its own, and a response
    # carries one form of the request unless both are asked for.
    sent_tools = tools if content.messages else ()
    bounds.check_derived_request_size(
        messages.size + len(rendered.body) + _tools_size(sent_tools),
        limits,
        streamed=delivery.streamed,
    )
    view = DerivedRequestView(
        wire,
        messages,
        rendered.body,
        sent_tools,
        view=RequestView.DELTA if first_index else RequestView.FULL,
        first_message_index=first_index,
        total_messages=derived.totals.messages,
        digest=derived.digest,
        render_error=render_error,
        omitted=rendered.omitted,
        content=content,
        replaced_body_items=rendered.replaced,
        continues=query.continues,
    )
    # The next request's DELTA body continues this one's (an Anthropic Messages body).
    prefix = replace(derived.prefix, body_end=rendered.end)
    return Derived(view, derived.totals, prefix, rendered, query.body_held)


def plan_frames(
    session: Session,
    shadowed: Shadowed | None,
    selection: RequestSelection,
    wire: WireFormat,
    route: Route,
    delivery: Delivery,
    held: HeldBody | None = None,
) -> FramesQuery:
    """The domain's plan of the frames a derived request reads (``FramesQuery.plan``) for a
    response that carries what ``delivery`` asks on ``route``, with ``held``, the body this
    worker holds of a request in this format on such a route."""
    content = delivery.content_for(wire)
    return FramesQuery.plan(
        session,
        shadowed,
        selection,
        wire,
        provider=route.provider,
        body=content.body,
        messages=content.messages,
        held_body=held.digest if held is not None else None,
    )


async def _render(
    sessions: SessionRepository,
    previous: RequestPrefix | None,
    continues: MessagesEnd | None,
    body: EncodedMessages,
    offset: int,
    wire: WireFormat,
    route: Route,
    tools: tuple[Tool, ...],
) -> Rendered:
    """The provider body of ``body`` (the messages from index ``offset`` on: a DELTA's after
    a held list that ends as ``continues`` says, for Anthropic Messages). An Anthropic
    Messages DELTA whose new messages change the held body's last items is made
    again with the held messages they change (read from the stored nodes before the previous
    request's end: the last few, never the whole prefix)."""

    def rendered(window: EncodedMessages | None = None) -> Rendered:
        return render_body(
            body,
            wire,
            in_history=route.in_history,
            provider=route.provider,
            tools=tools,
            offset=offset,
            continues=continues,
            window=window,
        )

    # A tool set is written once (``wire.rendered_tools``): its first body weighs its bytes.
    size = body.size + unrendered_tools_bytes(wire, tools)
    try:
        return await off_the_loop_if_large(size, rendered)
    except WindowNeeded as needed:
        assert previous is not None
        held = previous.messages - needed.first
        window = EncodedMessages(await sessions.frames_before(previous.end_position, held))
        return await off_the_loop_if_large(size, lambda: rendered(window))


def _tools_size(tools: Sequence[Tool]) -> int:
    """The bytes of the tools' texts as the typed tools send them."""
    return sum(map(utf8_size, tool_set_key(tools)))


@dataclass(frozen=True, slots=True)
class Derived:
    """The derived request as a response carries it, its totals, the prefix the next request
    extends, its rendered body (``NOTHING`` when none was asked for) and whether that body
    continued a held one."""

    view: DerivedRequestView
    totals: RequestTotals
    prefix: RequestPrefix
    rendered: Rendered = NOTHING
    body_continued: bool = False


def request_key(route: Route, tools: tuple[Tool, ...], counter: TokenCounter) -> RequestKey:
    return RequestKey(
        route.provider,
        route.model,
        tools_digest(tools),
        tools_tokens(tools, counter),
    )
