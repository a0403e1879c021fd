"""Scenario 7, hostile input, against the real server process.

* Property-based fuzzing (hypothesis) of every RPC's request message, field by field
  (``fuzz.py``): only documented status codes come back, each with its documented
  ``ErrorInfo`` reason, never UNKNOWN or INTERNAL; the service keeps serving, and the sessions
  the fuzzer could reach still pass the audit.
* Raw bytes as request bodies (random, truncated, invalid UTF-8 where a string belongs, lone
  surrogates, nesting past the parser's limit): INVALID_ARGUMENT naming the field.
* Garbage on the gRPC port (random bytes, HTTP/1.1, TLS, a bare HTTP/2 preface, idle and
  half-open connections): the service keeps answering other callers promptly.
* Oversized messages: over the receive limit RESOURCE_EXHAUSTED (from gRPC itself, documented
  in the README), over a field limit INVALID_ARGUMENT naming the field, large but legal ones
  accepted.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from admission_service.api.tenancy import hash_token
from admission_service.storage.token_keys import stored_page_token_keys
from admission_service.tokenizers import TOKENIZER_FAMILIES
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb
from sqlalchemy.ext.asyncio import create_async_engine

from tests.api.malformed_bytes import MALFORMED
from tests.api.support import DETAILS_KEY, IN_HISTORY_ROUTE, rich_error, user

from .checks import audit_book
from .conftest import StartService
from .fuzz import (
    Pools,
    call_metadata,
    documented_reasons,
    forged_page_tokens,
    messages,
    mutated,
    step_outputs,
)
from .harness import Book, assistant, tool_result
from .process import CHANNEL_OPTIONS, ServiceProcess
from .profile import Profile
from .scenario import authorized_stub, plain_stub
from .stats import Figures, latency_summary

pytestmark = pytest.mark.slow
SERVICE = api.DESCRIPTOR.services_by_name["AdmissionService"]
REASONS = documented_reasons()
NEVER = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
TOKEN = f"fuzz-{uuid.uuid4().hex}"
AUTHORIZED = (("authorization", f"Bearer {TOKEN}"),)


def check_status(error: grpc.RpcError) -> str:
    """``error``'s code and reason, asserted to be documented together; "CODE/REASON"."""
    code = error.code()
    assert code not in NEVER, f"{code.name}: {error.details()}"
    trailers: Any = error.trailing_metadata() or ()  # grpc.aio.Metadata; the stubs disagree
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED and all(k != DETAILS_KEY for k, _ in trailers):
        return code.name  # gRPC's own receive limit, before the service sees the request
    rich = rich_error(error)  # type: ignore[arg-type]
    assert REASONS.get(rich.reason) == code.name, f"{code.name} with reason {rich.reason}"
    if rich.reason == "INVALID_FIELD":
        assert rich.violated_fields, "INVALID_FIELD without a field"
    return f"{code.name}/{rich.reason}"


