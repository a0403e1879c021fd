"""``python -m bench.cache_memory``: a worker's memory with its session cache at its bound (S6).

A worker keeps the sessions it wrote (``storage/session_cache.py``, ``PAS_SESSION_CACHE_BYTES``,
16 MiB by default) and evicts the least recently used past the bound. This starts the real
service with one worker (``DATABASE_URL``'s server, or an embedded one) and its default bound,
then steps ever more distinct sessions through it (16 callers, each on its own connection; a
step is CreateSession and one Admit, so every session ends cached), reading the worker's RSS
after each stretch: it must level off once the cache is full, and stay within S6's budget
(150 MiB). Three kinds of session: ``small`` (the benchmark's prompt and a 200-character user
message: a few KiB per entry, so the entry count bounds first), ``large`` (a 48 KiB prompt,
kept with the admission: the byte bound bounds first) and ``held`` (a 64 KiB user message
admitted FULL three times, so the worker holds its frame, ``storage/held_frames.py``,
``PAS_HELD_FRAME_BYTES``; a sixteenth as many sessions, three times the bound) and ``bodies``
(the same in the OpenAI chat format, so the worker also holds its rendered body,
``app/held_bodies.py``, ``PAS_HELD_BODY_BYTES``). The same run with all three off
(``PAS_SESSION_CACHE_BYTES=0``, ``PAS_HELD_FRAME_BYTES=0``, ``PAS_HELD_BODY_BYTES=0``) is the
baseline.

    python -m bench.cache_memory [--sessions 12000] [--out bench/results/cache_memory.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from bench.client import PROMPT, Session, channel, stub, text, user
from bench.infra import REPO, bench_database, start_service

CALLERS = 16


@dataclass(frozen=True)
class Shape:
    prompt: str
    user_chars: int = 200
    full_admits: int = 0  # FULL Admits after the first (DELTA) one
    share: int = 1  # one session in ``share`` of the run's count
    wire_format: pb.WireFormat.ValueType = pb.WIRE_FORMAT_NEUTRAL  # of the FULL Admits


SHAPES = {
    "small": Shape(PROMPT),
    "large": Shape(PROMPT + " " + "x" * (48 * 1024)),
    "held": Shape(PROMPT, user_chars=64 * 1024, full_admits=2, share=16),
    "bodies": Shape(
        PROMPT,
        user_chars=64 * 1024,
        full_admits=2,
        share=16,
        wire_format=pb.WIRE_FORMAT_OPENAI_CHAT,
    ),
}


async def _step_new_sessions(target: str, shape: Shape, count: int) -> None:
    """``count`` new sessions, each created and admitted as ``shape`` says, by ``CALLERS``
    callers."""
    channels = [channel(target, own_connection=True) for _ in range(CALLERS)]
    remaining = iter(range(count))

    async def caller(admission: Any) -> None:
        for _ in remaining:
            session_id = f"cache-{uuid.uuid4().hex}"
            await admission.CreateSession(api.CreateSessionRequest(session_id=session_id))
            session = Session(admission, session_id)
            await session.admit(shape.prompt, [user(text(shape.user_chars, "u"))], delta=True)
            for _ in range(shape.full_admits):
                request = session.admit_request(shape.prompt, [user(text(200, "u"))])
                request.wire_format = shape.wire_format
                await admission.Admit(request)

    try:
        await asyncio.gather(*(caller(stub(ch)) for ch in channels))
    finally:
        for ch in channels:
            await ch.close(None)


async def _measure(url: str, logs: Path, cache_bytes: str | None, sessions: int) -> dict[str, Any]:
    env = {"PAS_WORKERS": "1"}
    if cache_bytes is not None:
        for setting in ("PAS_SESSION_CACHE_BYTES", "PAS_HELD_FRAME_BYTES", "PAS_HELD_BODY_BYTES"):
            env[setting] = cache_bytes
    service = start_service(url, logs, env=env)
    try:
        rss = {"idle": round(service.rss_mib(), 1)}
        for name, shape in SHAPES.items():
            count = sessions // shape.share
            done = 0
            for upto in (count // 8, count // 4, count // 2, count):
                await _step_new_sessions(service.target, shape, upto - done)
                done = upto
                rss[f"{name}_{upto}"] = round(service.rss_mib(), 1)
        return rss
    finally:
        service.stop()


async def run(sessions: int) -> dict[str, Any]:
    with bench_database() as (url, where), tempfile.TemporaryDirectory() as logs:
        return {
            "postgres": where,
            "sessions_per_shape": sessions,
            "rss_mib_default_bound": await _measure(url, Path(logs), None, sessions),
            "rss_mib_cache_off": await _measure(url, Path(logs), "0", sessions),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=12_000)
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/cache_memory.json")
    args = parser.parse_args()
    results = asyncio.run(run(args.sessions))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    for name in ("rss_mib_default_bound", "rss_mib_cache_off"):
        print(name, results[name])  # noqa: T201


if __name__ == "__main__":
    main()
