"""Tool results from a harness's own values.

``tool_result(call, value)`` turns what a tool returned into the ``ToolResult`` that answers
``call`` (a ``ToolCallBlock`` or its id):

- a ``str`` is one text block, as it is;
- a ``ToolImage`` is one image block (``ToolImage.of_bytes`` makes a base64 ``data:`` URI);
- a list or tuple of ``str`` and ``ToolImage`` items with at least one image is one block each;
- an exception is an error result whose text is ``"<type name>: <message>"`` (the OpenAI
  formats have no error flag, so the text is how the model learns the call failed);
- anything else is JSON, one text block written as ``JSON.stringify`` would (``json_text``),
  so the TypeScript kit records the same bytes for the same value.

``is_error=True`` marks any value as a failure description.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from promptadmission.kit.json_text import dumps
from promptadmission.v1 import session_pb2 as pb

__all__ = ["ToolImage", "tool_result"]


@dataclass(frozen=True, slots=True)
class ToolImage:
    """An image a tool returned: a URL or a ``data:`` URI, with its media type."""

    uri: str
    media_type: str = ""

    @classmethod
    def of_bytes(cls, data: bytes, media_type: str) -> ToolImage:
        encoded = base64.b64encode(data).decode("ascii")
        return cls(f"data:{media_type};base64,{encoded}", media_type)


def tool_result(
    call: pb.ToolCallBlock | str, value: Any, *, is_error: bool = False
) -> pb.ToolResult:
    call_id = call if isinstance(call, str) else call.call_id
    if isinstance(value, BaseException):
        return pb.ToolResult(call_id=call_id, content=[_text(_error_text(value))], is_error=True)
    return pb.ToolResult(call_id=call_id, content=_blocks(value), is_error=is_error)


def _blocks(value: Any) -> list[pb.ContentBlock]:
    if isinstance(value, str):
        return [_text(value)]
    if isinstance(value, ToolImage):
        return [_image(value)]
    if _is_parts(value):
        return [_image(part) if isinstance(part, ToolImage) else _text(part) for part in value]
    return [_text(dumps(value))]


def _is_parts(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(isinstance(part, str | ToolImage) for part in value)
        and any(isinstance(part, ToolImage) for part in value)
    )


def _error_text(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _text(value: str) -> pb.ContentBlock:
    return pb.ContentBlock(text=pb.TextBlock(text=value))


def _image(image: ToolImage) -> pb.ContentBlock:
    return pb.ContentBlock(image=pb.ImageBlock(uri=image.uri, media_type=image.media_type))
