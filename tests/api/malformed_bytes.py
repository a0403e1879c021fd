"""Request bytes that do not parse, each with the field the service must name: the one list
of crafted malformed requests. tests/api/test_malformed_requests.py checks each answer through
the API; the reliability suite's hostile-input scenario sends them to a real process among its
random payloads (tests/reliability/test_hostile.py), and its attacks build theirs from ``ld``
and ``varint``."""

from __future__ import annotations

from dataclasses import dataclass


def varint(value: int) -> bytes:
    """``value`` as a protobuf base-128 varint."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def ld(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def nested_tool_results(depth: int) -> bytes:
    """users[0].content[0].tool_result.content[0].tool_result... ``depth`` levels deep."""
    block = ld(1, ld(1, b"leaf"))  # ContentBlock{text}
    for _ in range(depth):
        block = ld(5, ld(2, block))  # ContentBlock{tool_result{content[0]}}
    return ld(10, ld(2, block))  # AdmitRequest.users[0].content[0]


@dataclass(frozen=True, slots=True)
class Malformed:
    """Bytes sent as a ``method`` request, and the field the service names (``""``: the whole
    request, when no one field is to blame)."""

    what: str
    method: str
    data: bytes
    field: str


MALFORMED = [
    Malformed("lone surrogate", "Admit", ld(1, b"\xed\xa0\x80"), "session_id"),
    Malformed("truncated UTF-8", "Admit", ld(1, b"ok") + ld(6, b"\xc3"), "rendered_prompt"),
    Malformed(
        "invalid UTF-8 nested",
        "Admit",
        ld(10, ld(2, ld(1, ld(1, b"ok\xff")))),
        "users[0].content[0].text.text",
    ),
    Malformed("beyond U+10FFFF", "Admit", ld(8, ld(1, b"\xf4\x90\x80\x80")), "route.provider"),
    Malformed("length past the end", "Admit", b"\x0a\x10abc", "session_id"),
    Malformed("no such wire type", "Admit", ld(1, b"s") + bytes([6 << 3 | 7]), "rendered_prompt"),
    Malformed(
        "truncated length", "Admit", ld(7, ld(1, b"t") + b"\x12\xff"), "tools[0].description"
    ),
    Malformed("past the nesting limit", "Admit", nested_tool_results(150), "users[0]"),
    Malformed("truncated UTF-8 nested", "Reconcile", ld(5, ld(2, b"\xc3")), "route.model"),
    Malformed("no field to blame", "GetSession", b"\xff\xff\xff", ""),
    Malformed("invalid UTF-8", "ListEvents", ld(3, b"\xfe"), "page_token"),
]
