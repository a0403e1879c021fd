"""Provider wire formats for a derived request (SPEC §7, docs/WIRE_FORMATS.md).

``render`` turns the derived messages into the body fragment a harness posts as-is: the
conversation fields and the tools, in the provider's own shapes. Every body is one the
provider accepts; what a format cannot express is refused with ``WireFormatError`` naming the
message, block and format; what a format has no place for on the route (reasoning for another
provider, a phase outside Responses) is left out and listed, never dropped unreported
(``Rendered.omitted``, DerivedRequest.omitted). On a route that is not in-history a body never
carries a non-leading system message; the projection rule guarantees the surface never asks
for one, and rendering refuses rather than send one.

The formats live beside this module: ``wire_openai`` (Chat Completions and Responses) and
``wire_anthropic`` (Messages). ``route.provider`` decides the provider-specific fields: DeepSeek's
``reasoning_content`` on chat, signed ``thinking`` blocks on Messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from admission_service.domain import json_text
from admission_service.domain.accounting import tool_set_key
from admission_service.domain.memo import BoundedMemo
from admission_service.domain.messages import Message, Role, Tool
from admission_service.domain.wire_anthropic import (
    MessagesEnd,
    WindowNeeded,
    anthropic_messages,
    messages_tools,
)
from admission_service.domain.wire_common import Json, Omission, Omissions, WireFormat, refuse
from admission_service.domain.wire_openai import (
    chat_tools,
    openai_chat,
    openai_responses,
    responses_tools,
)

__all__ = [
    "MessagesEnd",
    "Omission",
    "Rendered",
    "WindowNeeded",
    "WireFormat",
    "continued",
    "render",
    "render_body",
]


@dataclass(frozen=True, slots=True)
class BodyLayout:
    """Where a body's list lies in its bytes, so the body of a later request on the same
    surface can be made from this one without rendering it again (``continued``).

    The body is ``{"<list>":[`` then the items up to ``items_end`` (the offset of the list's
    closing ``]``), then its other members (an Anthropic Messages ``system``) up to
    ``members_end`` (where ``,"tools":`` begins, or the closing ``}``). ``open_items`` are the
    items a later DELTA may replace (an Anthropic Messages list's last user or assistant item
    and the system items after it, the items from ``MessagesEnd.window`` on; none for the
    OpenAI formats, whose bodies append): for each, the index of its first message and the
    offset where it begins, counting the ``,`` before it."""

    items_start: int
    items_end: int
    members_end: int
    open_items: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered body and what it leaves out, in message order; for an Anthropic Messages
    body, how its list ends (what the next DELTA continues) and, for a DELTA, how many items
    at the end of the held list its items replace; where its list lies (``layout``)."""

    body: bytes  # the body's JSON in UTF-8, as it is sent
    omitted: tuple[Omission, ...] = ()
    replaced: int = 0
    end: MessagesEnd | None = None
    layout: BodyLayout | None = None

    @property
    def body_json(self) -> str:
        return self.body.decode()


NOTHING = Rendered(b"")


def render(
    messages: Sequence[Message],
    wire: WireFormat,
    *,
    in_history: bool,
    provider: str = "",
    tools: Sequence[Tool] = (),
    offset: int = 0,
    continues: MessagesEnd | None = None,
    window: Sequence[Message] | None = None,
) -> str:
    """The body fragment for ``wire`` ('' for NEUTRAL); ``render_body`` without the omissions."""
    return render_body(
        messages,
        wire,
        in_history=in_history,
        provider=provider,
        tools=tools,
        offset=offset,
        continues=continues,
        window=window,
    ).body_json


