"""A million-token session's steps in each provider format, as a harness posting whole bodies
makes them: each step a FULL StreamAdmit (body only, the format's default) with the previous
step's answer and a new user message, so every body is the previous one and two more messages.

What held bodies (``PAS_HELD_BODY_BYTES``, app/held_bodies.py) change: with them, a step renders
and reads only the messages after the previous request; without (``PAS_HELD_BODY_BYTES=0``), it
renders all 4.6 MB again. Run it both ways to compare (the service inherits the environment):

    python -m bench.body_steps [--steps 40] [--out FILE]
    PAS_HELD_BODY_BYTES=0 python -m bench.body_steps

The sessions are bench.streamed_full's (tests/clients/large_sessions.py's "1M", one per route
family); the first two steps of each format are left out of its p50 (the first renders afresh).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

import grpc
from promptadmission.streaming import reassemble
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from bench.client import CHANNEL_OPTIONS
from bench.infra import ServerProcess, bench_database, print_report, start_service
from bench.streamed_full import grow_sessions, p50_ms
from tests.clients.large_sessions import FAMILY, TEXT_RESULTS, WIRE_NAMES, full_request

WARM_STEPS = 2


def step_request(request: api.AdmitRequest, admission_id: str, step: int) -> api.AdmitRequest:
    """``request`` (a FULL Admit of the session) as step ``step``: the previous admission's
    answer recorded with it, and a new user message."""
    request.request_id = str(uuid.uuid4())
    if admission_id:
        output = request.previous_output
        output.admission_id = admission_id
        output.assistant.role = pb.MESSAGE_ROLE_ASSISTANT
        output.assistant.content.add().text.text = f"Done with step {step}."
    user = request.users.add(role=pb.MESSAGE_ROLE_USER)
    user.content.add().text.text = f"Now step {step + 1}."
    return request


async def body_steps(service: ServerProcess, steps: int) -> dict[str, Any]:
    sessions = await asyncio.to_thread(grow_sessions, service.target, TEXT_RESULTS)
    formats: dict[str, Any] = {}
    async with grpc.aio.insecure_channel(service.target, options=CHANNEL_OPTIONS) as channel:
        admission = cast(
            "api_grpc.AdmissionServiceAsyncStub", api_grpc.AdmissionServiceStub(channel)
        )
        for wire, family in FAMILY.items():
            if wire == pb.WIRE_FORMAT_NEUTRAL:
                continue
            admission_id, times, body_bytes = "", [], 0
            for step in range(steps):
                request = step_request(
                    full_request(sessions[family], wire, 100 + step), admission_id, step
                )
                started = time.perf_counter()
                call = admission.StreamAdmit(api.StreamAdmitRequest(request=request))
                response = reassemble([chunk async for chunk in call], api.AdmitResponse)
                times.append(time.perf_counter() - started)
                assert response.request.view == pb.REQUEST_VIEW_FULL
                admission_id, body_bytes = response.admission_id, len(response.request.body_json)
            formats[WIRE_NAMES[wire]] = {
                "step_p50_ms": p50_ms(times[WARM_STEPS:]),
                "first_step_ms": round(times[0] * 1000, 2),
                "body_bytes": body_bytes,
                "steps": steps,
            }
    return {"formats": formats}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.body_steps")
    parser.add_argument("--steps", type=int, default=40, help="steps per provider format")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.steps <= WARM_STEPS:
        parser.error(f"--steps: more than {WARM_STEPS}")
    with bench_database() as (url, where), tempfile.TemporaryDirectory() as logs:
        service = start_service(url, Path(logs))
        try:
            result = asyncio.run(body_steps(service, args.steps))
        finally:
            service.stop()
    print_report({"server": where, **result}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
