"""DELTA for Anthropic Messages bodies (issue 23, item 3), through the real server.

The caller holds the previous body, the service sends what changed, and the Python kit rebuilds
the whole body to post: after the model's answer only the new items travel (a 1 MiB file read in
an earlier step is not sent again); user content admitted after a held user turn merges into it,
so that turn is sent again (``replaced_body_items``), with the system update that follows it.
Each rebuilt body is, byte for byte, the FULL body the service renders.
"""

from __future__ import annotations

import json
from typing import Any

from anthropic.types import Message
from promptadmission import AdmissionClient
from promptadmission.kit import HarnessSession, tool
from promptadmission.v1 import admission_service_pb2 as rpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import ApiClient, user

ROUTE = pb.Route(
    provider="anthropic",
    model="claude-test",
    context_window=1_000_000,
    system_prompt_update=pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY,
)
PROMPT = "You are a careful coding agent."
PLAN_PROMPT = PROMPT + "\nPLAN MODE: propose, do not edit."
TOOLS = [tool("read_file", "Read a file", {"type": "object", "properties": {}})]
FILE = "x" * (1 << 20)


def answer(number: int, *content: dict[str, Any]) -> Message:
    return Message.model_validate(
        {
            "id": f"msg_{number}",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": list(content),
            "stop_reason": "tool_use" if content[-1]["type"] == "tool_use" else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 10},
        }
    )


class Steps:
    def __init__(self, client: AdmissionClient, session: HarnessSession) -> None:
        self.client, self.session = client, session

    async def admit(self, prompt: str, *users: str) -> tuple[pb.DerivedRequest, dict[str, Any]]:
        """Admits a step; the response's derived request and its body, after checking that
        the body the kit rebuilt is the FULL body byte for byte."""
        body = await self.session.admit(prompt, users, TOOLS)
        full = await self.client.inspect(
            rpc.InspectRequest(
                session_id=self.session.session_id,
                wire_format=pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
            )
        )
        assert full.request.view == pb.REQUEST_VIEW_FULL
        rebuilt = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        assert rebuilt == full.request.body_json
        assert self.session.last is not None
        request = self.session.last.request
        return request, json.loads(request.body_json)


async def test_an_anthropic_delta_carries_only_what_changed(api: ApiClient) -> None:
    async with AdmissionClient(api.server.target) as client:
        session = await HarnessSession.open(client, ROUTE, pb.WIRE_FORMAT_ANTHROPIC_MESSAGES)
        steps = Steps(client, session)
        async with session:
            request, body = await steps.admit(PROMPT, "Read main.py.")
            assert request.view == pb.REQUEST_VIEW_FULL and body["system"] == PROMPT

            # The model reads a 1 MiB file: the next step's DELTA carries the call and its
            # result, once.
            call = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}
            output = session.observe(answer(1, call))
            session.tool_result(output.tool_calls[0], FILE)
            request, body = await steps.admit(PROMPT)
            assert request.view == pb.REQUEST_VIEW_DELTA
            assert request.first_message_index == 2 and request.replaced_body_items == 0
            assert [m["role"] for m in body["messages"]] == ["assistant", "user"]
            assert "system" not in body  # the held body's
            assert FILE in request.body_json

            # Its answer, a prompt change in the history and a user: only those, the file not
            # again.
            session.observe(answer(2, {"type": "text", "text": "main.py starts the server."}))
            request, body = await steps.admit(PLAN_PROMPT, "Plan the merge.")
            assert request.view == pb.REQUEST_VIEW_DELTA and request.replaced_body_items == 0
            assert [m["role"] for m in body["messages"]] == ["assistant", "user", "system"]
            assert len(request.body_json) < 1000

            # Admitted again before the model answers: the user joins the held user turn,
            # before the update that trails it, so both are sent again in place of the held.
            request, body = await steps.admit(PLAN_PROMPT, "Keep b.py.")
            assert request.view == pb.REQUEST_VIEW_DELTA and request.replaced_body_items == 2
            assert body["messages"] == [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Plan the merge."},
                        {"type": "text", "text": "Keep b.py."},
                    ],
                },
                {"role": "system", "content": [{"type": "text", "text": PLAN_PROMPT}]},
            ]
            session.observe(answer(3, {"type": "text", "text": "1. merge 2. test"}))


def step(session_id: str, number: int, text: str, held: pb.HeldPrefix | None) -> rpc.AdmitRequest:
    request = rpc.AdmitRequest(
        session_id=session_id,
        turn=1,
        step=number,
        rendered_prompt=PROMPT,
        route=ROUTE,
        wire_format=pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
        users=[user(text)],
    )
    if held is not None:
        request.view = pb.REQUEST_VIEW_DELTA
        request.held_prefix.CopyFrom(held)
    return request


async def test_a_caller_that_does_not_say_its_body_length_gets_full(api: ApiClient) -> None:
    """An older client names the held messages only: its Anthropic bodies stay FULL."""
    async with AdmissionClient(api.server.target) as client:
        session_id = (await client.create_session()).session.session_id
        first = (await client.admit(step(session_id, 1, "hi", None))).request
        held = pb.HeldPrefix(message_count=first.total_messages, digest=first.digest)
        second = (await client.admit(step(session_id, 2, "more", held))).request
        assert second.view == pb.REQUEST_VIEW_FULL and second.replaced_body_items == 0
        # Saying it: a DELTA, the held user turn sent again with the new user in it.
        held = pb.HeldPrefix(
            message_count=second.total_messages,
            digest=second.digest,
            body_items=len(json.loads(second.body_json)["messages"]),
        )
        third = (await client.admit(step(session_id, 3, "again", held))).request
        assert third.view == pb.REQUEST_VIEW_DELTA and third.replaced_body_items == 1
        texts = [part["text"] for part in json.loads(third.body_json)["messages"][0]["content"]]
        assert texts == ["hi", "more", "again"]
