"""The ``admission-service`` command without a server or a database: usage, configuration errors,
``token``, ``serve``'s refusal of an unauthenticated network listener, ``inspect``'s
formatting. The commands against a real server and database: ``tests/api/test_cli.py``."""

from __future__ import annotations

import io

import pytest
from admission_service.api.tenancy import hash_token
from admission_service.cli import format_inspect, main
from admission_service.config import Settings
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb


def test_an_empty_session_formats() -> None:
    response = api.InspectResponse(
        session=pb.Session(session_id="s"),
        effective_prompt=pb.EffectivePrompt(location=pb.PROMPT_LOCATION_NONE),
        request=pb.DerivedRequest(wire_format=pb.WIRE_FORMAT_NEUTRAL),
    )
    out = format_inspect(response)
    assert "effective prompt: none" in out
    assert "system nodes (0):" in out
    assert "last header: none" in out


NETWORK_LISTEN = "0.0.0.0:50051"


def test_serve_refuses_a_network_listener_without_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAS_LISTEN", NETWORK_LISTEN)
    monkeypatch.delenv("PAS_AUTH_TOKENS", raising=False)
    assert main(["serve"]) == 2
    assert "PAS_ALLOW_UNAUTHENTICATED" in capsys.readouterr().err


def test_token_runs_with_a_network_listener_and_no_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAS_LISTEN", NETWORK_LISTEN)
    monkeypatch.delenv("PAS_AUTH_TOKENS", raising=False)
    assert main(["token", "acme"]) == 0
    assert "PAS_AUTH_TOKENS entry: acme=sha256:" in capsys.readouterr().out


def test_a_configuration_error_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAS_DB_POOL_SIZE", "many")
    assert main(["migrate"]) == 2
    assert "PAS_DB_POOL_SIZE" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["inspect"])
    assert caught.value.code == 2


def test_token_prints_a_new_token_and_only_its_hash_for_the_configuration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["token", "acme"]) == 0
    token_line, entry_line = capsys.readouterr().out.splitlines()
    token = token_line.removeprefix("token: ")
    entry = entry_line.removeprefix("PAS_AUTH_TOKENS entry: ")
    assert len(token) >= 43 and token not in entry
    assert entry == f"acme={hash_token(token)}"
    assert Settings.from_env({"PAS_AUTH_TOKENS": entry}).token_tenants == {
        hash_token(token): "acme"
    }


def test_token_hashes_a_given_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("my-existing-token\n"))
    assert main(["token", "acme", "--stdin"]) == 0
    assert capsys.readouterr().out == f"acme={hash_token('my-existing-token')}\n"
    assert main(["token", "not a tenant"]) == 2
