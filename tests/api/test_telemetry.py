"""Observability over a real channel: Prometheus metrics on their own port, JSON logs with a
request id per call, payloads kept out of logs, OpenTelemetry spans for calls and statements."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from admission_service.api.server import start_server
from admission_service.telemetry.logs import CallContextFilter, JsonFormatter
from admission_service.telemetry.metrics import admission_decision, series_start_cause
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import (
    IN_HISTORY_ROUTE,
    REPLACE_ROUTE,
    ApiClient,
    StartApi,
    admit_request,
    api_settings,
    connect,
    create_session,
)

SERVICE = "promptadmission.v1.AdmissionService"
if TYPE_CHECKING:
    Stub = api_grpc.AdmissionServiceAsyncStub

# ---- metrics --------------------------------------------------------------------------------


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` as {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def recorded(condition: Callable[[], object]) -> None:
    """Returns once ``condition()`` holds. A call's metrics, span and log line are recorded just
    after its response is sent (api/telemetry.py), and a failed call's can come after its caller
    has the error: a test reading them waits for the last call's."""
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110 - telemetry signals nothing when it records
            await asyncio.sleep(0.01)


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_count_rpcs_admissions_series_starts_and_cache_tokens(
    start_api: StartApi,
) -> None:
    client = await start_api(metrics_listen="127.0.0.1:0")
    stub = client.stub
    port = client.server.metrics_port
    assert port is not None
    admitted: list[tuple[str, str, str, str | None]] = []  # method, decision, source, cause
    forecast = 0

    async def admit(request: api.AdmitRequest) -> api.AdmitResponse:
        nonlocal forecast
        response = await stub.Admit(request)
        source = pb.CapabilitySource.Name(response.capability_source).split("_")[-1].lower()
        cause = series_start_cause(request, response)
        admitted.append(("Admit", admission_decision(response), source, cause))
        forecast += response.forecast.reused_tokens
        return response

    tools_a = [pb.Tool(name="a", parameters_json="{}")]
    tools_b = [pb.Tool(name="b", parameters_json="{}")]
    s1 = await create_session(stub)
    first = await admit(admit_request(s1, "P1", "u1", tools=tools_a))
    await admit(admit_request(s1, "P1", "u2", turn=1, tools=tools_a))
    await admit(admit_request(s1, "P2", "u3", turn=2, tools=tools_a))
    await admit(admit_request(s1, "P2", "u4", turn=3, tools=tools_a, starts_request_series=True))
    await admit(admit_request(s1, "", "u5", turn=4, tools=tools_a))
    await admit(admit_request(s1, "P3", "u6", turn=5, tools=tools_b))
    checked = await admit(admit_request(s1, "P3", "u7", turn=6, tools=tools_b, validate_only=True))
    admitted.pop()  # validate_only commits nothing and is not counted
    forecast -= checked.forecast.reused_tokens
    s2 = await create_session(stub)
    await admit(admit_request(s2, "Q1", "v1", route=REPLACE_ROUTE))
    await admit(admit_request(s2, "Q2", "v2", turn=1, route=REPLACE_ROUTE))
    declared = pb.Route(
        provider="acme",
        model="m",
        system_prompt_update=pb.SYSTEM_PROMPT_UPDATE_IN_HISTORY,
    )
    s3 = await create_session(stub)
    await admit(admit_request(s3, "R1", "w1", route=declared))
    await admit(admit_request(s3, "R1", "w2", turn=1))
    plan = await stub.PlanCompaction(api.PlanCompactionRequest(session_id=s3, retain_tokens=0))
    await stub.Compact(api.CompactRequest(session_id=s3, plan_token=plan.plan_token, summary="s"))
    await admit(admit_request(s3, "R1", "w3", turn=2))

    assert admitted == [
        ("Admit", "append", "catalog", None),  # the first prompt reserves the head
        ("Admit", "no-op", "catalog", None),
        ("Admit", "append", "catalog", None),  # in-history: appended after the history
        ("Admit", "consolidate", "catalog", "declared"),
        ("Admit", "clear", "catalog", "replaced"),
        ("Admit", "consolidate", "catalog", "header-change"),  # new tools: a new series
        ("Admit", "append", "default", None),
        ("Admit", "consolidate", "default", "replaced"),
        ("Admit", "append", "request", None),
        ("Admit", "no-op", "catalog", None),
        ("Admit", "no-op", "catalog", "history-replaced"),  # after the compaction
    ]
    retried = await stub.Reconcile(
        api.ReconcileRequest(session_id=s1, admission_id=first.admission_id, route=IN_HISTORY_ROUTE)
    )
    forecast += retried.forecast.reused_tokens
    await stub.Record(
        api.RecordRequest(
            session_id=s1,
            admission_id=first.admission_id,
            usage=pb.Usage(input_tokens=40, cache_read_tokens=7),
        )
    )
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.GetSession(api.GetSessionRequest(session_id="nowhere-" + uuid.uuid4().hex))
    rpc = {"grpc_service": SERVICE}
    not_found = {"grpc_method": "GetSession", "grpc_code": "NOT_FOUND"}
    await recorded(lambda: value(scrape(port), "grpc_server_handled_total", **rpc, **not_found))

    samples = scrape(port)
    tally = Counter((m, d, s) for m, d, s, _ in admitted)
    tally[("Reconcile", admission_decision(retried), "catalog")] += 1
    for (method, decision, source), count in tally.items():
        labels = {"method": method, "decision": decision, "capability_source": source}
        assert value(samples, "pas_admissions_total", **labels) == count, labels
    assert sum(v for (n, _), v in samples.items() if n == "pas_admissions_total") == sum(
        tally.values()
    )
    causes = Counter(c for _, _, _, c in admitted if c is not None)
    if retried.starts_series:
        causes[series_start_cause(api.ReconcileRequest(), retried) or ""] += 1
    for cause, count in causes.items():
        assert value(samples, "pas_series_starts_total", cause=cause) == count, cause
    assert value(samples, "pas_cache_read_tokens_forecast_total") == forecast > 0
    assert value(samples, "pas_cache_read_tokens_observed_total") == 7

    assert (
        value(samples, "grpc_server_handled_total", **rpc, grpc_method="Admit", grpc_code="OK")
        == 12
    )
    assert value(samples, "grpc_server_started_total", **rpc, grpc_method="Admit") == 12
    assert value(samples, "grpc_server_handled_total", **rpc, **not_found) == 1
    assert value(samples, "grpc_server_handling_seconds_count", **rpc, grpc_method="Admit") == 12
    assert value(samples, "pas_db_pool_max_connections") == 8  # api_settings: 4 + 4
    assert ("pas_db_pool_connections", (("state", "idle"),)) in samples
    assert ("pas_db_pool_connections", (("state", "in_use"),)) in samples


