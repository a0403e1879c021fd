"""Model-visible messages and their content blocks, as frozen values."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


# The values an OpenAI Responses output message's ``phase`` takes (``Text.phase``).
PHASES = frozenset({"commentary", "final_answer"})


@dataclass(frozen=True, slots=True)
class Text:
    """Text. ``phase`` is an OpenAI Responses output message's label of assistant text
    (``commentary`` or ``final_answer``), sent back by that format only; empty otherwise."""

    text: str
    phase: str = ""


@dataclass(frozen=True, slots=True)
class Image:
    uri: str
    media_type: str


@dataclass(frozen=True, slots=True)
class Reasoning:
    """Reasoning a model produced. ``signature`` is the provider's opaque proof of it (an
    Anthropic thinking block's ``signature``), passed back unchanged; empty when there is none."""

    text: str
    signature: str = ""


@dataclass(frozen=True, slots=True)
class RedactedReasoning:
    """Reasoning the provider returned only as opaque ``data`` (an Anthropic
    ``redacted_thinking`` block), passed back unchanged and only to ``provider``."""

    provider: str
    data: str


@dataclass(frozen=True, slots=True)
class ReasoningItem:
    """An OpenAI Responses reasoning item: its ``id``, its ``encrypted_content`` (stateless use)
    and the texts of its ``summary_text`` and ``reasoning_text`` parts, passed back unchanged."""

    item_id: str
    encrypted_content: str = ""
    summary: tuple[str, ...] = ()
    content: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments_json: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    content: tuple[Text | Image, ...]
    is_error: bool = False


Block = Text | Image | Reasoning | RedactedReasoning | ReasoningItem | ToolCall | ToolResult


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: tuple[Block, ...]

    @property
    def text(self) -> str:
        """The concatenated text blocks (how a system node's prompt is read)."""
        return "".join(block.text for block in self.content if isinstance(block, Text))

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(block for block in self.content if isinstance(block, ToolCall))

    def tool_call_ids(self) -> tuple[str, ...]:
        return tuple(call.call_id for call in self.tool_calls())

    def tool_result_ids(self) -> tuple[str, ...]:
        return tuple(block.call_id for block in self.content if isinstance(block, ToolResult))

    def chars(self) -> int:
        """The characters of every string the message holds: how much encoding or hashing it
        takes, known without reading them (a string knows its length)."""
        return _chars(self.content)


def _chars(value: object) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, tuple):
        return sum(map(_chars, value))
    slots: tuple[str, ...] = getattr(value, "__slots__", ())  # a block; its flags hold none
    return sum(_chars(getattr(value, name)) for name in slots)


def system_message(text: str) -> Message:
    """A system message; the empty prompt has no content block, so it derives to nothing."""
    return Message(Role.SYSTEM, (Text(text),) if text else ())


def user_text(text: str) -> Message:
    return Message(Role.USER, (Text(text),))


@dataclass(frozen=True, slots=True)
class Tool:
    """A visible tool: name, description and its JSON schema as text (compared byte for byte)."""

    name: str
    description: str
    parameters_json: str
