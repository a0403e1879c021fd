"""Sessions grown to a million tokens and to 20 MB, and the TypeScript client that receives
them (issue 23, "checked against the outside world"): shared by tests/clients/
test_large_sessions.py (the server directly) and tests/compose (through the balancer).

A session grows the way a harness grows one, one call per step: a user's question, then steps
whose ``previous_output`` records the model's ``read`` calls and their results (DELTA views,
streamed, so no step returns more than what it added). The text is prose-like and seeded (about
4.2 characters a token under o200k_base and Claude's tokenizer, like English), the images are
real PNGs of random pixels (incompressible: their base64 is their size), sent as ``data:`` URIs.
"""

from __future__ import annotations

import base64
import json
import random
import select
import struct
import subprocess
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from google.protobuf import json_format
from promptadmission import SyncAdmissionClient
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

Size = Literal["1M", "20MB"]
Family = Literal["openai", "anthropic"]

PROMPT = "You are a careful coding agent. Read what you need, then answer."
TOOLS = [
    pb.Tool(
        name="read",
        description="Read a file of the repository.",
        parameters_json='{"type":"object","properties":{"path":{"type":"string"}},'
        '"required":["path"]}',
    )
]
# Each family's route, its tokenizer the service's real one (o200k_base, claude); REPLACE so
# that no catalog entry decides for the test.
ROUTES: dict[Family, pb.Route] = {
    "openai": pb.Route(
        provider="openai",
        model="gpt-large-test",
        context_window=1_050_000,
        system_prompt_update=pb.SYSTEM_PROMPT_UPDATE_REPLACE,
    ),
    "anthropic": pb.Route(
        provider="anthropic",
        model="claude-large-test",
        context_window=1_000_000,
        system_prompt_update=pb.SYSTEM_PROMPT_UPDATE_REPLACE,
    ),
}
# The family whose session each wire format is admitted on.
FAMILY: dict[pb.WireFormat.ValueType, Family] = {
    pb.WIRE_FORMAT_NEUTRAL: "openai",
    pb.WIRE_FORMAT_OPENAI_CHAT: "openai",
    pb.WIRE_FORMAT_OPENAI_RESPONSES: "openai",
    pb.WIRE_FORMAT_ANTHROPIC_MESSAGES: "anthropic",
}
WIRE_NAMES: dict[pb.WireFormat.ValueType, str] = {
    pb.WIRE_FORMAT_NEUTRAL: "neutral",
    pb.WIRE_FORMAT_OPENAI_CHAT: "openai_chat",
    pb.WIRE_FORMAT_OPENAI_RESPONSES: "openai_responses",
    pb.WIRE_FORMAT_ANTHROPIC_MESSAGES: "anthropic_messages",
}
ONE_MILLION = 1_000_000
# A tool result's text: five of them are ~4.6 MB, over a million tokens under both tokenizers
# (o200k_base ~4.4 characters a token on this text, Claude's ~4.2). Each message stays under
# the default PAS_LIMIT_MAX_MESSAGE_BYTES (1 MiB).
TEXT_RESULT_CHARS = 920_000
TEXT_RESULTS = 5
# The 20 MB session adds 16 results of 250 000 characters and a ~720 KB PNG each, in two
# steps of 8 (each request ~7.8 MB, under PAS_MAX_RECEIVE_MESSAGE_BYTES' 16 MiB), and a
# screenshot with the question.
IMAGE_RESULT_CHARS = 250_000
IMAGE_RESULTS_PER_STEP = 8
IMAGE_STEPS = 2
PNG_SIDE = (480, 375)  # RGB: 540 000 bytes of pixels, ~720 KB of base64

_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no "
    "will more can out up about said what some its into them than only other new time could "
    "these two may first then do any like my now over such our man me even most made after "
    "also did many before must through back years where much your way well down should "
    "because each just those people how too little state good very make world still own see "
    "men work long get here between both life being under never day same another know while "
    "last might us great old year off come since against go came right used take three"
)
_NAMES = (
    "request session admission frame chunk stream body token count route prefix digest header "
    "surface node event tool result image message"
)
WORDS, NAMES = _WORDS.split(), _NAMES.split()