async def seed_sessions(
    stub: api_grpc.AdmissionServiceAsyncStub, book: Book, secret: bytes
) -> Pools:
    """Live sessions whose ids, admissions, tool calls and tokens the fuzzer draws from; page
    and plan tokens forged structurally and signed with the service's ``secret``."""
    pools = Pools()
    sessions = [book.new_session_id() for _ in range(3)]
    for sid in sessions:
        await stub.CreateSession(api.CreateSessionRequest(session_id=sid))
        book.add(sid)
    a, b, _ = sessions
    first = await stub.Admit(
        api.AdmitRequest(
            session_id=a, rendered_prompt="P", route=IN_HISTORY_ROUTE, users=[user("x" * 400)]
        )
    )
    call = f"call-{uuid.uuid4().hex[:8]}"
    await stub.Record(
        api.RecordRequest(
            session_id=a, admission_id=first.admission_id, assistant=assistant("y" * 400, call)
        )
    )
    await stub.Record(  # the call answered: the next step may be admitted
        api.RecordRequest(
            session_id=a, admission_id=first.admission_id, tool_results=[tool_result(call, "r")]
        )
    )
    stale = await stub.PlanCompaction(api.PlanCompactionRequest(session_id=a, retain_tokens=0))
    used = str(uuid.uuid4())
    second = await stub.Admit(
        api.AdmitRequest(
            session_id=a,
            request_id=used,
            rendered_prompt="Q",
            route=IN_HISTORY_ROUTE,
            users=[user("z")],
        )
    )
    fresh = await stub.PlanCompaction(api.PlanCompactionRequest(session_id=a, retain_tokens=0))
    other = await stub.Admit(
        api.AdmitRequest(session_id=b, rendered_prompt="", route=IN_HISTORY_ROUTE)
    )
    page = await stub.ListSessions(api.ListSessionsRequest(page_size=1))
    events = await stub.ListEvents(api.ListEventsRequest(session_id=a, page_size=1))
    trajectory = await stub.ListTrajectory(api.ListTrajectoryRequest(session_id=a, page_size=1))
    pools.add("session_id", *sessions, "no-such-session")
    pools.add("admission_id", first.admission_id, second.admission_id, other.admission_id)
    pools.add("call_id", call, "call-that-does-not-exist")
    pools.add("plan_token", stale.plan_token, fresh.plan_token)  # the first is stale
    pools.add("page_token", page.next_page_token, events.next_page_token)
    pools.add("request_id", used)
    genuine = (page.next_page_token, events.next_page_token, trajectory.next_page_token)
    scopes = [f"{kind}/default/{a}" for kind in ("events", "trajectory", "compaction")]
    forged = forged_page_tokens(secret, [*scopes, "sessions/default"], genuine)
    pools.add("page_token", *forged)
    pools.add("plan_token", *forged_page_tokens(secret, scopes, (fresh.plan_token,)))
    pools.add("trajectory_token", trajectory.next_page_token)
    return pools


def templates(pools: Pools) -> dict[str, tuple[Message, ...]]:
    """A valid request per RPC, for the fuzzer to start from."""
    a = pools.by_field["session_id"][0]
    admission = pools.by_field["admission_id"][0]
    return {
        "CreateSession": (api.CreateSessionRequest(session_id=f"fz-{uuid.uuid4().hex[:8]}"),),
        "GetSession": (api.GetSessionRequest(session_id=a),),
        "ListSessions": (api.ListSessionsRequest(page_size=2),),
        "DeleteSession": (api.DeleteSessionRequest(session_id="fz-not-there"),),
        "Admit": (
            api.AdmitRequest(
                session_id=a, rendered_prompt="P2", route=IN_HISTORY_ROUTE, users=[user("u")]
            ),
        ),
        "Reconcile": (
            api.ReconcileRequest(session_id=a, admission_id=admission, route=IN_HISTORY_ROUTE),
        ),
        "Record": (
            api.RecordRequest(
                session_id=a,
                admission_id=admission,
                tool_results=[tool_result(pools.by_field["call_id"][0], "r")],
            ),
        ),
        "PlanCompaction": (api.PlanCompactionRequest(session_id=a, retain_tokens=0),),
        "Compact": (
            api.CompactRequest(
                session_id=a, plan_token=pools.by_field["plan_token"][0], summary="s"
            ),
        ),
        "Inspect": (api.InspectRequest(session_id=a),),
        "ListEvents": (
            api.ListEventsRequest(session_id=a, page_token=pools.by_field["page_token"][1]),
        ),
        "ListTrajectory": (
            api.ListTrajectoryRequest(
                session_id=a, page_token=pools.by_field["trajectory_token"][0]
            ),
        ),
    }


MUTATING = {"CreateSession", "DeleteSession", "Admit", "Reconcile", "Record", "Compact"}
# The fuzzer's invariant (issue 13): no call costs the server more than this much CPU.
MAX_SERVER_CPU_SECONDS = 0.100


@dataclass
class FuzzTally:
    """What the fuzzer saw: outcomes by "RPC CODE/REASON", and server CPU per call."""

    outcomes: Counter[str] = field(default_factory=Counter)
    cpu_max_refused: float = 0.0
    cpu_max_ok: float = 0.0
    cpu_total: float = 0.0
    costliest: str = ""
    refused_that_committed: list[str] = field(default_factory=list)

    def add(self, method: str, outcome: str, cpu: float) -> None:
        self.outcomes[f"{method} {outcome}"] += 1
        self.cpu_total += cpu
        if outcome == "OK":
            self.cpu_max_ok = max(self.cpu_max_ok, cpu)
        elif cpu > self.cpu_max_refused:
            self.cpu_max_refused, self.costliest = cpu, f"{method} {outcome}"

    @property
    def calls(self) -> int:
        return sum(self.outcomes.values())


