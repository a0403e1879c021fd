"""Model-visible messages and their content blocks, as frozen values."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class Text:
    text: str


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
class ToolCall:
    call_id: str
    name: str
    arguments_json: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    content: tuple[Text | Image, ...]
    is_error: bool = False


Block = Text | Image | Reasoning | ToolCall | ToolResult


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
