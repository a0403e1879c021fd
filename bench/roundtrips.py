"""``python -m bench.roundtrips``: count the database round trips of one step, on the wire.

A TCP proxy between the service and PostgreSQL reads the frontend protocol: the messages a
client sends between two answers of the server are one *flight* (a round trip), and the
proxy records each flight's message types and statements (``Q`` simple queries, ``P`` parses:
the statement text; ``B``/``E`` binds and executes, ``S`` sync). The service runs with one worker
and its health probe off, so the only traffic is the calls'; one caller makes S1's one-call steps
(then the same step whose previous output used a tool: a tool call and its result), on the
service with its session cache warm and on one without a cache (``PAS_SESSION_CACHE_BYTES=0``:
every step a miss); then the
physical floor's call and the lean step prototype's, ``bench/lean_step.py``, for
comparison) and the proxy's counts are divided by the
number of calls.

    python -m bench.roundtrips --steps 200 [--show 1]

``--show N`` prints the flights of N steps with their statements (first 100 characters).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import struct
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from bench.client import PROMPT, Session, assistant, channel, stub, text, tool_result, user
from bench.infra import bench_database, free_port, start_floor, start_service
from bench.scenarios import USAGE, USER_CHARS, Floor, _step_sessions, one_call_step


async def tool_step(session: Session, label: str) -> float:
    """A one-call step whose previous output used a tool: the assistant's tool call and its
    result (200 characters), the usage, and the next user message."""
    call_id = f"call-{label}"
    call = assistant("", [(call_id, "read_file", '{"path": "a.py"}')])
    result = tool_result(call_id, text(USER_CHARS, label))
    _, elapsed = await session.one_call(
        PROMPT, [user(text(USER_CHARS, label))], call, [result], **USAGE
    )
    return elapsed


@dataclass
class Wire:
    """What the proxy saw from the clients since the last ``reset``."""

    flights: list[list[tuple[str, str]]] = field(default_factory=list)
    bytes_up: int = 0
    bytes_down: int = 0

    def reset(self) -> None:
        self.flights.clear()
        self.bytes_up = self.bytes_down = 0


def _messages(buffer: bytearray, started: bool) -> tuple[list[tuple[str, str]], bool]:
    """Whole frontend messages at the start of ``buffer`` (consumed): (type, statement)."""
    out = []
    while True:
        if not started:  # the startup packet (or SSL request) has no type byte
            if len(buffer) < 4:
                break
            (length,) = struct.unpack("!I", buffer[:4])
            if len(buffer) < length:
                break
            del buffer[:length]
            started = length != 8  # an SSLRequest/GSSENCRequest is followed by the startup
            out.append(("startup", ""))
            continue
        if len(buffer) < 5:
            break
        kind = chr(buffer[0])
        (length,) = struct.unpack("!I", buffer[1:5])
        if len(buffer) < 1 + length:
            break
        body = bytes(buffer[5 : 1 + length])
        del buffer[: 1 + length]
        text = ""
        if kind == "Q":
            text = body.rstrip(b"\0").decode(errors="replace")
        elif kind == "P":
            name_end = body.index(b"\0")
            text = body[name_end + 1 : body.index(b"\0", name_end + 1)].decode(errors="replace")
        out.append((kind, " ".join(text.split())))
    return out, started


@dataclass
class _Connection:
    """One proxied connection: whether the server has answered since the client last sent."""

    answered: bool = True


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    wire: Wire,
    connection: _Connection,
    upstream: bool,
) -> None:
    buffer = bytearray()
    started = False
    try:
        while data := await reader.read(1 << 16):
            if upstream:
                wire.bytes_up += len(data)
                buffer += data
                messages, started = _messages(buffer, started)
                # A new flight only once the server has answered: messages the client sends
                # without waiting (pipelined) belong to the flight they follow.
                if connection.answered or not wire.flights:
                    wire.flights.append([])
                    connection.answered = False
                wire.flights[-1].extend(messages)
            else:
                wire.bytes_down += len(data)
                connection.answered = True
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
        pass  # either side closed, or the proxy is stopping
    finally:
        writer.close()


async def start_proxy(host: str, port: int, wire: Wire) -> tuple[asyncio.Server, int]:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(host, port)
        connection = _Connection()
        with contextlib.suppress(asyncio.CancelledError):  # the proxy is stopping
            await asyncio.gather(
                _pipe(client_r, server_w, wire, connection, upstream=True),
                _pipe(server_r, client_w, wire, connection, upstream=False),
            )

    listen = free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    return server, listen


def summary(wire: Wire, calls: int) -> dict[str, Any]:
    kinds: Counter[str] = Counter(kind for flight in wire.flights for kind, _ in flight)
    return {
        "round_trips_per_call": round(len(wire.flights) / calls, 2),
        "statements_per_call": round((kinds["Q"] + kinds["E"]) / calls, 2),
        "parses_per_call": round(kinds["P"] / calls, 2),
        "bytes_to_server_per_call": round(wire.bytes_up / calls),
        "bytes_from_server_per_call": round(wire.bytes_down / calls),
    }


def show(wire: Wire, flights: int, width: int = 100) -> str:
    lines = []
    for number, flight in enumerate(wire.flights[:flights], 1):
        kinds = "".join(kind if len(kind) == 1 else "*" for kind, _ in flight)
        statements = [text[:width] for kind, text in flight if text]
        lines.append(f"  {number:>2}. [{kinds}] {' | '.join(statements)}")
    return "\n".join(lines)


async def run(steps: int, show_steps: int, width: int) -> None:
    with bench_database() as (url, _), tempfile.TemporaryDirectory() as logs:
        parsed = make_url(url)
        wire = Wire()
        proxy, port = await start_proxy(parsed.host or "127.0.0.1", parsed.port or 5432, wire)
        proxied = parsed.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        # The migrations run directly; the service then serves through the proxy.
        one_worker = {"PAS_WORKERS": "1", "PAS_HEALTH_PROBE_SECONDS": "0"}
        service = await asyncio.to_thread(start_service, proxied, Path(logs), env=one_worker)
        # The same service without its session cache: every step a miss.
        uncached = await asyncio.to_thread(
            start_service, proxied, Path(logs), env={**one_worker, "PAS_SESSION_CACHE_BYTES": "0"}
        )
        physical = await asyncio.to_thread(
            start_floor, proxied, Path(logs), 1, "bench.physical_floor"
        )
        lean = await asyncio.to_thread(start_floor, proxied, Path(logs), 1, "bench.lean_step")
        one_call = await asyncio.to_thread(
            start_floor, proxied, Path(logs), 1, "bench.lean_function"
        )
        try:
            cases = (("a warm cache", service), ("a cache miss every step", uncached))
            for cache, server in cases:
                async with channel(server.target) as ch:
                    sessions = await _step_sessions(stub(ch), 10, 40)
                    kinds = (
                        ("one-call step", one_call_step, "s"),
                        ("one-call step, with a tool call and its result", tool_step, "t"),
                    )
                    for name, make_step, tag in kinds:
                        for number in range(steps):  # warm up: prepared paths, caches
                            await make_step(sessions[number % 10], f"{tag}w{number}")
                        wire.reset()
                        for number in range(steps):
                            await make_step(sessions[number % 10], f"{tag}{number}")
                        await asyncio.sleep(0.2)
                        step = summary(wire, steps)
                        print(f"{name} ({cache}):", step)  # noqa: T201
                        if show_steps:
                            flights = int(step["round_trips_per_call"] + 0.5)
                            wire.flights[:] = wire.flights[:flights]
                            print(show(wire, 100, width))  # noqa: T201
            others = (
                ("physical floor", physical),
                ("lean step", lean),
                ("lean step, one function call", one_call),
            )
            for name, server in others:
                floor = Floor(server.target)
                ids = [f"rt-{uuid.uuid4().hex}" for _ in range(10)]
                for number in range(steps):
                    await floor.call(ids[number % 10])
                wire.reset()
                for number in range(steps):
                    await floor.call(ids[number % 10])
                await asyncio.sleep(0.2)
                await floor.close()
                print(f"{name}:", summary(wire, steps))  # noqa: T201
                if show_steps:
                    flights = int(summary(wire, steps)["round_trips_per_call"] + 0.5)
                    print(show(wire, flights, width))  # noqa: T201
        finally:
            service.stop()
            uncached.stop()
            physical.stop()
            lean.stop()
            one_call.stop()
            proxy.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--show", type=int, default=1)
    parser.add_argument("--width", type=int, default=100, help="characters of each statement")
    args = parser.parse_args()
    asyncio.run(run(args.steps, args.show, args.width))


if __name__ == "__main__":
    main()