async def page_token_secret(database_url: str) -> bytes:
    """The key the service signs page tokens with (migration 0006): what a leaked key gives."""
    engine = create_async_engine(database_url)
    try:
        return (await stored_page_token_keys(engine))[0]
    finally:
        await engine.dispose()


def _with_previous_output(template: Message, output: api.StepOutput) -> Message:
    request = api.AdmitRequest()
    request.MergeFromString(template.SerializeToString())
    request.previous_output.CopyFrom(output)
    return request


def request_bytes(
    method: str, pools: Pools, start_from: tuple[Message, ...]
) -> st.SearchStrategy[bytes]:
    """Half well-formed hostile messages (``fuzz.messages``), half valid or hostile messages
    whose bytes were then damaged (``fuzz.mutated``)."""
    descriptor = SERVICE.methods_by_name[method].input_type
    # An RPC without a template of its own starts from its empty request.
    start_from = start_from or (GetMessageClass(descriptor)(),)
    encoded = messages(descriptor, pools, templates=start_from).map(
        lambda message: message.SerializeToString()
    )
    if method == "Admit":  # the previous step's output, recorded by the next Admit
        outputs = st.builds(_with_previous_output, st.sampled_from(start_from), step_outputs(pools))
        encoded = st.one_of(encoded, outputs.map(lambda message: message.SerializeToString()))
    valid = st.sampled_from([t.SerializeToString() for t in start_from])
    return st.one_of(encoded, mutated(st.one_of(valid, encoded)))


def session_named(method: str, data: bytes) -> str | None:
    """The session_id of ``data`` if it parses as ``method``'s request."""
    try:
        request = GetMessageClass(SERVICE.methods_by_name[method].input_type).FromString(data)
    except DecodeError:
        return None
    return getattr(request, "session_id", None) or None


def fuzz_method(
    service: ServiceProcess,
    method: str,
    requests: st.SearchStrategy[bytes],
    metadata: st.SearchStrategy[tuple[tuple[str, str], ...]],
    examples: int,
    run_seed: int,
    tally: FuzzTally,
    sentinel: str,
) -> None:
    """Hypothesis over ``method``'s request bytes and metadata (blocking: run in a thread).
    Each call is timed in server CPU; a refused call to a mutating RPC must leave the session
    it names at the same revision."""
    with grpc.insecure_channel(service.target, options=CHANNEL_OPTIONS) as channel:
        rpc = channel.unary_unary(
            f"/{SERVICE.full_name}/{method}",
            request_serializer=lambda data: data,
            response_deserializer=lambda data: data,
        )
        stub = api_grpc.AdmissionServiceStub(channel)
        calls = Counter[str]()

        def revision(sid: str | None) -> int | None:
            if sid is None:
                return None
            try:
                reply = stub.GetSession(
                    api.GetSessionRequest(session_id=sid), metadata=AUTHORIZED, timeout=10
                )
            except grpc.RpcError:
                return None
            return int(reply.session.revision)

        @hypothesis_seed(run_seed)
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(requests, metadata)
        def one(data: bytes, call_metadata: tuple[tuple[str, str], ...]) -> None:
            sid = session_named(method, data) if method in MUTATING else None
            before = revision(sid)
            cpu = service.cpu()
            try:
                rpc(data, metadata=call_metadata, timeout=30)
                outcome = "OK"
            except grpc.RpcError as error:
                outcome = check_status(error)
            cpu = service.cpu() - cpu
            tally.add(method, outcome, cpu)
            if outcome != "OK" and before is not None and revision(sid) != before:
                tally.refused_that_committed.append(f"{method} {outcome} {sid}")
            calls["n"] += 1
            if calls["n"] % 25 == 0:  # still serving
                stub.GetSession(
                    api.GetSessionRequest(session_id=sentinel), metadata=AUTHORIZED, timeout=10
                )

        one()