async def test_pool_usage_shows_connections_in_use(start_api: StartApi) -> None:
    client = await start_api(metrics_listen="127.0.0.1:0")
    assert client.server.metrics_port is not None
    async with client.server.engine.connect():
        samples = await asyncio.to_thread(scrape, client.server.metrics_port)
    assert value(samples, "pas_db_pool_connections", state="in_use") == 1


async def test_the_worker_caches_report_how_full_they_are_and_what_they_served(
    start_api: StartApi,
) -> None:
    """A session's steps hit the worker's session cache, and its FULL reads take a large
    message's frame from the held frames once a commit left it there."""
    client = await start_api(metrics_listen="127.0.0.1:0")
    assert client.server.metrics_port is not None
    session_id = await create_session(client.stub)
    document = "a long document " * 2048  # a frame of 32 KiB: held
    await client.stub.Admit(admit_request(session_id, "be brief", document))
    for step in range(1, 4):
        await client.stub.Admit(admit_request(session_id, "be brief", f"step {step}", step=step))
    samples = await asyncio.to_thread(scrape, client.server.metrics_port)
    assert value(samples, "pas_worker_cache_sessions", cache="sessions") == 1
    assert value(samples, "pas_worker_cache_sessions", cache="frames") == 1
    assert value(samples, "pas_worker_cache_bytes", cache="frames") >= len(document)
    assert value(samples, "pas_worker_cache_max_bytes", cache="frames") == 16 * 1024 * 1024
    assert value(samples, "pas_session_cache_lookups_total", result="hit") >= 3
    assert value(samples, "pas_held_frames_used_total") >= 1
    assert value(samples, "pas_worker_cache_sessions", cache="bodies") == 0
    # A chat body of 64 KiB or more is held, and the next step's body continues it.
    chat = pb.WIRE_FORMAT_OPENAI_CHAT
    for step, text in ((4, document * 2), (5, "next")):
        await client.stub.Admit(
            admit_request(session_id, "be brief", text, step=step, wire_format=chat)
        )
    samples = await asyncio.to_thread(scrape, client.server.metrics_port)
    assert value(samples, "pas_worker_cache_sessions", cache="bodies") == 1
    assert value(samples, "pas_worker_cache_bytes", cache="bodies") >= 2 * len(document)
    assert value(samples, "pas_worker_cache_max_bytes", cache="bodies") == 16 * 1024 * 1024
    assert value(samples, "pas_held_bodies_used_total") == 1


