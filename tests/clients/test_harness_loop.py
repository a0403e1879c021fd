"""An agent loop end to end with the kit, per provider and wire format: admit → post the body
through the official SDK (async client) to a local provider stand-in that answers recorded
responses (tool calls, thinking/reasoning, cache usage) → observe → tool results → next admit,
over three turns with a prompt change and a compaction, against the real server.

After every step the body the SDK posted must pass the SDK param types and the acceptance rules
of docs/WIRE_FORMATS.md (tests/provider/oracles.py) and equal the FULL body Inspect renders: the
kit rebuilt it from DELTA answers. The provider's ids, signatures and reasoning come back in the
next request, the usage lands in the ledger, and a lost Admit is retried under the same
request_id without admitting twice.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from promptadmission import AdmissionClient
from promptadmission.kit import HarnessSession, tool
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from examples import harness_loop
from tests import harness_fixtures as fx
from tests.provider.oracles import check_body
from tests.provider.recording import ProviderServer, provider_server

Json = dict[str, Any]
TOOLS = [
    tool(
        "read_file",
        "Read a file",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
]
PROMPT = "You are a careful coding agent."
PLAN_PROMPT = "You are a careful coding agent.\nPLAN MODE: propose, do not edit."


@dataclass(frozen=True)
class Provider:
    name: str
    wire: str
    route: pb.Route
    post: Callable[[ProviderServer, Json], Awaitable[Any]]  # the SDK call with the kit's body

    def __str__(self) -> str:
        return f"{self.name}-{self.wire}"


# ---- the SDK calls ----------------------------------------------------------------------------


async def post_chat(server: ProviderServer, body: Json) -> Any:
    client = openai.AsyncOpenAI(api_key="test", base_url=f"{server.base_url}/v1", max_retries=0)
    return await client.chat.completions.create(model="m", temperature=0, **body)


async def post_responses(server: ProviderServer, body: Json) -> Any:
    client = openai.AsyncOpenAI(api_key="test", base_url=f"{server.base_url}/v1", max_retries=0)
    return await client.responses.create(model="m", **body)


async def post_anthropic(server: ProviderServer, body: Json) -> Any:
    client = anthropic.AsyncAnthropic(api_key="test", base_url=server.base_url, max_retries=0)
    return await client.messages.create(model="m", max_tokens=1024, **body)


PROVIDERS = [
    Provider(
        "openai",
        "openai_chat",
        pb.Route(provider="openai", model="gpt-5.1"),
        post_chat,
    ),
    Provider(
        "deepseek",
        "openai_chat",
        pb.Route(provider="deepseek", model="deepseek-flash"),
        post_chat,
    ),
    Provider(
        "openai",
        "openai_responses",
        pb.Route(
            provider="openai",
            model="gpt-5.1",
            system_prompt_update=pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY,
        ),
        post_responses,
    ),
    Provider(
        "anthropic",
        "anthropic_messages",
        pb.Route(provider="anthropic", model="claude-sonnet-4-5"),
        post_anthropic,
    ),
]
WIRE = {
    "openai_chat": pb.WIRE_FORMAT_OPENAI_CHAT,
    "openai_responses": pb.WIRE_FORMAT_OPENAI_RESPONSES,
    "anthropic_messages": pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
}


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with provider_server() as running:
        yield running


class Checked:
    """Each body the SDK posted, checked against the oracles and Inspect's FULL body."""

    def __init__(
        self, provider: Provider, client: AdmissionClient, session: HarnessSession
    ) -> None:
        self.provider, self.client, self.session = provider, client, session
        self.views: list[int] = []

    async def step(self, server: ProviderServer, body: Json) -> Any:
        assert self.session.last is not None
        self.views.append(self.session.last.request.view)
        response = await self.provider.post(server, body)
        path, posted = server.requests[-1]
        conversation = {key: posted[key] for key in body}
        assert conversation == body, f"the SDK changed the body it posted to {path}"
        in_history = self.session.last.system_prompt_update == pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY
        problems = check_body(
            self.provider.wire, json.dumps(body), provider=self.provider.name, in_history=in_history
        )
        assert problems == []
        full = await self.client.inspect(
            api.InspectRequest(
                session_id=self.session.session_id, wire_format=WIRE[self.provider.wire]
            )
        )
        rebuilt = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        assert rebuilt == full.request.body_json, "the rebuilt body is not the FULL body"
        return response


async def run_tools(session: HarnessSession, response: Any) -> bool:
    """Observes the response and answers its calls (b.py fails); whether it made calls."""
    output = session.observe(response)
    for call in output.tool_calls:
        path = json.loads(call.arguments_json)["path"]
        if path == "b.py":
            session.tool_result(call, FileNotFoundError(path))
        else:
            session.tool_result(call, {"path": path, "text": f"print('{path}')", "lines": 1})
    return bool(output.tool_calls)


