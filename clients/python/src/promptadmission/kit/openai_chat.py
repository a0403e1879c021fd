"""OpenAI Chat Completions (and DeepSeek's chat API) to a ``ModelOutput``.

From ``choices[0].message``: DeepSeek's ``reasoning_content`` first (a field beyond OpenAI's
schema, which DeepSeek requires back after tool calls), then the text (``content``, or the
``refusal`` the model wrote instead), then the function tool calls with their ids and argument
JSON byte for byte. A streamed completion is the same object once the SDK has accumulated it
(``stream.get_final_completion()``, or ``ChatCompletionStreamState``).

Usage: ``input_tokens`` is ``prompt_tokens`` (which includes cached input on both providers);
``cache_read_tokens`` is OpenAI's ``prompt_tokens_details.cached_tokens`` or DeepSeek's
``prompt_cache_hit_tokens``; ``cache_write_tokens`` is OpenAI's
``prompt_tokens_details.cache_write_tokens`` when reported. DeepSeek's
``prompt_cache_miss_tokens`` is ``input_tokens - cache_read_tokens`` and needs no field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from promptadmission.kit import outputs
from promptadmission.kit.outputs import ModelOutput
from promptadmission.v1 import session_pb2 as pb

if TYPE_CHECKING:
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion

__all__ = ["from_chat_completion", "usage_of"]


def from_chat_completion(completion: ChatCompletion) -> ModelOutput:
    if not completion.choices:
        raise ValueError("choices: the completion has no choice")
    message = completion.choices[0].message
    blocks: list[pb.ContentBlock] = []
    reasoning = _extra(message, "reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        blocks.append(outputs.reasoning(reasoning))
    content = message.content if message.content is not None else message.refusal
    if content:
        blocks.append(outputs.text(content))
    for index, call in enumerate(message.tool_calls or []):
        if call.type != "function":
            raise outputs.unsupported(f"choices[0].message.tool_calls[{index}]", call.type)
        blocks.append(outputs.tool_call(call.id, call.function.name, call.function.arguments))
    return ModelOutput(outputs.assistant(blocks), usage_of(completion.usage))


def usage_of(usage: CompletionUsage | None) -> pb.Usage | None:
    if usage is None:
        return None
    details = usage.prompt_tokens_details
    cached = _count(_extra(usage, "prompt_cache_hit_tokens"))  # DeepSeek
    if details is not None and details.cached_tokens is not None:
        cached = details.cached_tokens
    written = details.cache_write_tokens if details is not None else None
    return outputs.usage(usage.prompt_tokens, usage.completion_tokens, cached, written or 0)


def _extra(model: Any, name: str) -> Any:
    """A field the provider sent beyond the SDK's schema (pydantic keeps it in model_extra)."""
    return (getattr(model, "model_extra", None) or {}).get(name)


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0