def prose(rng: random.Random, chars: int) -> str:
    """Seeded English-like text with lines of code in it, ``chars`` characters long."""
    parts: list[str] = []
    size = 0
    while size < chars:
        if rng.random() < 0.75:
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20)))
            part = words[0].upper() + words[1:] + rng.choice(".....,;?") + " "
        else:
            a, b, c, d, e = (rng.choice(NAMES) for _ in range(5))
            part = f"\n    {a}_{b} = {c}.{d}_{e}({a}, {rng.randint(0, 9999)})\n"
        parts.append(part)
        size += len(part)
    return "".join(parts)[:chars]


def png(rng: random.Random, width: int, height: int) -> bytes:
    """A valid RGB PNG of random pixels (stored, not compressed: random pixels do not shrink)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = b"".join(b"\x00" + rng.randbytes(width * 3) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 0))
        + chunk(b"IEND", b"")
    )


def image_block(rng: random.Random) -> pb.ContentBlock:
    data = base64.b64encode(png(rng, *PNG_SIDE)).decode()
    return pb.ContentBlock(
        image=pb.ImageBlock(uri=f"data:image/png;base64,{data}", media_type="image/png")
    )


def text_block(text: str) -> pb.ContentBlock:
    return pb.ContentBlock(text=pb.TextBlock(text=text))


@dataclass
class Grown:
    """A session grown to ``size`` on ``family``'s route."""

    session_id: str
    size: Size
    family: Family
    route: pb.Route
    content_bytes: int  # the UTF-8 bytes of every text and image URI sent
    grow_seconds: float
    steps: int


def _results(
    step: int, contents: list[list[pb.ContentBlock]]
) -> tuple[pb.Message, list[pb.ToolResult]]:
    calls = [
        pb.ContentBlock(
            tool_call=pb.ToolCallBlock(
                call_id=f"call_{step}_{index}",
                name="read",
                arguments_json=json.dumps({"path": f"src/part_{step}_{index}.txt"}),
            )
        )
        for index in range(len(contents))
    ]
    assistant = pb.Message(
        role=pb.MESSAGE_ROLE_ASSISTANT,
        content=[text_block(f"Reading {len(contents)} files."), *calls],
    )
    results = [
        pb.ToolResult(call_id=f"call_{step}_{index}", content=content)
        for index, content in enumerate(contents)
    ]
    return assistant, results


def step_contents(
    size: Size, seed: int, text_results: int = TEXT_RESULTS
) -> tuple[list[pb.ContentBlock], list[list[list[pb.ContentBlock]]]]:
    """The question's blocks and, per step, each tool result's blocks."""
    rng = random.Random(seed)
    question = [text_block("Read the files of this change and review it. " * 8)]
    steps = [[[text_block(prose(rng, TEXT_RESULT_CHARS))] for _ in range(text_results)]]
    if size == "20MB":
        question.append(image_block(rng))
        for _ in range(IMAGE_STEPS):
            steps.append(
                [
                    [text_block(prose(rng, IMAGE_RESULT_CHARS)), image_block(rng)]
                    for _ in range(IMAGE_RESULTS_PER_STEP)
                ]
            )
    return question, steps


def _block_bytes(block: pb.ContentBlock) -> int:
    if block.HasField("image"):
        return len(block.image.uri)
    return len(block.text.text.encode())