async def revisions(stub: api_grpc.AdmissionServiceAsyncStub) -> dict[str, int]:
    page = await stub.ListSessions(api.ListSessionsRequest(page_size=1000))
    return {s.session_id: s.revision for s in page.sessions}


async def load_every_tokenizer(target: str) -> None:
    """Warm-up: each worker process loads a route family's tokenizer once, on its first Admit
    of that family (0.1-0.7 s of CPU, once per process: not a cost a call can make again).
    Admits of every family on new connections (each may land on any worker, SO_REUSEPORT)
    load them all before the fuzzer measures each call's CPU and the RSS."""
    for provider in TOKENIZER_FAMILIES:
        for _ in range(16):
            async with authorized_stub(target, TOKEN) as stub:
                with pytest.raises(grpc.aio.AioRpcError) as missing:
                    await stub.Admit(
                        api.AdmitRequest(
                            session_id="warm-up-no-such-session",
                            rendered_prompt="p",
                            route=pb.Route(provider=provider, model="m"),
                        ),
                        timeout=30,
                    )
                assert missing.value.code() is grpc.StatusCode.NOT_FOUND


async def test_fuzzed_requests(
    fresh_database: str,
    services: StartService,
    profile: Profile,
    figures: Callable[[str], Figures],
    seed: int,
) -> None:
    """Structure-aware fuzzing of every RPC, authenticated and not (issue 13's invariant: no
    INTERNAL/UNKNOWN, no refused call above ``MAX_SERVER_CPU_SECONDS`` of server CPU, RSS
    bounded, nothing committed by a refused call)."""
    report = figures("7a. hostile input: fuzzed requests")
    service = await services(
        fresh_database, env={"PAS_AUTH_TOKENS": f"default={hash_token(TOKEN)}"}
    )
    await load_every_tokenizer(service.target)
    rss_before = service.rss()
    book = Book("fuzz")
    authenticated, unauthenticated = FuzzTally(), FuzzTally()
    async with authorized_stub(service.target, TOKEN) as stub:
        pools = await seed_sessions(stub, book, await page_token_secret(fresh_database))
        sentinel = book.new_session_id()
        await stub.CreateSession(api.CreateSessionRequest(session_id=sentinel))
        book.add(sentinel)
        starts = templates(pools)
        # DeleteSession draws from sessions of its own, so the others stay to be fuzzed.
        doomed = Pools({**pools.by_field, "session_id": []})
        for _ in range(5):
            sid = book.new_session_id()
            await stub.CreateSession(api.CreateSessionRequest(session_id=sid))
            book.add(sid)
            doomed.add("session_id", sid)
        # Without valid credentials first: every call is UNAUTHENTICATED, nothing changes.
        stored_before = await revisions(stub)
        for method in SERVICE.methods_by_name:
            await asyncio.to_thread(
                fuzz_method,
                service,
                method,
                request_bytes(method, pools, starts.get(method, ())),
                call_metadata(None),
                max(10, profile.fuzz_examples // 2),
                seed,
                unauthenticated,
                sentinel,
            )
        assert await revisions(stub) == stored_before
        # UNAUTHENTICATED, or gRPC's own RESOURCE_EXHAUSTED (no reason: the body was over the
        # receive limit, refused before the service saw it).
        outcomes = {key.split(" ", 1)[1] for key in unauthenticated.outcomes}
        assert {o.split("/")[0] for o in outcomes} - {"RESOURCE_EXHAUSTED"} == {
            "UNAUTHENTICATED"
        }, unauthenticated.outcomes
        assert not {o for o in outcomes if o.startswith("RESOURCE_EXHAUSTED/")}
        for method in SERVICE.methods_by_name:
            await asyncio.to_thread(
                fuzz_method,
                service,
                method,
                request_bytes(
                    method, doomed if method == "DeleteSession" else pools, starts.get(method, ())
                ),
                call_metadata(TOKEN),
                profile.fuzz_examples,
                seed,
                authenticated,
                sentinel,
            )
        assert service.running and service.starts == 1
        existing = Book("fuzz")
        for session_id in await revisions(stub):  # the fuzzer may have deleted some
            if session_id in book.sessions:
                existing.add(session_id)
        audited = await audit_book(stub, fresh_database, existing)

    rss_after = service.rss()
    by_code = Counter(
        key.split(" ", 1)[1].split("/")[0] for key in authenticated.outcomes.elements()
    )
    report.set(
        seed=seed,
        rpcs=len(SERVICE.methods_by_name),
        examples_per_rpc=profile.fuzz_examples,
        calls=authenticated.calls,
        outcomes_by_code=dict(sorted(by_code.items())),
        outcomes_by_rpc_code_reason=dict(sorted(authenticated.outcomes.items())),
        unauthenticated_calls=unauthenticated.calls,
        server_cpu_ms_max_refused=round(authenticated.cpu_max_refused * 1000),
        server_cpu_ms_max_refused_unauthenticated=round(unauthenticated.cpu_max_refused * 1000),
        server_cpu_ms_max_ok=round(authenticated.cpu_max_ok * 1000),
        server_cpu_ms_mean=round(authenticated.cpu_total * 1000 / max(authenticated.calls, 1), 1),
        costliest_refused=authenticated.costliest,
        rss_mib_before_after=[round(rss_before / 2**20, 1), round(rss_after / 2**20, 1)],
        audit=audited.as_dict(),
    )
    report.finish()
    assert not authenticated.refused_that_committed
    assert unauthenticated.cpu_max_refused <= MAX_SERVER_CPU_SECONDS
    assert authenticated.cpu_max_refused <= MAX_SERVER_CPU_SECONDS, authenticated.costliest
    # The fuzzer sends requests of up to 16 MiB: a few of them in flight, never more.
    assert rss_after - rss_before < 512 * 2**20


async def test_malformed_request_bytes(
    fresh_database: str,
    services: StartService,
    profile: Profile,
    figures: Callable[[str], Figures],
    seed: int,
) -> None:
    report = figures("7b. hostile input: malformed request bytes")
    service = await services(fresh_database)
    rng = random.Random(seed)
    tally: Counter[str] = Counter()
    async with grpc.aio.insecure_channel(service.target, options=CHANNEL_OPTIONS) as channel:

        def raw(method: str) -> Any:
            return channel.unary_unary(
                f"/{SERVICE.full_name}/{method}",
                request_serializer=lambda data: data,
                response_deserializer=lambda data: data,
            )

        # The crafted cases (each answer's field is checked in tests/api/test_malformed_requests).
        for case in MALFORMED:
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await raw(case.method)(case.data, timeout=10)
            tally[check_status(failure.value)] += 1
            assert failure.value.code() is grpc.StatusCode.INVALID_ARGUMENT, case
        methods = list(SERVICE.methods_by_name)
        for _ in range(profile.garbage_payloads):
            size = rng.choice([1, 2, 5, 16, 100, 1000, 70_000])
            data = rng.randbytes(size)
            try:
                await raw(rng.choice(methods))(data, timeout=10)
                tally["OK"] += 1
            except grpc.aio.AioRpcError as error:
                tally[check_status(error)] += 1
        async with plain_stub(service.target) as stub:
            await stub.ListSessions(api.ListSessionsRequest(), timeout=10)
    assert service.running
    report.set(
        seed=seed,
        crafted=len(MALFORMED),
        random_payloads=profile.garbage_payloads,
        calls=sum(tally.values()),
        outcomes=dict(sorted(tally.items())),
    )
    report.finish()


GARBAGE = [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32),  # a TLS ClientHello's start
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",  # the HTTP/2 preface, then nothing
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64,  # the preface, then garbage frames
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x7f\xff\xff\x01\x00\x00\x00\x00\x01",  # huge frame
    b"\x00" * 4096,
]


