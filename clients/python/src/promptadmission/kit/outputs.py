"""What a provider's response becomes: the assistant ``Message`` and the ``Usage`` to record.

Every converter (``openai_chat``, ``openai_responses``, ``anthropic_messages``) returns a
``ModelOutput``; ``model_output`` picks the converter from the response's own type field, so a
harness that switches providers calls one function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from promptadmission.v1 import session_pb2 as pb

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["ModelOutput", "model_output"]


@dataclass(frozen=True, slots=True)
class ModelOutput:
    """One model response as the service records it.

    ``assistant`` holds the response's content in the order the provider produced it:
    reasoning (with its signature), text and tool calls (with their ids and argument JSON);
    ``usage`` the provider's token counts, cache reads and writes included, or None when the
    response reported none.
    """

    assistant: pb.Message
    usage: pb.Usage | None

    @property
    def tool_calls(self) -> list[pb.ToolCallBlock]:
        """The tool calls the model made, in order: each needs a result before the next step."""
        return [block.tool_call for block in self.assistant.content if block.HasField("tool_call")]

    @property
    def text(self) -> str:
        """The response's text blocks joined: the answer a harness shows."""
        return "".join(
            block.text.text for block in self.assistant.content if block.HasField("text")
        )


def assistant(blocks: Sequence[pb.ContentBlock]) -> pb.Message:
    return pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=blocks)


def text(value: str, phase: str = "") -> pb.ContentBlock:
    return pb.ContentBlock(text=pb.TextBlock(text=value, phase=phase))


def reasoning(value: str, signature: str = "") -> pb.ContentBlock:
    return pb.ContentBlock(reasoning=pb.ReasoningBlock(text=value, signature=signature))


def redacted_reasoning(provider: str, data: str) -> pb.ContentBlock:
    return pb.ContentBlock(
        redacted_reasoning=pb.RedactedReasoningBlock(provider=provider, data=data)
    )


def reasoning_item(
    item_id: str, encrypted_content: str, summary: Sequence[str], content: Sequence[str]
) -> pb.ContentBlock:
    return pb.ContentBlock(
        reasoning_item=pb.ReasoningItemBlock(
            id=item_id, encrypted_content=encrypted_content, summary=summary, content=content
        )
    )


def tool_call(call_id: str, name: str, arguments_json: str) -> pb.ContentBlock:
    return pb.ContentBlock(
        tool_call=pb.ToolCallBlock(call_id=call_id, name=name, arguments_json=arguments_json)
    )


def usage(input_tokens: int, output_tokens: int, cache_read: int, cache_write: int) -> pb.Usage:
    return pb.Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def unsupported(where: str, kind: str) -> ValueError:
    """The error for content the service has no block for: refused by name, never dropped."""
    return ValueError(f"{where}: the service has no block for {kind!r} content")


def model_output(response: Any, *, provider: str = "anthropic") -> ModelOutput:
    """The ``ModelOutput`` of an OpenAI ``ChatCompletion`` (DeepSeek's included), an OpenAI
    ``Response`` or an Anthropic ``Message``, streamed ones too (the SDK's final object).
    ``provider`` is the route's provider of a Messages API response (Anthropic's own, or
    DeepSeek's Anthropic-compatible API): its opaque reasoning goes back only to it."""
    from promptadmission.kit import anthropic_messages, openai_chat, openai_responses

    if getattr(response, "object", None) == "chat.completion":
        return openai_chat.from_chat_completion(response)
    if getattr(response, "object", None) == "response":
        return openai_responses.from_response(response)
    if getattr(response, "type", None) == "message":
        return anthropic_messages.from_message(response, provider=provider)
    raise TypeError(f"not a provider response the kit knows: {type(response).__name__}")
