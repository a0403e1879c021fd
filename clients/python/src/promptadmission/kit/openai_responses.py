"""OpenAI Responses to a ``ModelOutput``.

The ``output`` items in order: a ``message``'s ``output_text`` parts (and a ``refusal``) are text
blocks carrying the message's ``phase``, a ``function_call`` is a tool call (its ``call_id``, not
the item ``id``, is what the ``function_call_output`` answers), a ``reasoning`` item is a
reasoning item block with its ``id``, ``encrypted_content`` (stateless use) and its summary and
reasoning texts, byte for byte: the service sends it back as the input item it was. Other items
(built-in tools' calls) have no block and are refused by name. A streamed response is the same
object: the stream's ``get_final_response()``.

Usage: ``input_tokens`` (cached input included), ``output_tokens``, and
``input_tokens_details.cached_tokens`` / ``cache_write_tokens`` as the cache read and write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from promptadmission.kit import outputs
from promptadmission.kit.outputs import ModelOutput
from promptadmission.v1 import session_pb2 as pb

if TYPE_CHECKING:
    from openai.types.responses import Response, ResponseReasoningItem, ResponseUsage

__all__ = ["from_response", "usage_of"]


def from_response(response: Response) -> ModelOutput:
    blocks: list[pb.ContentBlock] = []
    for index, item in enumerate(response.output):
        if item.type == "message":
            phase = item.phase or ""
            for part_index, part in enumerate(item.content):
                if part.type == "output_text":
                    blocks.append(outputs.text(part.text, phase))
                elif part.type == "refusal":
                    blocks.append(outputs.text(part.refusal, phase))
                else:  # pragma: no cover - the SDK's union has no other member today
                    raise outputs.unsupported(f"output[{index}].content[{part_index}]", part.type)
        elif item.type == "function_call":
            blocks.append(outputs.tool_call(item.call_id, item.name, item.arguments))
        elif item.type == "reasoning":
            blocks.append(_reasoning_item(item))
        else:
            raise outputs.unsupported(f"output[{index}]", item.type)
    return ModelOutput(outputs.assistant(blocks), usage_of(response.usage))


def _reasoning_item(item: ResponseReasoningItem) -> pb.ContentBlock:
    return outputs.reasoning_item(
        item.id,
        item.encrypted_content or "",
        [summary.text for summary in item.summary],
        [part.text for part in item.content or []],
    )


def usage_of(usage: ResponseUsage | None) -> pb.Usage | None:
    if usage is None:
        return None
    details = usage.input_tokens_details
    return outputs.usage(
        usage.input_tokens, usage.output_tokens, details.cached_tokens, details.cache_write_tokens
    )
