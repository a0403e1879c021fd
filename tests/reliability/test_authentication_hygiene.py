"""Authentication hygiene with real processes and signals (issue 21, item 6), under the default
worker count.

Before: an empty ``PAS_AUTH_TOKENS_FILE`` at start turned authentication off with a warning,
tokens added to the file later were ignored, and without tokens SIGHUP killed the server (no
handler: its default action). Now the empty file stops ``serve`` (exit 2) unless
``PAS_ALLOW_UNAUTHENTICATED=true``; with it the server serves unauthenticated until a reload
finds tokens, then requires them; SIGHUP never stops a server.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from pathlib import Path

import grpc
import pytest
from admission_service.api.tenancy import hash_token
from promptadmission.v1 import admission_service_pb2 as api

from tests.api.support import rich_error

from .conftest import StartService
from .process import SERVICE_BIN, ServiceProcess, free_port
from .scenario import authorized_stub, plain_stub

pytestmark = pytest.mark.timeout(300)
TOKEN = f"hygiene-{uuid.uuid4().hex}"


async def create_session(service: ServiceProcess, token: str | None = None) -> None:
    if token is None:
        async with plain_stub(service.target) as stub:
            await stub.CreateSession(api.CreateSessionRequest(), timeout=30)
    else:
        async with authorized_stub(service.target, token) as stub:
            await stub.CreateSession(api.CreateSessionRequest(), timeout=30)


async def test_an_empty_tokens_file_stops_serve(fresh_database: str, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# no tokens yet\n")
    port = free_port()
    env = {
        "DATABASE_URL": fresh_database,
        "PAS_LISTEN": f"127.0.0.1:{port}",
        "PAS_AUTH_TOKENS_FILE": str(tokens),
        "PATH": "/usr/bin:/bin",
    }
    done = await asyncio.to_thread(
        subprocess.run, [str(SERVICE_BIN), "serve"], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 2, done.stderr.decode()
    assert b"PAS_AUTH_TOKENS_FILE" in done.stderr and b"holds no token" in done.stderr


async def test_tokens_added_to_a_file_empty_at_start_are_required_after_a_reload(
    fresh_database: str, services: StartService, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("")
    service = await services(
        fresh_database,
        migrate=True,
        env={
            "PAS_AUTH_TOKENS_FILE": str(tokens),
            "PAS_ALLOW_UNAUTHENTICATED": "true",
            "PAS_AUTH_TOKENS_WATCH_SECONDS": "0",  # only SIGHUP: the test decides when
        },
    )
    await create_session(service)  # unauthenticated while the file holds no token
    tokens.write_text(f"acme={hash_token(TOKEN)}\n")
    service.process.send_signal(signal.SIGHUP)  # type: ignore[union-attr]

    async def refused_without_token() -> bool:
        try:
            await create_session(service)
        except grpc.aio.AioRpcError as error:
            return rich_error(error).reason == "MISSING_CREDENTIALS"
        return False

    for _ in range(100):  # every worker reloads on the forwarded SIGHUP
        if all([await refused_without_token() for _ in range(6)]):
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the tokens added to the file were not required after SIGHUP")
    await create_session(service, TOKEN)
    assert service.running


async def test_sighup_never_stops_a_server_without_tokens(
    fresh_database: str, services: StartService
) -> None:
    service = await services(fresh_database, migrate=True)
    for _ in range(3):
        service.process.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        await asyncio.sleep(0.5)
    for _ in range(6):  # reaches every worker
        await create_session(service)
    assert service.running, service.log_tail()
