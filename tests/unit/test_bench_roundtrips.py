"""bench/roundtrips.py reads PostgreSQL's frontend protocol to count a step's round trips: its
message parser, on bytes built here (no server)."""

from __future__ import annotations

import struct

from bench.roundtrips import Wire, _messages, summary


def message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def startup() -> bytes:
    body = struct.pack("!I", 196608) + b"user\0postgres\0\0"
    return struct.pack("!I", len(body) + 4) + body


def test_the_parser_reads_whole_messages_and_keeps_a_partial_one() -> None:
    parse = message(b"P", b"\0SELECT 1 FROM sessions\0\0\0")
    stream = startup() + message(b"Q", b"BEGIN\0") + parse + message(b"B", b"\0" * 8)
    stream += message(b"E", b"\0\0\0\0\0") + message(b"S", b"")
    buffer = bytearray(stream[:-3])  # the Sync arrives in the next read
    found, started = _messages(buffer, started=False)
    assert started
    assert found == [
        ("startup", ""),
        ("Q", "BEGIN"),
        ("P", "SELECT 1 FROM sessions"),
        ("B", ""),
        ("E", ""),
    ]
    buffer += stream[-3:]
    assert _messages(buffer, started) == ([("S", "")], True)
    assert not buffer


def test_an_ssl_request_is_followed_by_the_startup_packet() -> None:
    ssl_request = struct.pack("!II", 8, 80877103)
    buffer = bytearray(ssl_request + startup() + message(b"Q", b";\0"))
    found, started = _messages(buffer, started=False)
    assert [kind for kind, _ in found] == ["startup", "startup", "Q"]
    assert started


def test_per_call_figures() -> None:
    wire = Wire(flights=[[("Q", ";")], [("P", "x"), ("B", ""), ("E", ""), ("S", "")]] * 2)
    wire.bytes_up, wire.bytes_down = 400, 200
    assert summary(wire, 2) == {
        "round_trips_per_call": 2.0,
        "statements_per_call": 2.0,
        "parses_per_call": 1.0,
        "bytes_to_server_per_call": 200,
        "bytes_from_server_per_call": 100,
    }