async def test_garbage_on_the_port(
    fresh_database: str,
    services: StartService,
    profile: Profile,
    figures: Callable[[str], Figures],
    seed: int,
) -> None:
    report = figures("7c. hostile input: garbage on the gRPC port")
    service = await services(fresh_database)
    rng = random.Random(seed)
    rss_before = service.rss()
    latencies: list[float] = []

    async def send(payload: bytes) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
        try:
            writer.write(payload)
            await writer.drain()
            await asyncio.wait_for(reader.read(65536), 1.0)
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async with plain_stub(service.target) as stub:
        sid = f"garbage-{uuid.uuid4().hex[:8]}"
        await stub.CreateSession(api.CreateSessionRequest(session_id=sid))

        async def probe() -> None:
            started = time.monotonic()
            await stub.GetSession(api.GetSessionRequest(session_id=sid), timeout=5)
            latencies.append(time.monotonic() - started)

        payloads = [*GARBAGE]
        payloads += [
            rng.randbytes(rng.choice([1, 24, 512, 65536])) for _ in range(profile.garbage_payloads)
        ]
        for start in range(0, len(payloads), 20):
            await asyncio.gather(*(send(p) for p in payloads[start : start + 20]))
            await probe()
        # Idle and half-open connections held open while others are served.
        idle = [await asyncio.open_connection("127.0.0.1", service.port) for _ in range(100)]
        for _, writer in idle[::2]:
            writer.write(GARBAGE[2][:10])  # half a preface
        for _ in range(20):
            await probe()
        for _, writer in idle:
            writer.close()
        await probe()
    assert service.running and service.starts == 1
    report.set(
        seed=seed,
        garbage_connections=len(payloads),
        idle_connections_held=100,
        calls_served_meanwhile=len(latencies),
        latency_meanwhile=latency_summary(latencies),
        rss_mib_before_after=[round(rss_before / 2**20, 1), round(service.rss() / 2**20, 1)],
    )
    report.finish()
    assert max(latencies) < 2.0


