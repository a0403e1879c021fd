"""Anthropic's Messages API ``system``, ``messages`` and ``tools`` (docs/WIRE_FORMATS.md).

The head goes to the top-level ``system``. A later system message is held until just before the
next assistant message (or the end) and needs a user turn before it, so a ``tool_result`` still
follows its ``tool_use``. Consecutive user content (a user message after tool results, the
results of parallel calls) is one user message, tool results first, as the API requires: every
``tool_result`` for an assistant's ``tool_use`` blocks in the single user message after it.
Empty text blocks carry nothing and the API rejects them, so they are left out; a message left
with no content derives to nothing, like an empty assistant.

Reasoning goes back in the assistant's content, in its order: a ``thinking`` block only with
the provider's ``signature`` (the API verifies it), a ``redacted_thinking`` block only to the
provider that issued its data; reasoning without a signature, another provider's opaque
reasoning and Responses reasoning items are listed in ``Omissions``, not sent (the API drops
earlier turns' thinking from the context anyway). Two adjacent assistant messages merge into
one, which must keep its thinking first: a merge that would put thinking after the earlier
message's content is refused. Images: a ``data:`` URI is a ``base64`` source with its media
type, any other URI a ``url`` source; DeepSeek's Anthropic-compatible API takes no image blocks.

A DELTA (the messages after a held request) is therefore not always an append: user content
after a held list that ends in a user item (and its trailing system items) merges into that
item, an assistant message after an assistant item merges into it. The rendering keeps how the
list ends (``MessagesEnd``); a DELTA's body carries the items from the first one that differs
from the held list's, and how many held items at its end they replace. The caller's list is
then the held list without those, followed by the DELTA's (``anthropic_messages``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from admission_service.domain import json_text
from admission_service.domain import messages as msg
from admission_service.domain.wire_common import (
    Json,
    Omissions,
    WireFormat,
    check_media_type,
    check_tool_name,
    inline_image,
    is_data_uri,
    refuse,
    tool_schema,
)

WIRE = WireFormat.ANTHROPIC_MESSAGES
THINKING = frozenset({"thinking", "redacted_thinking"})
# Providers whose Anthropic-compatible API takes no image blocks.
NO_IMAGE_PROVIDERS = frozenset({"deepseek"})


@dataclass(frozen=True, slots=True)
class MessagesEnd:
    """How a request's ``messages`` list ends, as the next request's DELTA continues it (kept
    with the request's prefix: ``session.RequestPrefix.body_end``).

    ``items`` is the list's length. ``role`` is the role of its last user or assistant item
    ('' when it has none), which the next messages merge into when they have its role (and, for
    ``user``, when only system messages come between); ``pending`` says the list ends with
    system items placed after that item, which then move after the merged content. ``window``
    is the index of the message where that last item began, or of the first trailing system
    message when that is earlier: re-rendered from there with the item before it ending in
    ``before`` (its role; '' when ``window`` is 0, the whole request), the held messages give
    the list's last items again, whatever follows them. ``provider`` is the route's: the
    blocks of a body depend on it.
    """

    provider: str
    items: int
    role: str
    pending: bool
    window: int
    before: str


class WindowNeeded(Exception):
    """The new messages change the held list's last items (a merge into its last user or
    assistant item): render again with the held messages from index ``first`` on."""

    def __init__(self, first: int) -> None:
        super().__init__(f"the held messages from {first} on are needed")
        self.first = first


@dataclass(frozen=True, slots=True)
class MessagesBody:
    """A rendered body, how its ``messages`` end, and for a DELTA how many items at the end of
    the held list its ``messages`` replace; ``starts``: the index of each item's first message
    (a held body's items from ``end.window`` on are the ones a DELTA may replace)."""

    body: Json
    end: MessagesEnd
    replaced: int = 0
    starts: tuple[int, ...] = ()


def anthropic_messages(
    messages: Sequence[msg.Message],
    *,
    provider: str,
    omitted: Omissions,
    offset: int = 0,
    continues: MessagesEnd | None = None,
    window: Sequence[msg.Message] | None = None,
) -> MessagesBody:
    """The body of ``messages`` (the whole request), or with ``continues`` the DELTA after a
    held request of ``offset`` messages whose list ends as ``continues`` says: its new items
    (``messages`` are the request's from ``offset`` on).

    A DELTA renders only the new messages while they leave the held items as they are: they
    follow them, or the trailing system items the held list already ends with. When they would
    change the held list's last item (merge into it) it raises ``WindowNeeded``, and is made
    again with ``window``, the held messages from ``continues.window`` to ``offset``: both the
    held window and the window followed by the new messages are rendered after the items
    before it, and the body carries the items from the first that differs (``replaced``: the
    held items from there on), with the top-level ``system`` only if the held body had none.
    """
    if continues is None:
        if offset:
            raise ValueError("a DELTA of a Messages body continues a held one")
        fold = _Fold(provider, omitted)
        for index, message in enumerate(messages):
            fold.message(index, message)
        end = fold.finish()
        return MessagesBody(_body(fold.out, fold.system), end, starts=fold.item_starts())
    if window is None:
        if not continues.role:  # nothing held to follow: render again from the start
            raise WindowNeeded(continues.window)
        fold = _Fold(
            provider,
            omitted,
            kept=continues.items,
            role=continues.role,
            pending=continues.pending,
            window=continues.window,
            before=continues.before,
        )
        for index, message in enumerate(messages, start=offset):
            fold.message(index, message)
        end = fold.finish()
        return MessagesBody(_body(fold.out, None), end, starts=fold.item_starts())
    return _rendered_again(messages, provider, omitted, offset, continues, window)


def _rendered_again(
    messages: Sequence[msg.Message],
    provider: str,
    omitted: Omissions,
    offset: int,
    continues: MessagesEnd,
    window: Sequence[msg.Message],
) -> MessagesBody:
    """The DELTA made again from the held window (``anthropic_messages``)."""
    first = continues.window
    if len(window) != offset - first:
        raise ValueError("the window is the held messages from continues.window on")
    # The held window as the held body ends (its blocks' omissions were reported then).
    held = _Fold(provider, Omissions(), kept=1 if first else 0, role=continues.before)
    for index, message in enumerate(window, start=first):
        held.message(index, message)
    held.finish()
    kept = continues.items - len(held.out)
    if kept < 0 or (kept == 0) != (first == 0):
        raise RuntimeError("the held window does not end the held list")
    fold = _Fold(
        provider,
        omitted,
        kept=kept,
        role=continues.before,
        window=first,
        before=continues.before,
        report_from=offset,
    )
    try:
        for index, message in enumerate(window, start=first):
            fold.message(index, message)
        for index, message in enumerate(messages, start=offset):
            fold.message(index, message)
    except WindowNeeded as error:  # the window starts an item: nothing merges into a kept one
        raise RuntimeError("a window's messages merged into an item before it") from error
    end = fold.finish()
    same = 0
    for old, new in zip(held.out, fold.out, strict=False):
        if old != new:
            break
        same += 1
    # The top-level system is set once, by a system message before any item: a held body
    # that has one keeps it.
    system = fold.system if held.system is None else None
    return MessagesBody(
        _body(fold.out[same:], system), end, len(held.out) - same, fold.item_starts()[same:]
    )


def _body(items: list[Json], system: str | None) -> Json:
    body: Json = {"messages": items}
    if system is not None:
        body["system"] = system
    return body


def messages_tools(tools: Sequence[msg.Tool]) -> list[Json]:
    """A Messages body's ``tools``."""
    return [_tool(index, tool) for index, tool in enumerate(tools)]


class _Fold:
    """The ``messages`` list built message by message (the module docstring's rules).

    A DELTA's fold starts after ``kept`` items the caller holds and this fold does not: their
    last user or assistant item has ``role`` and is followed by trailing system items when
    ``pending`` (they are among ``kept``: flushed, they stay where they are). Content that
    would merge into a kept item raises ``WindowNeeded`` (``window``). Omissions of messages
    before ``report_from`` were reported with the held request and are not again."""

    def __init__(
        self,
        provider: str,
        omitted: Omissions,
        *,
        kept: int = 0,
        role: str = "",
        pending: bool = False,
        window: int = 0,
        before: str = "",
        report_from: int = 0,
    ) -> None:
        self.provider = provider
        self.omitted = omitted
        self.report_from = report_from
        self.system: str | None = None
        self.out: list[Json] = []
        # For each item of ``out``: the index of its first message and the role of the item
        # before it ('' for the list's first).
        self.starts: list[tuple[int, str]] = []
        self.pending: list[tuple[int, str]] = []  # later system messages: (index, text)
        self.kept = kept
        self.kept_role = role
        self.kept_pending = pending
        self.window = window
        self.before = before

    def item_starts(self) -> tuple[int, ...]:
        """The index of each item's first message."""
        return tuple(start for start, _ in self.starts)

    def last_role(self) -> str:
        """The role of the list's last item, trailing system items still pending aside."""
        return self.out[-1]["role"] if self.out else self.kept_role

    def message(self, index: int, message: msg.Message) -> None:
        where = f"messages[{index}]"
        omitted = self.omitted if index >= self.report_from else Omissions()
        if message.role is msg.Role.SYSTEM:
            if not self.out and not self.kept and self.system is None:
                self.system = message.text
            else:
                self.pending.append((index, message.text))
        elif message.role is msg.Role.ASSISTANT:
            sources, content = _assistant_content(message, self.provider, where, omitted)
            if content:
                self.flush()
                if self.last_role() == "assistant":
                    _check_merge(sources, content)
            self.add("assistant", content, index)
        elif message.role is msg.Role.USER:
            self.add("user", _user_content(message.content, self.provider, where), index)
        else:
            results = [
                _tool_result(block, self.provider, f"{where}.content[{position}].tool_result")
                for position, block in enumerate(message.content)
                if isinstance(block, msg.ToolResult)
            ]
            self.add("user", results, index)

    def flush(self) -> None:
        """The pending system messages, before an assistant message or at the end."""
        if not self.pending and not self.kept_pending:
            return
        if self.last_role() != "user":
            refuse(
                WIRE,
                f"messages[{self.pending[0][0] if self.pending else self.window}]",
                "system update without a preceding user or tool-result turn",
            )
        if self.kept_pending:  # already at the end of the held list, where they stay
            self.kept_pending = False
            self.kept_role = "system"
        for index, text in self.pending:
            self._new("system", [{"type": "text", "text": text}], index)
        self.pending.clear()

    def add(self, role: str, content: list[Json], index: int) -> None:
        if not content:
            return
        if self.last_role() != role:
            self._new(role, content, index)
        elif self.out:
            self.out[-1]["content"].extend(content)
        else:
            raise WindowNeeded(self.window)

    def _new(self, role: str, content: list[Json], index: int) -> None:
        self.starts.append((index, self.last_role() if self.out or self.kept else ""))
        self.out.append({"role": role, "content": content})

    def finish(self) -> MessagesEnd:
        """How the list ends; then the pending system messages go to its end."""
        role = self.last_role()
        if self.out:
            start, before = self.starts[-1]
            if not before:
                window = 0
            elif self.pending:
                window = min(start, self.pending[0][0])
            else:
                window = start
        else:
            window, before = self.window, self.before
        end = MessagesEnd(
            self.provider,
            self.kept + len(self.out) + len(self.pending),
            role,
            bool(self.pending) or self.kept_pending,
            window,
            before,
        )
        self.flush()
        return end


def _user_content(content: Sequence[object], provider: str, where: str) -> list[Json]:
    parts: list[Json] = []
    for index, block in enumerate(content):
        if isinstance(block, msg.Text) and block.text:
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, msg.Image):
            parts.append(_image(block, provider, f"{where}.content[{index}]"))
    return parts


