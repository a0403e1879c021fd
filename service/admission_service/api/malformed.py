"""Naming the field of a request whose bytes do not parse (SPEC §8: a malformed request gets
INVALID_ARGUMENT naming the field).

gRPC hands the service raw bytes; when protobuf cannot decode them (a string that is not valid
UTF-8, a length past the end, an unknown wire type, nesting past the parser's limit), it says
only that parsing failed. ``malformed_field`` walks the wire format against the message's
descriptor and returns the path of the first field whose encoding is broken, in the same
notation as the service's other field violations (``users[0].content[1].text.text``).

The walk is hostile-input work, so it is bounded (issue 13): it reads the one buffer by offsets
(no copy per nesting level), stops at the first broken field, goes no deeper than the parser
does, and gives up after ``MAX_DIAGNOSED_FIELDS`` fields, blaming the whole request. Requests
larger than ``OFF_LOOP_BYTES`` are parsed and diagnosed on a worker thread: the diagnosis is
pure Python, which lets the event loop run every few milliseconds. (protobuf's parse itself
holds the GIL: a 16 MiB request of unknown fields, the costliest valid encoding, takes about
100 ms of it.) ``AdmissionService`` calls are authenticated before any of this runs
(``api/authentication.py``), so only authenticated callers get that far; ``tolerant`` serves
the other services (health, reflection), whose requests are small.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from admission_service.domain.errors import InvalidArgument

# protobuf's own recursion limit: the parser gives up there, so the walk does too.
MAX_DEPTH = 100
# About 10 ms of pure Python; a real request that is broken past this many fields is told
# the whole request is broken instead of which field.
MAX_DIAGNOSED_FIELDS = 10_000
# Parsing and diagnosing this much takes about a millisecond: more goes to a worker thread.
OFF_LOOP_BYTES = 64 * 1024
# Whether the call's request was that large on the wire (``parse_request`` sets it): what is
# done with the parsed request goes off the loop too (``servicer._write``). protobuf has no
# cheap size of a parsed message: ``ByteSize`` encodes it (~20-40 ms for 15 MiB).
_parsed_large: ContextVar[bool] = ContextVar("pas_parsed_large_request", default=False)
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class _Broken(Exception):
    def __init__(self, path: str) -> None:
        self.path = path


class _Walk:
    """One bounded walk over ``data`` (never copied: every level reads it by offsets)."""

    __slots__ = ("data", "fields_left")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.fields_left = MAX_DIAGNOSED_FIELDS

    def varint(self, pos: int, end: int, path: str) -> tuple[int, int]:
        data = self.data
        result = shift = 0
        while True:
            if pos >= end or shift > 63:
                raise _Broken(path)
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return result, pos

    def message(
        self, descriptor: Descriptor, pos: int, end: int, prefix: str, depth: int, top: str
    ) -> None:
        """Walk the encoding of ``descriptor`` in ``data[pos:end]``."""
        counts: dict[int, int] = {}
        here = prefix.rstrip(".")
        while pos < end:
            self.fields_left -= 1
            if self.fields_left < 0:
                raise _Broken("")  # too long to diagnose: blame the whole request
            key, pos = self.varint(pos, end, here)
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
                _, pos = self.varint(pos, end, path)
            elif wire_type in (_FIXED64, _FIXED32):
                pos += 8 if wire_type == _FIXED64 else 4
                if pos > end:
                    raise _Broken(path)
            elif wire_type == _LENGTH:
                size, pos = self.varint(pos, end, path)
                start, pos = pos, pos + size
                if pos > end:
                    raise _Broken(path)
                if field is None:
                    continue
                if field.type == FieldDescriptor.TYPE_STRING:
                    try:  # decodes from a view: the one temporary is this string's text
                        str(memoryview(self.data)[start:pos], "utf-8")
                    except UnicodeDecodeError:
                        raise _Broken(path) from None
                elif field.type == FieldDescriptor.TYPE_MESSAGE:
                    if depth + 1 >= MAX_DEPTH:  # too deep to parse: name the top-level field
                        raise _Broken(top or path)
                    self.message(field.message_type, start, pos, path + ".", depth + 1, top or path)
            else:  # groups (3, 4) are not used by this API; 6 and 7 do not exist
                raise _Broken(path)


def malformed_field(descriptor: Descriptor, data: bytes) -> str:
    """The path of the first broken field in ``data`` (an encoding of ``descriptor``), or ""
    when the damage is not in any one field (or is too far in to look for)."""
    try:
        _Walk(data).message(descriptor, 0, len(data), "", 0, "")
    except _Broken as broken:
        return broken.path
    return ""


class MalformedRequest(InvalidArgument):
    """A request whose bytes are not a valid encoding of its message: INVALID_ARGUMENT naming
    the broken field (or the whole request, ``field == ""``, when no one field is)."""

    def __init__(self, type_name: str, field: str) -> None:
        super().__init__(
            field, f"is not a valid {type_name} encoding (protobuf, strings in Unicode)"
        )
        if not field:
            self.message = f"the request is not a valid {type_name} encoding"
            self.args = (self.message,)


def parse_or_diagnose(message_class: Any, data: bytes) -> Any:
    """``data`` parsed as ``message_class``, or the ``MalformedRequest`` naming what broke."""
    try:
        return message_class.FromString(data)
    except DecodeError:
        descriptor: Descriptor = message_class.DESCRIPTOR
        return MalformedRequest(descriptor.name, malformed_field(descriptor, data))


async def parse_request(message_class: Any, data: bytes) -> Any:
    """``parse_or_diagnose``, on a worker thread when ``data`` is large (which the call then
    knows: ``parsed_large_request``); raises the ``MalformedRequest``."""
    large = len(data) > OFF_LOOP_BYTES
    _parsed_large.set(large)
    if large:
        request = await asyncio.to_thread(parse_or_diagnose, message_class, data)
    else:
        request = parse_or_diagnose(message_class, data)
    if isinstance(request, MalformedRequest):
        raise request
    return request


def parsed_large_request() -> bool:
    """Whether this call's request was parsed on a worker thread for its size."""
    return _parsed_large.get()


def tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer``, returning a ``MalformedRequest`` instead of raising when the bytes do
    not parse (gRPC would answer a raising deserializer with UNKNOWN and the parser's text)."""
    if deserializer is None:
        return None
    message_class = getattr(deserializer, "__self__", None)
    if getattr(message_class, "DESCRIPTOR", None) is None:

        def opaque(data: bytes) -> Any:
            try:
                return deserializer(data)
            except DecodeError:
                return MalformedRequest("request", "")

        return opaque
    return lambda data: parse_or_diagnose(message_class, data)