def grow(
    client: SyncAdmissionClient,
    size: Size,
    family: Family,
    *,
    seed: int = 23,
    text_results: int = TEXT_RESULTS,
) -> Grown:
    """A new session grown to ``size`` on ``family``'s route, one call per step
    (``text_results`` fewer than the default makes a smaller session, for a smoke run)."""
    started = time.perf_counter()
    route = ROUTES[family]
    session_id = f"large-{size}-{family}-{uuid.uuid4()}"
    client.create_session(api.CreateSessionRequest(session_id=session_id))
    question, steps = step_contents(size, seed, text_results)
    sent = sum(_block_bytes(block) for block in question)
    step = client.admit(
        api.AdmitRequest(
            session_id=session_id,
            turn=1,
            step=0,
            rendered_prompt=PROMPT,
            tools=TOOLS,
            route=route,
            users=[pb.Message(role=pb.MESSAGE_ROLE_USER, content=question)],
        )
    )
    for number, contents in enumerate(steps, start=1):
        sent += sum(_block_bytes(block) for content in contents for block in content)
        assistant, results = _results(number, contents)
        step = client.admit_streamed(
            api.AdmitRequest(
                session_id=session_id,
                turn=1,
                step=number,
                rendered_prompt=PROMPT,
                tools=TOOLS,
                route=route,
                previous_output=api.StepOutput(
                    admission_id=step.admission_id, assistant=assistant, tool_results=results
                ),
                view=pb.REQUEST_VIEW_DELTA,
                held_prefix=pb.HeldPrefix(
                    message_count=step.request.total_messages, digest=step.request.digest
                ),
            )
        )
        assert step.request.view == pb.REQUEST_VIEW_DELTA
    return Grown(
        session_id, size, family, route, sent, time.perf_counter() - started, len(steps) + 1
    )


def full_request(grown: Grown, wire: pb.WireFormat.ValueType, step: int) -> api.AdmitRequest:
    """A FULL Admit of the grown session in ``wire`` (no new users: the same request each
    time, so the clients' answers can be compared byte for byte)."""
    return api.AdmitRequest(
        session_id=grown.session_id,
        turn=2,
        step=step,
        rendered_prompt=PROMPT,
        tools=TOOLS,
        route=grown.route,
        wire_format=wire,
        view=pb.REQUEST_VIEW_FULL,
    )


# ---- the TypeScript client ---------------------------------------------------------------------


@dataclass
class Served:
    """One FULL streamed Admit as a client received it."""

    client: str
    wire: str
    size: Size
    seconds: float
    response_bytes: int
    total_messages: int
    total_tokens: int
    body_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "wire": self.wire,
            "size": self.size,
            "seconds": round(self.seconds, 3),
            "response_bytes": self.response_bytes,
            "body_bytes": self.body_bytes,
            "total_messages": self.total_messages,
            "total_tokens": self.total_tokens,
            **self.extra,
        }


class LargeDriver:
    """The TypeScript client's ``admitStreamed``, driven over the line protocol of
    clients/typescript/test/largeDriver.ts; large contents come back in files."""

    def __init__(
        self, node: str, driver: Path, base_url: str, *, env: dict[str, str] | None = None
    ) -> None:
        self._process = subprocess.Popen(
            [node, str(driver), base_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env=env,
        )

    def admit(
        self,
        request: api.AdmitRequest,
        derived_out: Path,
        *,
        body_out: Path | None = None,
        extra: dict[str, Any] | None = None,
        keys: list[str] | None = None,
        post: dict[str, str] | None = None,
        answer_seconds: float = 300.0,
    ) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        command: dict[str, Any] = {
            "request": json_format.MessageToDict(request),
            "derivedOut": str(derived_out),
        }
        if body_out is not None:
            command |= {"bodyOut": str(body_out), "extra": extra or {}, "keys": keys}
        if post is not None:
            command["post"] = post
        self._process.stdin.write(json.dumps(command) + "\n")
        self._process.stdin.flush()
        readable, _, _ = select.select([self._process.stdout], [], [], answer_seconds)
        if not readable:
            self._process.kill()
            raise AssertionError(f"the TypeScript driver did not answer in {answer_seconds}s")
        line = self._process.stdout.readline()
        assert line, f"the TypeScript driver exited ({self._process.poll()})"
        answer: dict[str, Any] = json.loads(line)
        assert answer["ok"], f"TypeScript admitStreamed failed: {answer['error']}"
        return answer

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
