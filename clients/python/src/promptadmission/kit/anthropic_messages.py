"""Anthropic Messages to a ``ModelOutput``.

The ``content`` blocks in order: ``thinking`` is a reasoning block with its ``signature`` (the
API verifies it when the block comes back, so it is kept byte for byte), ``redacted_thinking`` a
redacted reasoning block with its opaque ``data`` and the provider that issued it (the route's;
no other provider can read it), ``text`` a text block,
``tool_use`` a tool call whose arguments are its ``input`` as JSON text (written as
``JSON.stringify`` would, ``json_text``, so both clients record the same bytes). Blocks the
service has no kind for (server tools' results) are refused by name. A streamed message is the
same object: ``stream.get_final_message()``.

Usage: Anthropic reports cached input apart from ``input_tokens``: ``cache_read_tokens`` is
``cache_read_input_tokens``, ``cache_write_tokens`` is ``cache_creation_input_tokens``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from promptadmission.kit import outputs
from promptadmission.kit.json_text import dumps
from promptadmission.kit.outputs import ModelOutput
from promptadmission.v1 import session_pb2 as pb

if TYPE_CHECKING:
    from anthropic.types import Message, Usage

__all__ = ["from_message", "usage_of"]


def from_message(message: Message, *, provider: str = "anthropic") -> ModelOutput:
    blocks: list[pb.ContentBlock] = []
    for index, block in enumerate(message.content):
        if block.type == "text":
            blocks.append(outputs.text(block.text))
        elif block.type == "thinking":
            blocks.append(outputs.reasoning(block.thinking, block.signature))
        elif block.type == "redacted_thinking":
            blocks.append(outputs.redacted_reasoning(provider, block.data))
        elif block.type == "tool_use":
            blocks.append(outputs.tool_call(block.id, block.name, dumps(block.input)))
        else:
            raise outputs.unsupported(f"content[{index}]", block.type)
    return ModelOutput(outputs.assistant(blocks), usage_of(message.usage))


def usage_of(usage: Usage) -> pb.Usage:
    return outputs.usage(
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_input_tokens or 0,
        usage.cache_creation_input_tokens or 0,
    )
