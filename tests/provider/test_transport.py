"""A body posted through each official SDK arrives at the provider unchanged.

Each format's body is passed to the SDK call it is made for, field by field (the harness adds
only the model and sampling fields), and a local server records what the SDK sends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from admission_service.domain.wire import WireFormat, render

from tests.provider.recording import Recorder, recording_server
from tests.provider.sessions import SESSIONS, TOOLS, Session


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    with recording_server() as server:
        yield server


def _body(session: Session, wire: WireFormat, provider: str) -> dict[str, Any]:
    rendered = render(
        session.messages, wire, in_history=session.in_history, provider=provider, tools=TOOLS
    )
    return json.loads(rendered)  # type: ignore[no-any-return]


def _sent(recorder: Recorder, path: str) -> dict[str, Any]:
    sent_path, sent = recorder.bodies[-1]
    assert sent_path == path
    return sent  # type: ignore[no-any-return]


@pytest.mark.parametrize("session", SESSIONS, ids=str)
def test_openai_chat_body_arrives_unchanged(recorder: Recorder, session: Session) -> None:
    client = openai.OpenAI(api_key="test", base_url=f"{recorder.base_url}/v1", max_retries=0)
    body = _body(session, WireFormat.OPENAI_CHAT, "deepseek")
    client.chat.completions.create(model="m", **body)
    assert _sent(recorder, "/v1/chat/completions") == {"model": "m", **body}


@pytest.mark.parametrize("session", SESSIONS, ids=str)
def test_openai_responses_body_arrives_unchanged(recorder: Recorder, session: Session) -> None:
    client = openai.OpenAI(api_key="test", base_url=f"{recorder.base_url}/v1", max_retries=0)
    body = _body(session, WireFormat.OPENAI_RESPONSES, "openai")
    client.responses.create(model="m", **body)
    assert _sent(recorder, "/v1/responses") == {"model": "m", **body}


@pytest.mark.parametrize("session", SESSIONS, ids=str)
def test_anthropic_messages_body_arrives_unchanged(recorder: Recorder, session: Session) -> None:
    client = anthropic.Anthropic(api_key="test", base_url=recorder.base_url, max_retries=0)
    body = _body(session, WireFormat.ANTHROPIC_MESSAGES, "anthropic")
    client.messages.create(model="m", max_tokens=16, **body)
    assert _sent(recorder, "/v1/messages") == {"model": "m", "max_tokens": 16, **body}
