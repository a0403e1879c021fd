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
    "render",
    "render_body",
]


@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered body and what it leaves out, in message order; for an Anthropic Messages
    body, how its list ends (what the next DELTA continues) and, for a DELTA, how many items
    at the end of the held list its items replace."""

    body: bytes  # the body's JSON in UTF-8, as it is sent
    omitted: tuple[Omission, ...] = ()
    replaced: int = 0
    end: MessagesEnd | None = None

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
    body: Json
    omitted = Omissions()
    replaced, end = 0, None
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
        body, replaced, end = rendered.body, rendered.replaced, rendered.end
    return Rendered(
        _with_tools(json_text.dumps_utf8(body), rendered_tools(wire, tools)),
        tuple(omitted),
        replaced,
        end,
    )


def _with_tools(body: bytes, tools: bytes) -> bytes:
    """The body's JSON with ``"tools"`` as its last member. Every body is an object that
    already has a member (its messages or input), and JSON without whitespace is written member
    by member, so this is the text ``json_text.dumps`` writes for the body with its tools
    (``tests/unit/domain/test_rendered_tools.py``)."""
    if not tools:
        return body
    return b"".join((memoryview(body)[:-1], b',"tools":', tools, b"}"))


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
