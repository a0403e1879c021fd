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

from collections.abc import Sequence
from dataclasses import dataclass

from admission_service.domain import json_text
from admission_service.domain.messages import Message, Role, Tool
from admission_service.domain.wire_anthropic import (
    MessagesEnd,
    WindowNeeded,
    anthropic_messages,
)
from admission_service.domain.wire_common import Json, Omission, Omissions, WireFormat, refuse
from admission_service.domain.wire_openai import openai_chat, openai_responses

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

    body_json: str
    omitted: tuple[Omission, ...] = ()
    replaced: int = 0
    end: MessagesEnd | None = None


NOTHING = Rendered("")


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
        body = openai_chat(messages, provider=provider, tools=tools, offset=offset, omitted=omitted)
    elif wire is WireFormat.OPENAI_RESPONSES:
        body = openai_responses(messages, tools=tools, offset=offset, omitted=omitted)
    else:
        rendered = anthropic_messages(
            messages,
            provider=provider,
            tools=tools,
            omitted=omitted,
            offset=offset,
            continues=continues,
            window=window,
        )
        body, replaced, end = rendered.body, rendered.replaced, rendered.end
    return Rendered(
        json_text.dumps(body),
        tuple(omitted),
        replaced,
        end,
    )
