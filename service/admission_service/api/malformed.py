"""Naming the field of a request whose bytes do not parse (SPEC §8: a malformed request gets
INVALID_ARGUMENT naming the field).

gRPC hands the service raw bytes; when protobuf cannot decode them (a string that is not valid
UTF-8, a length past the end, an unknown wire type, nesting past the parser's limit), it says
only that parsing failed. ``malformed_field`` walks the wire format against the message's
descriptor and returns the path of the first field whose encoding is broken, in the same
notation as the service's other field violations (``users[0].content[1].text.text``).
``tolerant`` wraps a handler's request deserializer so such a request reaches the error
interceptor as a ``MalformedRequest`` (INVALID_ARGUMENT) instead of gRPC's UNKNOWN.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from admission_service.domain.errors import InvalidArgument

# Deeper than protobuf's own recursion limit (100): the parser gives up there.
_MAX_DEPTH = 100
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class _Broken(Exception):
    def __init__(self, path: str) -> None:
        self.path = path


def _varint(data: bytes, pos: int, path: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Broken(path)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _walk(descriptor: Descriptor, data: bytes, prefix: str, depth: int, top: str) -> None:
    counts: dict[int, int] = {}
    pos = 0
    here = prefix.rstrip(".")
    while pos < len(data):
        key, pos = _varint(data, pos, here)
        number, wire_type = key >> 3, key & 7
        field = descriptor.fields_by_number.get(number)
        path = here
        if field is not None:
            path = prefix + field.name
            if field.is_repeated and wire_type == _LENGTH:
                index = counts.get(number, 0)
                counts[number] = index + 1
                if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING):
                    path += f"[{index}]"
        if wire_type == _VARINT:
            _, pos = _varint(data, pos, path)
        elif wire_type in (_FIXED64, _FIXED32):
            pos += 8 if wire_type == _FIXED64 else 4
            if pos > len(data):
                raise _Broken(path)
        elif wire_type == _LENGTH:
            size, pos = _varint(data, pos, path)
            if pos + size > len(data):
                raise _Broken(path)
            payload, pos = data[pos : pos + size], pos + size
            if field is None:
                continue
            if field.type == FieldDescriptor.TYPE_STRING:
                try:
                    payload.decode("utf-8")
                except UnicodeDecodeError:
                    raise _Broken(path) from None
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                if depth >= _MAX_DEPTH:  # too deep to parse: name the top-level field
                    raise _Broken(top)
                _walk(field.message_type, payload, path + ".", depth + 1, top or path)
        else:  # groups (3, 4) are not used by this API; 6 and 7 do not exist
            raise _Broken(path)


def malformed_field(descriptor: Descriptor, data: bytes) -> str:
    """The path of the first broken field in ``data`` (an encoding of ``descriptor``), or ""
    when the damage is not in any one field."""
    try:
        _walk(descriptor, data, "", 0, "")
    except _Broken as broken:
        return broken.path
    return ""


class MalformedRequest(InvalidArgument):
    """A request whose bytes are not a valid encoding of its message: INVALID_ARGUMENT naming
    the broken field (or the whole request, ``field == ""``, when no one field is)."""

    def __init__(self, type_name: str, field: str) -> None:
        super().__init__(field, f"is not a valid {type_name} encoding (protobuf, UTF-8 strings)")
        if not field:
            self.message = f"the request is not a valid {type_name} encoding"
            self.args = (self.message,)


def tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer``, returning a ``MalformedRequest`` instead of raising when the bytes do
    not parse (gRPC would answer a raising deserializer with UNKNOWN and the parser's text)."""
    if deserializer is None:
        return None
    message_class = getattr(deserializer, "__self__", None)
    descriptor: Descriptor | None = getattr(message_class, "DESCRIPTOR", None)

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError:
            if descriptor is None:
                return MalformedRequest("request", "")
            return MalformedRequest(descriptor.name, malformed_field(descriptor, data))

    return deserialize
