"""Every format's body for a matrix of session shapes, checked by the providers' SDKs and rules.

The bodies are rendered by the domain (``render``), exactly as Admit, Reconcile and Inspect
render them; test_sessions.py drives the same shapes through the real server.
"""

from __future__ import annotations

import json

import pytest
from admission_service.domain.errors import WireFormatError
from admission_service.domain.wire import WireFormat, render

from tests.provider.oracles import check_body
from tests.provider.sessions import PROVIDERS, SESSIONS, TOOLS, Session

FORMATS = (WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES, WireFormat.ANTHROPIC_MESSAGES)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("wire", FORMATS, ids=str)
@pytest.mark.parametrize("session", SESSIONS, ids=str)
def test_every_body_is_one_the_provider_accepts(
    session: Session, wire: WireFormat, provider: str
) -> None:
    def rendered() -> str:
        return render(
            session.messages,
            wire,
            in_history=session.in_history,
            provider=provider,
            tools=TOOLS,
        )

    if session.images and provider == "deepseek" and wire is WireFormat.ANTHROPIC_MESSAGES:
        # Refused, naming the first image and the format, rather than sent and rejected.
        with pytest.raises(WireFormatError, match="takes no image blocks") as refused:
            rendered()
        assert refused.value.metadata["field"] == "messages[1].content[1]"
        return
    body = rendered()
    assert check_body(wire.value, body, provider=provider, in_history=session.in_history) == []
    assert json.loads(body)["tools"]


def test_the_oracles_catch_what_the_old_bodies_got_wrong() -> None:
    """Each defect of the bodies before provider-exact rendering is caught (the checks bite)."""
    cases = {
        # Two parallel results as two user messages.
        "anthropic_messages": {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "go"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "a", "name": "t", "input": {}},
                        {"type": "tool_use", "id": "b", "name": "t", "input": {}},
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b"}]},
                {"role": "assistant", "content": []},
                {"role": "user", "content": [{"type": "text", "text": ""}]},
            ]
        },
        # An output-message shape for history, an image without detail.
        "openai_responses": {
            "input": [
                {"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y"}]},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "hi"}],
                },
            ]
        },
        # reasoning_content on a route whose provider does not take it.
        "openai_chat": {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "x", "reasoning_content": "r"},
            ]
        },
    }
    for wire, body in cases.items():
        problems = check_body(wire, json.dumps(body), provider="openai", in_history=False)
        assert problems, wire
