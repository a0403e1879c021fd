"""A thin asynchronous client for the benchmark: the generated stubs, message builders, and
seeding a session to a given surface length through the public API."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias, cast

import grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

if TYPE_CHECKING:  # the generated stub is typed for asyncio as AdmissionServiceAsyncStub
    Stub: TypeAlias = api_grpc.AdmissionServiceAsyncStub

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
]
# The routes' provider decides the tokenizer that prices every node (admission_service/
# tokenizers.py); BENCH_PROVIDER=other prices with the heuristic, to measure what counting costs.
PROVIDER = os.environ.get("BENCH_PROVIDER", "deepseek")
IN_HISTORY = pb.Route(provider=PROVIDER, model="deepseek-flash", context_window=128_000)
REPLACE = pb.Route(
    provider=PROVIDER,
    model="deepseek-flash",
    context_window=128_000,
    system_prompt_update=pb.SYSTEM_PROMPT_UPDATE_REPLACE,
)
PROMPT = "You are a careful coding agent. Work in small, verified steps. " * 8
# The DELTA request view (issue 7): present in protos generated after it was added.
HAS_DELTA = "view" in api.AdmitRequest.DESCRIPTOR.fields_by_name
MAX_CALLS_PER_RECORD = 127  # the default max_tool_results limit is 128


def text(n: int, salt: str = "") -> str:
    base = f"{salt} the quick brown fox jumps over the lazy dog; "
    return (base * (n // len(base) + 1))[:n]


def user(content: str) -> pb.Message:
    return pb.Message(
        role=pb.MESSAGE_ROLE_USER, content=[pb.ContentBlock(text=pb.TextBlock(text=content))]
    )


def assistant(content: str, calls: list[tuple[str, str, str]] = ()) -> pb.Message:  # type: ignore[assignment]
    blocks = [pb.ContentBlock(text=pb.TextBlock(text=content))] if content else []
    blocks += [
        pb.ContentBlock(tool_call=pb.ToolCallBlock(call_id=c, name=n, arguments_json=a))
        for c, n, a in calls
    ]
    return pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=blocks)


def tool_result(call_id: str, content: str) -> pb.ToolResult:
    return pb.ToolResult(
        call_id=call_id, content=[pb.ContentBlock(text=pb.TextBlock(text=content))]
    )


def channel(target: str, *, own_connection: bool = False) -> grpc.aio.Channel:
    """A channel to ``target``. Channels of one process share one connection per target
    unless ``own_connection``: then it opens its own, as a separate harness would — which
    matters with several workers, since the kernel hands each connection to one worker
    (``SO_REUSEPORT``) and every call on it stays there."""
    options = CHANNEL_OPTIONS
    if own_connection:
        options = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
    return grpc.aio.insecure_channel(target, options=options)


def stub(ch: grpc.aio.Channel) -> Stub:
    return cast("Stub", api_grpc.AdmissionServiceStub(ch))


@dataclass
class Held:
    """The prefix of the derived request a caller keeps (for DELTA requests)."""

    count: int = 0
    digest: bytes = b""
    messages: list[pb.Message] = field(default_factory=list)

    def update(self, request: pb.DerivedRequest, keep_messages: bool = False) -> None:
        if not HAS_DELTA:
            return
        if keep_messages:
            del self.messages[request.first_message_index :]
            self.messages.extend(request.messages)
        self.count = request.total_messages
        self.digest = request.digest


@dataclass
class Session:
    """One session driven through the public API, counting its surface nodes."""

    stub: Stub
    session_id: str
    route: pb.Route = field(default_factory=lambda: IN_HISTORY)
    nodes: int = 0
    seqs: list[int] = field(default_factory=list)
    group_ends: list[int] = field(default_factory=list)  # surface indexes ending a tool group
    step: int = 0
    held: Held = field(default_factory=Held)
    last_admission: str = ""

    @classmethod
    async def create(cls, stub: Stub, **kwargs: object) -> Session:
        session_id = f"bench-{uuid.uuid4().hex}"
        await stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
        return cls(stub, session_id, **kwargs)  # type: ignore[arg-type]

    def admit_request(
        self,
        prompt: str,
        users: list[pb.Message],
        *,
        delta: bool = False,
        starts_series: bool = False,
        tools: list[pb.Tool] = (),  # type: ignore[assignment]
    ) -> api.AdmitRequest:
        self.step += 1
        request = api.AdmitRequest(
            session_id=self.session_id,
            turn=self.step,
            step=0,
            rendered_prompt=prompt,
            route=self.route,
            users=users,
            tools=tools,
            starts_request_series=starts_series,
        )
        if delta and HAS_DELTA:
            request.view = pb.REQUEST_VIEW_DELTA
            request.held_prefix.message_count = self.held.count
            request.held_prefix.digest = self.held.digest
        return request

    async def admit(
        self, prompt: str, users: list[pb.Message], *, delta: bool = False, **kwargs: object
    ) -> tuple[api.AdmitResponse, float]:
        request = self.admit_request(prompt, users, delta=delta, **kwargs)  # type: ignore[arg-type]
        started = time.perf_counter()
        response: api.AdmitResponse = await self.stub.Admit(request)
        elapsed = time.perf_counter() - started
        self._admitted(response)
        return response, elapsed

    async def one_call(
        self,
        prompt: str,
        users: list[pb.Message],
        assistant_message: pb.Message,
        results: list[pb.ToolResult],
        **usage: int,
    ) -> tuple[api.AdmitResponse, float]:
        """One call per step: the previous admission's output (``assistant_message``, its
        tool ``results`` and ``usage``) recorded and the next step admitted, DELTA view."""
        request = self.admit_request(prompt, users, delta=True)
        output = request.previous_output
        output.admission_id = self.last_admission
        output.assistant.CopyFrom(assistant_message)
        output.tool_results.extend(results)
        if usage:
            output.usage.CopyFrom(pb.Usage(**usage))
        started = time.perf_counter()
        response: api.AdmitResponse = await self.stub.Admit(request)
        elapsed = time.perf_counter() - started
        recorded = response.recorded
        self.seqs += [recorded.assistant_seq, *recorded.tool_result_seqs]
        self.nodes += 1 + len(recorded.tool_result_seqs)
        self.group_ends.append(self.nodes - 1)
        self._admitted(response)
        return response, elapsed

    def _admitted(self, response: api.AdmitResponse) -> None:
        self.last_admission = response.admission_id
        new = [c.seq for c in response.commits if c.operation == pb.COMMIT_OPERATION_APPEND]
        self.seqs += new + list(response.user_seqs)
        self.nodes += len(new) + len(response.user_seqs)
        self.held.update(response.request)

    async def record(
        self, assistant_message: pb.Message, results: list[pb.ToolResult], **usage: int
    ) -> float:
        request = api.RecordRequest(
            session_id=self.session_id,
            admission_id=self.last_admission,
            assistant=assistant_message,
            tool_results=results,
        )
        if usage:
            request.usage.CopyFrom(pb.Usage(**usage))
        started = time.perf_counter()
        response = await self.stub.Record(request)
        elapsed = time.perf_counter() - started
        self.seqs += [response.assistant_seq, *response.tool_result_seqs]
        self.nodes += 1 + len(response.tool_result_seqs)
        self.group_ends.append(self.nodes - 1)
        return elapsed

    async def grow_to(self, nodes: int, size: int = 200) -> None:
        """Grow the surface to ``nodes`` nodes: a first step (prompt + one user), then records
        of one assistant message with up to 127 tool calls and their results."""
        if self.nodes == 0:
            await self.admit(PROMPT, [user(text(size, "u0"))])
            self.group_ends.append(self.nodes - 1)
        while self.nodes < nodes:
            calls = min(MAX_CALLS_PER_RECORD, (nodes - self.nodes - 1) // 2)
            base = f"c{self.nodes}"
            call_list = [
                (f"{base}-{i}", "read_file", '{"path":"src/main.py"}') for i in range(calls)
            ]
            results = [tool_result(c, text(size, c)) for c, _, _ in call_list]
            await self.record(assistant(text(size, base), call_list), results)
