"""Scenario 7, hostile input, on the inspector's HTTP surface (issue 21 item 8).

Structure-aware fuzzing (``fuzz.inspector_requests``) of whole HTTP/1.1 requests to the
inspector of a real ``serve`` (default worker count, the inspector in its own process): paths
near the real ones with real and hostile session ids, ``?page=`` and other query keys with real
page tokens of other lists and sessions, forged and huge ones, any method, a served or foreign
``Host``, valid, hostile or missing credentials, announced bodies. Every answer is a 2xx or a
4xx, never a 5xx, never a connection closed without an answer; a page carries no script; the
inspector's process and the API keep serving throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from admission_service.api.tenancy import hash_token
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from promptadmission.v1 import admission_service_pb2 as api

from tests.api.support import admit_request

from .conftest import StartService
from .fuzz import Pools, inspector_requests
from .process import free_port
from .profile import Profile
from .scenario import authorized_stub

pytestmark = pytest.mark.slow
TOKEN = f"inspector-fuzz-{uuid.uuid4().hex}"
STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) ")
INSPECTOR_LINE = re.compile(rb"inspector \(pid (\d+)\) serving")
# aiohttp refuses a request line or a header field longer than 8 190 bytes.
LARGEST_HEAD = 8190


def answer(port: int, request: bytes, *, timeout: float = 15) -> tuple[int | None, bytes]:
    """The status and body of the inspector's final answer to ``request`` (a ``100
    Continue`` skipped), read by its Content-Length; None when it closed without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        # Refused while it was still arriving (a request line past the limit): read why.
        with contextlib.suppress(OSError):
            sock.sendall(request)
        data = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while (found := STATUS_LINE.match(data)) and found.group(1) == b"100":
                data = data.partition(b"\r\n\r\n")[2]  # an interim answer
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep and (found := STATUS_LINE.match(head)):
                length = re.search(rb"(?im)^content-length: *(\d+)", head)
                head_only = request.startswith(b"HEAD ")
                if head_only or length is None or len(body) >= int(length.group(1)):
                    return int(found.group(1)), body
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                break
            data += chunk
        found = STATUS_LINE.match(data)
        return (int(found.group(1)) if found else None), data.partition(b"\r\n\r\n")[2]


async def seed_pools(target: str) -> Pools:
    """Sessions with a few steps, and page tokens of every list the inspector pages."""
    pools = Pools()
    async with authorized_stub(target, TOKEN) as stub:
        for _ in range(3):
            session_id = f"inspector-fuzz-{uuid.uuid4().hex[:10]}"
            await stub.CreateSession(api.CreateSessionRequest(session_id=session_id), timeout=10)
            for step in range(1, 4):
                await stub.Admit(
                    admit_request(session_id, f"Prompt {step}.", f"q{step}", turn=1, step=step),
                    timeout=10,
                )
            pools.add("session_id", session_id)
            events = await stub.ListEvents(
                api.ListEventsRequest(session_id=session_id, page_size=1), timeout=10
            )
            trajectory = await stub.ListTrajectory(
                api.ListTrajectoryRequest(session_id=session_id, page_size=1), timeout=10
            )
            pools.add("page_token", events.next_page_token, trajectory.next_page_token)
        sessions = await stub.ListSessions(api.ListSessionsRequest(page_size=1), timeout=10)
        pools.add("page_token", sessions.next_page_token)
    return pools


async def test_fuzzed_inspector_requests_get_no_5xx(
    fresh_database: str, services: StartService, profile: Profile, seed: int
) -> None:
    port = free_port()
    service = await services(
        fresh_database,
        env={
            "PAS_AUTH_TOKENS": f"default={hash_token(TOKEN)}",
            "PAS_INSPECTOR_LISTEN": f"127.0.0.1:{port}",
            "PAS_LOG_LEVEL": "INFO",
        },
    )
    deadline = time.monotonic() + 60
    while (started := INSPECTOR_LINE.search(Path(service.log_path).read_bytes())) is None:
        assert time.monotonic() < deadline, "the inspector did not start"
        await asyncio.sleep(0.1)  # polling: another process's log
    inspector_pid = int(started.group(1))
    pools = await seed_pools(service.target)
    statuses = Counter[int | None]()
    failures: list[tuple[bytes, int | None]] = []

    @hypothesis_seed(seed)
    @settings(
        max_examples=profile.fuzz_examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(inspector_requests(pools, TOKEN, port))
    def one(request: bytes) -> None:
        status, body = answer(port, request)
        statuses[status] += 1
        oversized = len(request.partition(b"\r\n\r\n")[0]) > LARGEST_HEAD
        if status is None and oversized:
            return  # reset before its answer could be read: refused all the same
        if status is None or status >= 500 or (status == 200 and b"<script" in body):
            failures.append((request[:300], status))

    await asyncio.to_thread(one)
    assert not failures, failures[:5]
    assert Path(f"/proc/{inspector_pid}").exists(), "the inspector's process is gone"
    status, page = await asyncio.to_thread(
        answer,
        port,
        f"GET / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode(),
    )
    assert status == 200 and pools.by_field["session_id"][0].encode() in page
    async with authorized_stub(service.target, TOKEN) as stub:
        await stub.GetSession(
            api.GetSessionRequest(session_id=pools.by_field["session_id"][0]), timeout=10
        )
    print(f"inspector fuzz: {dict(statuses)}")  # noqa: T201 (what the run covered)