def render_body(
    messages: Sequence[Message],
    wire: WireFormat,
    *,
    in_history: bool,
    provider: str = "",
    tools: Sequence[Tool] = (),
    offset: int = 0,
    continues: MessagesEnd | None = None,
    window: Sequence[Message] | None = None,
) -> Rendered:
    """The body fragment for ``wire`` ('' for NEUTRAL, whose typed messages are the answer)
    and the blocks it leaves out.

    ``offset`` is the index of ``messages[0]`` in the whole request: a DELTA renders only the
    messages after a held prefix. The OpenAI formats' items follow the held ones; an Anthropic
    Messages DELTA continues the held list as ``continues`` (the held request's
    ``Rendered.end``) says, and may need the held messages from ``continues.window`` on
    (``window``; ``WindowNeeded`` asks for them): ``wire_anthropic.anthropic_messages``.
    ``provider`` is the route's provider; ``tools`` the request's tool set.
    """
    if wire is WireFormat.NEUTRAL:
        return NOTHING
    if offset and wire is WireFormat.ANTHROPIC_MESSAGES and continues is None:
        raise ValueError("an Anthropic Messages DELTA continues a held list (continues)")
    checked: list[tuple[int, Message]] = list(enumerate(messages, start=offset))
    if window is not None and continues is not None:
        checked[:0] = enumerate(window, start=continues.window)
    for index, message in checked:
        if message.role is Role.SYSTEM:
            if not message.text:
                refuse(wire, f"messages[{index}]", "empty in-history system update")
            if index > 0 and not in_history:
                refuse(
                    wire,
                    f"messages[{index}]",
                    "a non-leading system message on a route that is not in-history",
                )
    omitted = Omissions()
    replaced, end = 0, None
    starts: tuple[int, ...] = ()
    if wire is WireFormat.OPENAI_CHAT:
        body = openai_chat(messages, provider=provider, offset=offset, omitted=omitted)
    elif wire is WireFormat.OPENAI_RESPONSES:
        body = openai_responses(messages, offset=offset, omitted=omitted)
    else:
        rendered = anthropic_messages(
            messages,
            provider=provider,
            omitted=omitted,
            offset=offset,
            continues=continues,
            window=window,
        )
        body, replaced, end, starts = (
            rendered.body,
            rendered.replaced,
            rendered.end,
            rendered.starts,
        )
    text, layout = _assembled(body, starts, end, rendered_tools(wire, tools))
    return Rendered(text, tuple(omitted), replaced, end, layout)


def _assembled(
    body: Json, starts: Sequence[int], end: MessagesEnd | None, tools: bytes
) -> tuple[bytes, BodyLayout]:
    """The JSON of ``body`` (its list first, then its other members) with ``"tools"`` as its
    last member, and where its list lies. JSON without whitespace is written member by member
    and item by item, so this is the text ``json_text.dumps`` writes for the body with its
    tools (``tests/unit/domain/test_rendered_tools.py``); the open items (those from
    ``end.window`` on, whose first message indices are ``starts``) are written one by one, so
    their offsets are known."""
    (name, items), *others = body.items()
    closed_count = len(items) - _open_count(starts, end)
    closed = json_text.dumps_utf8(items[:closed_count])
    head = b'{"' + name.encode() + b'":['
    parts: list[bytes | memoryview] = [head, memoryview(closed)[1:-1]]
    offset = len(head) + len(closed) - 2  # after the closed items
    open_items = []
    for start, item in zip(starts[closed_count:], items[closed_count:], strict=True):
        written = json_text.dumps_utf8(item)
        separator = b"," if offset > len(head) else b""
        open_items.append((start, offset))
        parts += (separator, written)
        offset += len(separator) + len(written)
    members = b"".join(
        b',"' + key.encode() + b'":' + json_text.dumps_utf8(value) for key, value in others
    )
    parts += (b"]", members, *((b',"tools":', tools) if tools else ()), b"}")
    layout = BodyLayout(len(head), offset, offset + 1 + len(members), tuple(open_items))
    return b"".join(parts), layout


def _open_count(starts: Sequence[int], end: MessagesEnd | None) -> int:
    """How many of a list's last items a DELTA after it may replace, given the index of each
    item's first message (``starts``): those from ``end.window`` on (none without an end: the
    OpenAI formats' lists only grow)."""
    if end is None:
        return 0
    count = 0
    while count < len(starts) and starts[len(starts) - 1 - count] >= end.window:
        count += 1
    return count


