"""The derived messages in the v1 API's protobuf encoding, in the standard library.

Storage keeps every surface node's derived message already encoded as the API's
``promptadmission.v1.Message`` and framed as one element of ``DerivedRequest.messages`` (field
2: tag, length, bytes). A FULL derived request is then the concatenation of the stored frames in
surface order — assembled by the database, spliced into the response — and never re-encodes a
stored message. ``decode_messages`` reads frames back for the callers that need values.

The encoding is protobuf's deterministic one for these messages (fields in number order, proto3
defaults omitted, a set oneof member always present); a test checks it byte for byte against
the generated code.
"""

from __future__ import annotations

from admission_service.domain.messages import (
    Block,
    Image,
    Message,
    Reasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
)

_ROLES = {Role.SYSTEM: 1, Role.USER: 2, Role.ASSISTANT: 3, Role.TOOL: 4}
_ROLES_IN = {number: role for role, number in _ROLES.items()}
MESSAGES_FIELD = 2  # DerivedRequest.messages


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _tag(number, 2) + _varint(len(data)) + data


def _string(number: int, value: str) -> bytes:
    return _bytes_field(number, value.encode()) if value else b""


def _block(block: Block) -> bytes:
    if isinstance(block, Text):
        return _bytes_field(1, _string(1, block.text))
    if isinstance(block, Image):
        return _bytes_field(2, _string(1, block.uri) + _string(2, block.media_type))
    if isinstance(block, Reasoning):
        return _bytes_field(3, _string(1, block.text) + _string(2, block.signature))
    if isinstance(block, ToolCall):
        body = _string(1, block.call_id) + _string(2, block.name) + _string(3, block.arguments_json)
        return _bytes_field(4, body)
    body = _string(1, block.call_id)
    body += b"".join(_bytes_field(2, _block(inner)) for inner in block.content)
    if block.is_error:
        body += _tag(3, 0) + b"\x01"
    return _bytes_field(5, body)


def encode_message(message: Message) -> bytes:
    """``promptadmission.v1.Message``, serialized."""
    return (
        _tag(1, 0)
        + _varint(_ROLES[message.role])
        + b"".join(_bytes_field(2, _block(block)) for block in message.content)
    )


def frame(message: Message) -> bytes:
    """``message`` as one element of ``DerivedRequest.messages``."""
    return _bytes_field(MESSAGES_FIELD, encode_message(message))


# ---- decoding -----------------------------------------------------------------------------


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs: varints as int, length-delimited fields as bytes."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, at = _read_varint(data, at)
            out.append((number, value))
        elif wire_type == 2:
            size, at = _read_varint(data, at)
            out.append((number, data[at : at + size]))
            at += size
        else:
            raise ValueError(f"unexpected wire type {wire_type}")
    return out


def _strings(data: bytes) -> dict[int, str]:
    return {n: v.decode() for n, v in _fields(data) if isinstance(v, bytes)}


def _decode_block(data: bytes) -> Block:
    ((number, value),) = _fields(data)
    assert isinstance(value, bytes)
    if number == 1:
        return Text(_strings(value).get(1, ""))
    if number == 2:
        fields = _strings(value)
        return Image(fields.get(1, ""), fields.get(2, ""))
    if number == 3:
        fields = _strings(value)
        return Reasoning(fields.get(1, ""), fields.get(2, ""))
    if number == 4:
        fields = _strings(value)
        return ToolCall(fields.get(1, ""), fields.get(2, ""), fields.get(3, ""))
    call_id, content, is_error = "", [], False
    for inner_number, inner in _fields(value):
        if inner_number == 1 and isinstance(inner, bytes):
            call_id = inner.decode()
        elif inner_number == 2 and isinstance(inner, bytes):
            block = _decode_block(inner)
            assert isinstance(block, Text | Image)
            content.append(block)
        elif inner_number == 3:
            is_error = bool(inner)
    return ToolResult(call_id, tuple(content), is_error)


def decode_message(data: bytes) -> Message:
    role = Role.USER
    blocks: list[Block] = []
    for number, value in _fields(data):
        if number == 1 and isinstance(value, int):
            role = _ROLES_IN[value]
        elif number == 2 and isinstance(value, bytes):
            blocks.append(_decode_block(value))
    return Message(role, tuple(blocks))


def decode_messages(framed: bytes) -> tuple[Message, ...]:
    """The messages of concatenated ``frame`` output, in order."""
    return tuple(
        decode_message(value)
        for number, value in _fields(framed)
        if number == MESSAGES_FIELD and isinstance(value, bytes)
    )