async def summarize(plan: api.PlanCompactionResponse) -> str:
    assert plan.summarization_input
    return "Summary: read main.py, planned to merge a.py and b.py."


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
async def test_a_tool_using_loop_over_three_turns_with_a_prompt_change_and_a_compaction(
    provider: Provider, server_target: str, server: ProviderServer
) -> None:
    server.answer(*fx.LOOPS[str(provider)])
    async with AdmissionClient(server_target) as client:
        session = await HarnessSession.open(client, provider.route, WIRE[provider.wire])
        checked = Checked(provider, client, session)
        async with session:
            turns = [(PROMPT, "Read main.py."), (PLAN_PROMPT, "Plan the merge of a.py and b.py.")]
            for prompt, user in turns:
                users = [user]
                while True:  # the harness's step: five lines
                    body = await session.admit(prompt, users, TOOLS, {"temperature": 0})
                    users = []
                    if not await run_tools(session, await checked.step(server, body)):
                        break
            await session.compact(summarize, retain_tokens=0)
            body = await session.admit(PLAN_PROMPT, ["What is left?"], TOOLS, {"temperature": 0})
            session.observe(await checked.step(server, body))
        assert (session.turn, session.step) == (3, 1)

        inspected = await client.inspect(api.InspectRequest(session_id=session.session_id))
    messages = inspected.request.messages
    assert messages[-1].content[-1].text.text == "Nothing is left."  # recorded on close
    observed = [entry.observed for entry in inspected.ledger if entry.HasField("observed")]
    assert len(observed) == 5
    assert all(usage.cache_read_tokens > 0 for usage in observed)
    assert pb.REQUEST_VIEW_DELTA in checked.views  # the kit rebuilt DELTA answers
    # What the provider produced came back: every call id, and (where the format sends it back)
    # the signed thinking and DeepSeek's reasoning.
    posted = json.dumps([body for _, body in server.requests])
    for call_id in ("call_1", "call_2", "call_3") if provider.name != "anthropic" else ("toolu_1",):
        assert call_id in posted
    if provider.name == "anthropic":
        assert fx.LOOP_SIGNATURE in json.dumps(server.requests[1][1]["messages"])
    if provider.name == "deepseek":
        assert '"reasoning_content": "Need the file."' in posted


class LosesFirstAdmitAnswer(AdmissionClient):
    """The first Admit commits, then its answer is lost (after the client's own retries)."""

    lost = False

    async def admit(self, request: api.AdmitRequest) -> Any:  # type: ignore[override]
        response = await AdmissionClient.admit.__get__(self, AdmissionClient)(request)
        if not self.lost:
            self.lost = True
            raise ConnectionError("the answer was lost")
        return response


async def test_an_admit_whose_answer_was_lost_is_retried_under_the_same_request_id(
    server_target: str,
) -> None:
    async with LosesFirstAdmitAnswer(server_target) as client:
        route = pb.Route(provider="deepseek", model="deepseek-flash")
        session = await HarnessSession.open(client, route, pb.WIRE_FORMAT_OPENAI_CHAT)
        with pytest.raises(ConnectionError):
            await session.admit(PROMPT, ["Hello"])
        body = await session.admit(PROMPT, ["Hello"])  # the same step again
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
        # A provider failure: the step again on a fallback route (Reconcile), the same body.
        fallback = pb.Route(provider="deepseek", model="deepseek-pro")
        assert await session.retry(fallback) == body
        assert isinstance(session.last, api.ReconcileResponse) and session.last.attempt == 1
        events = await client.all_events(session.session_id)
    users = [event for event in events if event.kind == pb.EVENT_KIND_USER_MESSAGE]
    assert len(users) == 1, "the retry admitted the step twice"
    assert (session.turn, session.step) == (1, 1)


async def test_a_step_too_large_for_one_message_is_streamed(server_target: str) -> None:
    """Five 1 MB files as a step's users, on an Anthropic body (always whole): the unary Admit
    is refused RESPONSE_TOO_LARGE (committing nothing) and the kit makes it again as
    StreamAdmit, the same request_id; its retry (Reconcile) likewise. Issue 23 item 2."""
    files = [chr(97 + n) * 1_000_000 for n in range(5)]
    async with AdmissionClient(server_target, timeout=120) as client:
        route = pb.Route(provider="other", model="big-context")
        session = await HarnessSession.open(client, route, pb.WIRE_FORMAT_ANTHROPIC_MESSAGES)
        body = await session.admit(PROMPT, files)
        assert body["system"] == PROMPT
        assert [block["text"] for block in body["messages"][0]["content"]] == files
        assert isinstance(session.last, api.AdmitResponse)
        assert session.last.request.content == pb.REQUEST_CONTENT_BODY
        assert not session.last.request.messages  # the conversation once, as the body
        assert await session.retry() == body
        events = await client.all_events(session.session_id)
    assert sum(event.kind == pb.EVENT_KIND_USER_MESSAGE for event in events) == 5


@pytest.mark.parametrize("option", ["openai", "openai-responses", "deepseek", "anthropic"])
async def test_the_example_runs_on_the_recorded_replies(
    option: str, server_target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(
        provider=option,
        base_url="",
        api_key="recorded",
        model="",
        target=server_target,
        token=None,
        questions=["Read main.py and explain it.", "Plan the merge of a.py and b.py."],
    )
    with harness_loop.provider(args) as base_url:
        await harness_loop.run(args, base_url)
    printed = capsys.readouterr().out
    assert "[turn 2] Plan the merge" in printed and "2 turns, recorded" in printed