async def test_metrics_are_off_unless_configured(api: ApiClient) -> None:
    assert api.server.metrics_port is None


# ---- logs -----------------------------------------------------------------------------------


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Every record of the run's loggers, as the service writes them (JSON lines)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(CallContextFilter())
    handler.setFormatter(JsonFormatter())
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def records(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def call_lines(stream: io.StringIO, method: str) -> list[dict[str, Any]]:
    return [r for r in records(stream) if r.get("grpc_method") == method]


async def test_every_call_logs_one_json_line_with_its_request_id(
    stub: Stub, json_log: io.StringIO
) -> None:
    session_id = await create_session(stub)
    call = stub.Admit(
        admit_request(session_id, "p", "u"), metadata=(("x-request-id", "trace-me-42"),)
    )
    await call
    assert ("x-request-id", "trace-me-42") in tuple(await call.initial_metadata())

    [line] = [r for r in call_lines(json_log, "Admit") if r.get("request_id") == "trace-me-42"]
    assert line["level"] == "INFO"
    assert line["grpc_code"] == "OK"
    assert line["grpc_service"] == SERVICE
    assert line["tenant"] == "default"
    assert line["duration_ms"] >= 0
    assert line["logger"] == "admission_service.calls"


@pytest.mark.parametrize("sent", [None, "", "has spaces", "x" * 200, 'quote"d'])
async def test_a_missing_or_implausible_request_id_is_replaced(
    stub: Stub, json_log: io.StringIO, sent: str | None
) -> None:
    metadata = (("x-request-id", sent),) if sent is not None else ()
    call = stub.ListSessions(api.ListSessionsRequest(), metadata=metadata)
    await call
    echoed = dict(tuple(await call.initial_metadata()))["x-request-id"]
    assert isinstance(echoed, str) and len(echoed) == 32 and echoed != sent
    assert [r["request_id"] for r in call_lines(json_log, "ListSessions")][-1] == echoed


async def test_an_error_is_logged_with_the_request_id_of_its_call(
    stub: Stub, json_log: io.StringIO
) -> None:
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.GetSession(
            api.GetSessionRequest(session_id="nowhere"), metadata=(("x-request-id", "r-404"),)
        )
    await recorded(lambda: call_lines(json_log, "GetSession"))
    lines = [r for r in records(json_log) if r.get("request_id") == "r-404"]
    assert {r["logger"] for r in lines} == {
        "admission_service.api.error_status",
        "admission_service.calls",
    }
    assert [r["grpc_code"] for r in lines if "grpc_code" in r] == ["NOT_FOUND"]


SECRET = "SECRET-PROMPT-" + uuid.uuid4().hex


async def drive_with_secrets(client: ApiClient, json_log: io.StringIO) -> None:
    """Calls whose requests and responses carry ``SECRET``; returns once each is logged."""
    stub = client.stub
    session_id = await create_session(stub)
    admitted = await stub.Admit(admit_request(session_id, f"{SECRET} prompt", f"{SECRET} user"))
    await stub.Record(
        api.RecordRequest(
            session_id=session_id,
            admission_id=admitted.admission_id,
            assistant=pb.Message(
                role=pb.MESSAGE_ROLE_ASSISTANT,
                content=[pb.ContentBlock(text=pb.TextBlock(text=f"{SECRET} answer"))],
            ),
        )
    )
    await stub.Inspect(api.InspectRequest(session_id=session_id))
    # Failing calls too: the bad input carries the secret.
    for bad in (
        admit_request(session_id, f"{SECRET}\x00", "u", turn=1, route=None),
        admit_request(session_id, SECRET * 1000, "u", turn=1, expected_revision=999),
        admit_request("no-such-" + SECRET[:20], SECRET, SECRET),
    ):
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Admit(bad)
    await recorded(lambda: len(call_lines(json_log, "Admit")) == 4)


async def test_prompt_and_message_text_never_reach_the_logs(
    start_api: StartApi, json_log: io.StringIO
) -> None:
    client = await start_api(log_level="DEBUG")
    await drive_with_secrets(client, json_log)
    assert call_lines(json_log, "Record"), "the calls were logged"
    assert SECRET not in json_log.getvalue()


async def test_payloads_are_logged_only_when_asked_for(
    start_api: StartApi, json_log: io.StringIO
) -> None:
    client = await start_api(log_payloads=True)
    await drive_with_secrets(client, json_log)
    payloads = [r for r in records(json_log) if r["message"] == "request payload"]
    assert payloads and all(r["level"] == "DEBUG" for r in payloads)
    assert any(SECRET in json.dumps(r) for r in payloads)


# ---- tracing --------------------------------------------------------------------------------


async def test_calls_and_statements_are_traced_when_an_exporter_is_configured(
    database_url: str,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = await start_server(api_settings(database_url), tracer_provider=provider)
    client = connect(server)
    try:
        session_id = await create_session(client.stub)
        exporter.clear()
        trace_id = uuid.uuid4().hex
        parent = f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"
        await client.stub.Admit(
            admit_request(session_id, f"{SECRET} prompt", "u"),
            metadata=(("traceparent", parent), ("x-request-id", "traced-1")),
        )
    finally:
        await client.close()
    spans = exporter.get_finished_spans()
    [call] = [s for s in spans if s.kind is SpanKind.SERVER]
    assert call.name == f"{SERVICE}/Admit"
    assert call.context is not None and call.parent is not None
    assert format(call.context.trace_id, "032x") == trace_id  # continues the caller's trace
    attributes = dict(call.attributes or {})
    assert attributes["rpc.system"] == "grpc"
    assert attributes["rpc.method"] == "Admit"
    assert attributes["rpc.grpc.status_code"] == 0
    assert attributes["pas.request_id"] == "traced-1"
    statements = [s for s in spans if s.kind is SpanKind.CLIENT]
    assert statements, "no database spans"
    for span in statements:
        assert span.parent is not None and span.parent.span_id == call.context.span_id
        assert dict(span.attributes or {})["db.system"] == "postgresql"
    assert "SELECT" in {s.name.split()[0] for s in statements}
    assert len(statements) >= 2  # the session read, the writes
    assert SECRET not in repr([dict(s.attributes or {}) for s in spans])


async def test_tracing_is_off_by_default(api: ApiClient) -> None:
    assert api.server.tracer_provider is None