async def test_oversized_messages(
    fresh_database: str,
    services: StartService,
    figures: Callable[[str], Figures],
) -> None:
    report = figures("7d. hostile input: oversized messages")
    service = await services(fresh_database)
    mib = 1 << 20
    outcomes: dict[str, str] = {}
    async with plain_stub(service.target) as stub:
        sid = f"big-{uuid.uuid4().hex[:8]}"
        await stub.CreateSession(api.CreateSessionRequest(session_id=sid))

        async def attempt(name: str, request: api.AdmitRequest) -> None:
            try:
                await stub.Admit(request, timeout=60)
                outcomes[name] = "OK"
            except grpc.aio.AioRpcError as error:
                outcomes[name] = check_status(error)
                if error.code() is grpc.StatusCode.INVALID_ARGUMENT:
                    outcomes[name] += f" {rich_error(error).violated_fields}"

        def admit(prompt: str, *users: str) -> api.AdmitRequest:
            return api.AdmitRequest(
                session_id=sid,
                rendered_prompt=prompt,
                route=IN_HISTORY_ROUTE,
                users=[user(u) for u in users],
            )

        await attempt("20 MiB prompt (over the 16 MiB receive limit)", admit("p" * 20 * mib))
        await attempt("prompt of 1 MiB + 1 byte", admit("p" * (mib + 1)))
        await attempt("65 users", admit("p", *["u"] * 65))
        await attempt("user of 1 MiB + 1 byte", admit("p", "u" * (mib + 1)))
        # Within every request limit, but its derived request (9 MiB, all of it new, so DELTA
        # carries it too) is over the 4 MiB response bound a default client can receive:
        # refused before the commit.
        await attempt(
            "prompt and 8 users of 1 MiB each (over the response bound)",
            admit("p" * mib, *["u" * mib] * 8),
        )
        await attempt(
            "tool schema of 256 KiB + 1",
            api.AdmitRequest(
                session_id=sid,
                rendered_prompt="p",
                route=IN_HISTORY_ROUTE,
                tools=[pb.Tool(name="t", parameters_json='"' + "s" * (256 * 1024) + '"')],
            ),
        )
        events = await stub.ListEvents(
            api.ListEventsRequest(session_id=sid, page_size=1000), timeout=60
        )
        await stub.GetSession(api.GetSessionRequest(session_id=sid), timeout=5)
    assert service.running and service.starts == 1
    report.set(outcomes=outcomes, events_page_mib=round(events.ByteSize() / mib, 1))
    report.finish()
    assert outcomes["20 MiB prompt (over the 16 MiB receive limit)"] == "RESOURCE_EXHAUSTED"
    assert outcomes["prompt of 1 MiB + 1 byte"].endswith("['rendered_prompt']")
    assert outcomes["prompt and 8 users of 1 MiB each (over the response bound)"] == (
        "RESOURCE_EXHAUSTED/RESPONSE_TOO_LARGE"
    )
    assert not events.events, "a refused admission committed something"
