"""A tool-using agent loop with the harness kit (README "Adopting it in a harness").

Run it against a running service (``make run`` in another terminal):

    .venv/bin/python -m examples.harness_loop --provider anthropic            # recorded replies
    .venv/bin/python -m examples.harness_loop --provider deepseek \\
        --base-url https://api.deepseek.com --api-key "$DEEPSEEK_API_KEY" --model deepseek-chat

Without ``--base-url`` the official SDK posts to a local stand-in that answers the recorded
responses of ``tests/fixtures/harness/loops/`` (so it runs offline); with it, to the real
provider. Providers: ``openai`` (Chat Completions), ``openai-responses``, ``deepseek`` (Chat
Completions with reasoning), ``anthropic`` (Messages). The one tool reads files below the
current directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
from promptadmission import AdmissionClient
from promptadmission.kit import HarnessSession, tool
from promptadmission.v1 import session_pb2 as pb

from tests import harness_fixtures
from tests.provider.recording import provider_server

PROMPT = "You are a careful coding agent. Use read_file to look at files before answering."
TOOLS = [
    tool(
        "read_file",
        "Read a text file below the current directory",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
]
Post = Callable[[dict[str, Any]], Awaitable[Any]]
# provider option: (route provider, wire format, default model, recorded loop)
PROVIDERS = {
    "openai": ("openai", pb.WIRE_FORMAT_OPENAI_CHAT, "gpt-5.1", "openai-openai_chat"),
    "openai-responses": (
        "openai",
        pb.WIRE_FORMAT_OPENAI_RESPONSES,
        "gpt-5.1",
        "openai-openai_responses",
    ),
    "deepseek": ("deepseek", pb.WIRE_FORMAT_OPENAI_CHAT, "deepseek-chat", "deepseek-openai_chat"),
    "anthropic": (
        "anthropic",
        pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
        "claude-sonnet-4-5",
        "anthropic-anthropic_messages",
    ),
}


def read_file(path: str) -> str:
    target = Path(path).resolve()
    if Path.cwd() not in target.parents:
        raise PermissionError(f"{path} is outside the current directory")
    return target.read_text()[:4000]


def poster(option: str, base_url: str, api_key: str, model: str) -> Post:
    """The SDK call that posts the kit's body to the provider."""
    if option == "anthropic":
        claude = anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=0)
        return lambda body: claude.messages.create(model=model, max_tokens=2048, **body)
    gpt = openai.AsyncOpenAI(
        api_key=api_key, base_url=f"{base_url}/v1" if "127.0.0.1" in base_url else base_url
    )
    if option == "openai-responses":
        return lambda body: gpt.responses.create(model=model, **body)
    return lambda body: gpt.chat.completions.create(model=model, **body)


async def run(args: argparse.Namespace, base_url: str) -> None:
    provider, wire, default_model, _ = PROVIDERS[args.provider]
    post = poster(args.provider, base_url, args.api_key, args.model or default_model)
    route = pb.Route(provider=provider, model=args.model or default_model)
    async with AdmissionClient(args.target, token=args.token) as client:
        session = await HarnessSession.open(client, route, wire)
        async with session:
            for question in args.questions:
                users = [question]
                while True:  # the harness's step
                    body = await session.admit(PROMPT, users, TOOLS)
                    reply = session.observe(await post(body))
                    users = []
                    for call in reply.tool_calls:
                        session.tool_result(call, call_tool(call))
                    if not reply.tool_calls:
                        break
                print(f"[turn {session.turn}] {question}\n  -> {reply.text}")
        print(f"session {session.session_id}: {session.turn} turns, recorded")


def call_tool(call: pb.ToolCallBlock) -> Any:
    try:
        return read_file(json.loads(call.arguments_json)["path"])
    except (OSError, KeyError, ValueError) as error:
        return error  # an error result: the model reads what failed


@contextlib.contextmanager
def provider(args: argparse.Namespace) -> Iterator[str]:
    """The provider's base URL: the real one, or a local stand-in with the recorded replies."""
    if args.base_url:
        yield args.base_url
        return
    with provider_server() as stand_in:
        stand_in.answer(*harness_fixtures.LOOPS[PROVIDERS[args.provider][3]])
        yield stand_in.base_url


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="anthropic")
    parser.add_argument("--base-url", default="", help="a real provider's API base URL")
    parser.add_argument("--api-key", default="recorded", help="that provider's API key")
    parser.add_argument("--model", default="", help="the model (default: one per provider)")
    parser.add_argument("--target", default="127.0.0.1:50051", help="the admission service")
    parser.add_argument("--token", default=None, help="the service's bearer token")
    parser.add_argument(
        "--questions",
        nargs="+",
        default=["Read main.py and explain it.", "Plan the merge of a.py and b.py."],
    )
    args = parser.parse_args()
    with provider(args) as base_url:
        asyncio.run(run(args, base_url))


if __name__ == "__main__":
    main()
