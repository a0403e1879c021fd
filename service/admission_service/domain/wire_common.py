"""What the provider wire formats share: the format names, refusals, images and tool schemas."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NoReturn

from admission_service.domain import json_text
from admission_service.domain.errors import WireFormatError
from admission_service.domain.memo import BoundedMemo
from admission_service.domain.messages import Image, Text, Tool, ToolResult

Json = dict[str, Any]

# A data URI as the providers take it inline: ``data:<media type>;base64,<payload>``.
_DATA_URI = re.compile(r"data:(?P<media_type>[^;,]+);base64,(?P<data>.*)", re.DOTALL)


class WireFormat(StrEnum):
    NEUTRAL = "neutral"
    OPENAI_CHAT = "openai_chat"
    OPENAI_RESPONSES = "openai_responses"
    ANTHROPIC_MESSAGES = "anthropic_messages"


def refuse(wire: WireFormat, field: str, why: str) -> NoReturn:
    """Refuse content ``wire`` cannot express: the error names the field and the format."""
    raise WireFormatError(
        f"{field}: {why} (WIRE_FORMAT_{wire.name})",
        field=field,
        wire_format=f"WIRE_FORMAT_{wire.name}",
    )


@dataclass(frozen=True, slots=True)
class Omission:
    """A block (or a field of one) that a format's body leaves out, and why: the format has no
    place for it on this route (DerivedRequest.omitted)."""

    field: str
    why: str


class Omissions(list[Omission]):
    """What one rendering leaves out, in message order."""

    def omit(self, field: str, why: str) -> None:
        self.append(Omission(field, why))

    def phase(self, wire: WireFormat, where: str, block: Text) -> None:
        """A text's phase, which only the Responses format carries."""
        if block.phase:
            self.omit(f"{where}.text.phase", f"WIRE_FORMAT_{wire.name} has no message phase")


@dataclass(frozen=True, slots=True)
class InlineImage:
    media_type: str
    data: str


def inline_image(image: Image) -> InlineImage | None:
    """The media type and base64 payload of a ``data:`` image; None for a URL."""
    match = _DATA_URI.fullmatch(image.uri)
    if match is None:
        return None
    return InlineImage(match["media_type"].lower(), match["data"])


def is_data_uri(uri: str) -> bool:
    return uri[:5].lower() == "data:"


# The image media types every format's provider accepts: the Messages API's base64 source
# (``Base64ImageSourceParam.media_type``) and OpenAI's vision input ("PNG, JPEG, WEBP,
# non-animated GIF").
MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def check_media_type(wire: WireFormat, where: str, image: Image) -> None:
    """Refuse an image whose declared media type (its ``data:`` URI's, else its
    ``media_type``) the provider does not accept; an undeclared URL image is the provider's to
    read."""
    inline = inline_image(image)
    declared = inline.media_type if inline is not None else image.media_type.lower()
    if declared and declared not in MEDIA_TYPES:
        refuse(
            wire,
            where,
            f"image media type {declared!r} is not one of {', '.join(sorted(MEDIA_TYPES))}",
        )


def result_text(block: ToolResult) -> str:
    return "".join(inner.text for inner in block.content if isinstance(inner, Text))


def result_images(block: ToolResult) -> list[Image]:
    return [inner for inner in block.content if isinstance(inner, Image)]


def tool_schema(tool: Tool) -> Json:
    """The tool's parameter schema as an object; no parameters is the empty object schema.
    Parsed once per schema text (``SCHEMAS``): the value is shared by every body that carries
    it, so it is never changed, only written."""
    if not tool.parameters_json:
        return {"type": "object", "properties": {}}
    return SCHEMAS.get(tool.parameters_json, len(tool.parameters_json), lambda: _parsed(tool))


def _parsed(tool: Tool) -> Json:
    schema = json_text.loads(tool.parameters_json)
    assert isinstance(schema, dict)  # validated at Admit
    return schema


# The tools' parsed schemas, within 4 MiB of schema text: parsing 40 tools' schemas (45 KB)
# took ~0.36 ms of every step with a provider body (domain/memo.py).
SCHEMAS: BoundedMemo[str, Json] = BoundedMemo(4 * 1024 * 1024)


# Function names both OpenAI APIs and the Messages API accept (their documented pattern).
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def check_tool_name(wire: WireFormat, index: int, tool: Tool) -> None:
    if not TOOL_NAME.fullmatch(tool.name):
        refuse(wire, f"tools[{index}].name", "a tool name must match ^[a-zA-Z0-9_-]{1,64}$")