def _image(image: msg.Image, provider: str, where: str) -> Json:
    if provider in NO_IMAGE_PROVIDERS:
        refuse(WIRE, where, f"the {provider} Anthropic-compatible API takes no image blocks")
    check_media_type(WIRE, where, image)
    inline = inline_image(image)
    if inline is not None:
        source: Json = {"type": "base64", "media_type": inline.media_type, "data": inline.data}
    elif is_data_uri(image.uri):
        refuse(WIRE, where, "a data: image must be base64 (data:<media type>;base64,<data>)")
    else:
        source = {"type": "url", "url": image.uri}
    return {"type": "image", "source": source}


def _tool_result(block: msg.ToolResult, provider: str, where: str) -> Json:
    entry: Json = {"type": "tool_result", "tool_use_id": block.call_id}
    content = _user_content(block.content, provider, where)
    if content:
        entry["content"] = content
    if block.is_error:
        entry["is_error"] = True
    return entry


def _assistant_content(
    message: msg.Message, provider: str, where: str, omitted: Omissions
) -> tuple[list[str], list[Json]]:
    """The assistant's content blocks in order, and the field each one came from."""
    sources: list[str] = []
    parts: list[Json] = []
    for index, block in enumerate(message.content):
        field = f"{where}.content[{index}]"
        part: Json | None = None
        if isinstance(block, msg.Reasoning):
            if block.signature:
                part = {"type": "thinking", "thinking": block.text, "signature": block.signature}
            elif block.text:
                omitted.omit(field, "Messages takes thinking back only with its signature")
        elif isinstance(block, msg.RedactedReasoning):
            if block.provider == provider:
                part = {"type": "redacted_thinking", "data": block.data}
            else:
                omitted.omit(
                    field, f"redacted reasoning of {block.provider!r} goes back only to it"
                )
        elif isinstance(block, msg.ReasoningItem):
            omitted.omit(field, "Messages has no place for a Responses reasoning item")
        elif isinstance(block, msg.Text):
            omitted.phase(WIRE, field, block)
            if block.text:
                part = {"type": "text", "text": block.text}
        elif isinstance(block, msg.ToolCall):
            part = {
                "type": "tool_use",
                "id": block.call_id,
                "name": block.name,
                "input": json_text.loads(block.arguments_json or "{}"),
            }
        if part is not None:
            sources.append(field)
            parts.append(part)
    return sources, parts


def _check_merge(sources: list[str], content: list[Json]) -> None:
    """An assistant message right after another joins it (the API combines consecutive turns);
    its thinking would then follow the earlier content, which the API refuses (thinking blocks
    open an assistant turn). Refused by the first such block."""
    for field, part in zip(sources, content, strict=True):
        if part["type"] in THINKING:
            refuse(
                WIRE,
                field,
                "thinking in an assistant message that follows another assistant message"
                " (merged into one, its thinking would not come first)",
            )


def _tool(index: int, tool: msg.Tool) -> Json:
    check_tool_name(WIRE, index, tool)
    schema = tool_schema(tool)
    if schema.get("type") != "object":
        refuse(WIRE, f"tools[{index}].parameters_json", 'input_schema must be {"type": "object"}')
    entry: Json = {"name": tool.name}
    if tool.description:
        entry["description"] = tool.description
    entry["input_schema"] = schema
    return entry