def continued(held: Rendered, part: Rendered, wire: WireFormat, tools: Sequence[Tool]) -> Rendered:
    """The body of a request from ``held``, the body of a prefix of its messages, and ``part``,
    the DELTA after that prefix (``render_body`` with ``offset`` and, for Anthropic Messages,
    ``continues=held.end``), with ``tools``: byte for byte the body ``render_body`` makes of the
    whole request, without rendering the prefix again (``tests/unit/domain/test_body_delta.py``).
    The held list without the ``part.replaced`` items it ends with, then ``part``'s items; the
    held body's other members unless ``part`` has its own (a DELTA sets ``system`` only when
    the held body had none)."""
    layout, new = held.layout, part.layout
    assert layout is not None, "a body render_body made"
    assert new is not None, "a body render_body made"
    replaced = part.replaced
    if replaced > len(layout.open_items):
        raise ValueError("a DELTA replaces held items the held body did not keep open")
    kept = layout.open_items[: len(layout.open_items) - replaced]
    kept_end = layout.open_items[-replaced][1] if replaced else layout.items_end
    held_text, part_text = memoryview(held.body), memoryview(part.body)
    items = part_text[new.items_start : new.items_end]
    separator = b"," if items and kept_end > layout.items_start else b""
    members = (
        part_text[new.items_end + 1 : new.members_end]
        or held_text[layout.items_end + 1 : layout.members_end]
    )
    tools_json = rendered_tools(wire, tools)
    text = b"".join(
        (
            held_text[:kept_end],
            separator,
            items,
            b"]",
            members,
            *((b',"tools":', tools_json) if tools_json else ()),
            b"}",
        )
    )
    # The part's items follow the kept ones: its first begins at ``kept_end`` (with the
    # separator), the others where they began in the part, moved by as much.
    moved = kept_end + len(separator) - new.items_start
    appended = tuple(
        (start, kept_end if offset == new.items_start else offset + moved)
        for start, offset in new.open_items
    )
    items_end = kept_end + len(separator) + len(items)
    candidates = (*kept, *appended)
    open_items = candidates[len(candidates) - _open_count([s for s, _ in candidates], part.end) :]
    return Rendered(
        text,
        held.omitted + part.omitted,
        0,
        part.end,
        BodyLayout(layout.items_start, items_end, items_end + 1 + len(members), open_items),
    )


def rendered_tools(wire: WireFormat, tools: Sequence[Tool]) -> bytes:
    """The JSON of a ``wire`` body's ``tools`` in UTF-8 (empty for none), remembered by the set
    and format (``RENDERED_TOOLS``): a harness sends the same tools every step, and writing a
    12 MiB tool set into each step's body was a fifth of a provider-format step's time
    (BENCHMARKS, fifteenth round). A set the format refuses raises every time."""
    if not tools:
        return b""
    key, size = _memo_key(wire, tools)
    return RENDERED_TOOLS.get(key, size, lambda: json_text.dumps_utf8(_TOOLS[wire](tools)))


def unrendered_tools_bytes(wire: WireFormat, tools: Sequence[Tool]) -> int:
    """The bytes of the tools' texts ``render_body`` would write for ``tools`` in ``wire``:
    0 once their JSON is remembered (or for NEUTRAL, which renders nothing)."""
    if wire is WireFormat.NEUTRAL or not tools:
        return 0
    key, size = _memo_key(wire, tools)
    return 0 if RENDERED_TOOLS.holds(key, size) else size


def _memo_key(
    wire: WireFormat, tools: Sequence[Tool]
) -> tuple[tuple[WireFormat, tuple[str, ...]], int]:
    """The set's key among ``RENDERED_TOOLS`` and the bytes of text it holds."""
    key = tool_set_key(tools)
    return (wire, key), sum(map(len, key))


_TOOLS: dict[WireFormat, Callable[[Sequence[Tool]], list[Json]]] = {
    WireFormat.OPENAI_CHAT: chat_tools,
    WireFormat.OPENAI_RESPONSES: responses_tools,
    WireFormat.ANTHROPIC_MESSAGES: messages_tools,
}

# The rendered tool sets of the last bodies, within 4 MiB of tools, and the last larger one
# (domain/memo.py).
RENDERED_TOOLS: BoundedMemo[tuple[WireFormat, tuple[str, ...]], bytes] = BoundedMemo(
    4 * 1024 * 1024
)
