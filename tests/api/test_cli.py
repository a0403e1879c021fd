"""The ``admission-service`` command against a real server and database: ``inspect``, ``migrate``,
``health``, and the errors they report (without either: ``tests/unit/test_cli.py``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from admission_service.api.tenancy import hash_token
from admission_service.cli import main
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb
from sqlalchemy import create_engine, inspect, pool

from tests.api.support import ApiClient, StartApi, admit_request, create_session

LONG_PROMPT = "You are a careful assistant.\n" + "x" * 200


async def small_session(client: ApiClient) -> str:
    stub = client.stub
    session_id = await create_session(stub)
    tools = [pb.Tool(name="read", parameters_json="{}")]
    first = await stub.Admit(
        admit_request(session_id, LONG_PROMPT, "hello there", turn=1, tools=tools)
    )
    await stub.Record(
        api.RecordRequest(
            session_id=session_id,
            admission_id=first.admission_id,
            assistant=pb.Message(
                role=pb.MESSAGE_ROLE_ASSISTANT,
                content=[pb.ContentBlock(text=pb.TextBlock(text="hi!"))],
            ),
            usage=pb.Usage(input_tokens=50, output_tokens=3, cache_read_tokens=7),
        )
    )
    await stub.Admit(admit_request(session_id, "Plan mode.", "go on", turn=2, tools=tools))
    return session_id


async def run_cli(*args: str) -> int:
    # The server runs on this event loop; the CLI's blocking channel must not.
    return await asyncio.to_thread(main, list(args))


async def test_inspect_prints_the_session(
    api: ApiClient, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = await small_session(api)

    assert await run_cli("inspect", session_id, "--target", api.server.target) == 0

    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"session {session_id}"
    assert "revision 3, 7 events, replace generation 0" in lines[1]
    # The effective prompt lives in history, after the head.
    assert "effective prompt: seq 5, in-history, 10 chars" in out
    assert '"Plan mode."' in out
    # Each surviving system node, its turn/step and update flag, its text truncated.
    header = lines.index("system nodes (2):")
    node_lines = lines[header + 2 : header + 4]
    assert "1/0" in node_lines[0] and " - " in node_lines[0]
    assert '"You are a careful assistant.\\nxxx' in node_lines[0]
    assert "…" in node_lines[0]
    assert "2/0" in node_lines[1] and "update" in node_lines[1]
    assert "tokens: system " in out and ", total " in out
    assert "series: replace generation 0, at last request 0" in out
    assert "last header: seq 2 (initial): deepseek/deepseek-flash, 1 tools (read)" in out
    assert "system prompt update in-history" in out
    assert "cache ledger (last 2 of 2):" in out
    assert "first_request" in out
    # The derived request, one line per message.
    assert "derived request (5 messages, 1 tools, neutral):" in out
    assert '  [1] user       "hello there"' in out
    assert '  [2] assistant  "hi!"' in out
    assert '  [3] system     "Plan mode."' in out
    assert '  [4] user       "go on"' in out


async def test_inspect_trajectory_prints_each_request_with_its_prompt_and_change(
    api: ApiClient, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = await small_session(api)
    await api.stub.Admit(
        admit_request(
            session_id,
            "Plan mode, step 2.",
            "more",
            turn=3,
            tools=[pb.Tool(name="read", parameters_json="{}")],
            config={"temperature": "0.2"},
        )
    )
    target = api.server.target

    assert await run_cli("inspect", session_id, "--target", target, "--trajectory") == 0

    out = capsys.readouterr().out
    blocks = out.split("\n\n")
    assert blocks[0] == f"trajectory of session {session_id}"
    assert blocks[-1] == "(3 requests)\n"
    first, second, third = blocks[1:-1]
    assert "request 0: admission" in first and "attempt 0, saw events 0..3" in first
    assert "header  seq 2 (initial): deepseek/deepseek-flash, tools: read; config: none" in first
    assert '  prompt  seq 0: "You are a careful assistant.\\nxxx' in first
    assert "  change  initial (seq 0)" in first
    assert "observed input 50, cache read 7, output 3" in first
    # The in-history update: a synthetic header and B's previous prompt is A.
    assert "(synthetic: in-history prompt update)" in second
    assert '  prompt  seq 5, in-history update: "Plan mode."' in second
    assert '  change  system (seq 5); previous prompt "You are a careful' in second
    assert "observed not recorded" in second
    # The third step changes the prompt again and the config: a synthetic update and then a
    # real change header (no system change of its own); the previous prompt is the second's.
    assert "header  seq" in third and "(change): deepseek/deepseek-flash" in third
    assert "config: temperature=0.2" in third
    assert "logged  seq" in third and "(synthetic: in-history prompt update)" in third
    assert "  change  system (seq" in third and 'previous prompt "Plan mode."' in third


async def test_inspect_with_a_wire_format_prints_the_body(
    api: ApiClient, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = await small_session(api)
    target = api.server.target
    assert await run_cli("inspect", session_id, "--target", target, "--wire", "openai_chat") == 0
    out = capsys.readouterr().out
    assert "openai_chat body:" in out
    assert '"role": "system"' in out


async def test_inspect_of_an_unknown_session_fails(
    api: ApiClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run_cli("inspect", "no-such-session", "--target", api.server.target) == 1
    err = capsys.readouterr().err
    assert "NOT_FOUND" in err and "SESSION_NOT_FOUND" in err


async def test_inspect_without_a_server_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code = await run_cli("inspect", "s", "--target", "127.0.0.1:9", "--timeout", "2")
    assert code == 1
    assert "UNAVAILABLE" in capsys.readouterr().err


def test_migrate_creates_the_schema(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", empty_database_url)
    assert main(["migrate"]) == 0
    assert "latest migration" in capsys.readouterr().out
    engine = create_engine(empty_database_url, poolclass=pool.NullPool)
    try:
        assert "alembic_version" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


# ---- the image's environment: a network PAS_LISTEN and no tokens ---------------------------
# Only `serve` listens, so only `serve` requires tokens on a non-loopback address; the other
# commands run with the environment of the image (PAS_LISTEN=0.0.0.0:…) as they are.

NETWORK_LISTEN = "0.0.0.0:50051"


def test_migrate_runs_with_a_network_listener_and_no_tokens(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAS_LISTEN", NETWORK_LISTEN)
    monkeypatch.delenv("PAS_AUTH_TOKENS", raising=False)
    monkeypatch.setenv("DATABASE_URL", empty_database_url)
    assert main(["migrate"]) == 0
    assert "latest migration" in capsys.readouterr().out


async def test_health_and_inspect_run_with_a_network_listener_and_no_tokens(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As in the container: PAS_LISTEN names the wildcard address, the CLI dials loopback.
    monkeypatch.setenv("PAS_LISTEN", f"0.0.0.0:{api.server.port}")
    monkeypatch.delenv("PAS_AUTH_TOKENS", raising=False)
    assert await run_cli("health") == 0
    assert "SERVING" in capsys.readouterr().out
    session_id = await small_session(api)
    assert await run_cli("inspect", session_id) == 0
    assert f"session {session_id}" in capsys.readouterr().out


def test_an_unreachable_database_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody:s3cret@127.0.0.1:9/none")
    assert main(["migrate"]) == 1
    err = capsys.readouterr().err
    assert "database unavailable" in err
    assert "s3cret" not in err and "Traceback" not in err


# ---- health, token, and inspect with a token ----------------------------------------------


async def test_health_exits_0_while_serving(
    api: ApiClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run_cli("health", "--target", api.server.target) == 0
    assert "SERVING" in capsys.readouterr().out
    service = "promptadmission.v1.AdmissionService"
    assert await run_cli("health", "--target", api.server.target, "--service", service) == 0


async def test_health_exits_1_when_not_serving(
    start_api: StartApi, capsys: pytest.CaptureFixture[str]
) -> None:
    client = await start_api()
    await client.server.health.enter_graceful_shutdown()
    assert await run_cli("health", "--target", client.server.target) == 1
    assert "NOT_SERVING" in capsys.readouterr().out
    assert await run_cli("health", "--target", "127.0.0.1:9", "--timeout", "1") == 1
    assert "health check failed: UNAVAILABLE" in capsys.readouterr().err


async def test_inspect_sends_a_bearer_token(
    start_api: StartApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = await start_api(token_tenants={hash_token("op-token"): "ops"})
    target = client.server.target
    assert await run_cli("inspect", "s", "--target", target) == 1
    assert "UNAUTHENTICATED" in capsys.readouterr().err
    assert await run_cli("inspect", "s", "--target", target, "--token", "op-token") == 1
    assert "SESSION_NOT_FOUND" in capsys.readouterr().err  # authenticated, as tenant ops
    monkeypatch.setenv("PAS_TOKEN", "op-token")
    assert await asyncio.to_thread(main, ["inspect", "s", "--target", target]) == 1
    assert "SESSION_NOT_FOUND" in capsys.readouterr().err


def test_health_starts_without_the_database_stack() -> None:
    # A container health check runs every few seconds: it must not import SQLAlchemy/Alembic.
    code = (
        "import sys; from admission_service.cli import main; "
        "main(['health', '--target', '127.0.0.1:9', '--timeout', '0.2']); "
        "heavy = sorted(m for m in ('sqlalchemy', 'alembic', 'psycopg') if m in sys.modules); "
        "print(heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
