"""docker-compose.yml under a real Docker engine, checked through its balancer.

Run by ``make compose-test`` (scripts/compose-test.sh), which builds the images, brings the
topology up under a project name of its own and passes it here in PAS_COMPOSE_PROJECT,
PAS_COMPOSE_FILE and the published ports; without those this module is skipped. The tests run
in file order against the one running topology: the last one stops a replica.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from promptadmission import AdmissionError, RetryPolicy, SyncAdmissionClient, with_request_id
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import tool_step
from tests.clients.large_sessions import (
    FAMILY,
    ONE_MILLION,
    WIRE_NAMES,
    Family,
    LargeDriver,
    Served,
    full_request,
    grow,
)
from tests.deploy.sessions import SECRET, SERVICE, check_history, run_step, scrape
from tests.deploy.topology import DEMO_TOKEN

PROJECT = os.environ.get("PAS_COMPOSE_PROJECT", "")
if not PROJECT:
    pytest.skip("needs a running compose project: run `make compose-test`", allow_module_level=True)
COMPOSE_FILE = os.environ["PAS_COMPOSE_FILE"]
DOCKER = os.environ.get("PAS_COMPOSE_DOCKER", "docker")
LB_TARGET = f"127.0.0.1:{os.environ['PAS_GRPC_PORT']}"
METRICS = {
    "service-a": int(os.environ["PAS_METRICS_PORT_A"]),
    "service-b": int(os.environ["PAS_METRICS_PORT_B"]),
}
IMAGE_USER = "10001:10001"
ROOT = Path(__file__).resolve().parents[2]
LARGE_DRIVER = ROOT / "clients/typescript/dist/test/largeDriver.js"
SESSIONS = 8
STEPS = 24
STOP_AFTER_STEPS = SESSIONS * STEPS // 3  # acknowledged steps before service-a is stopped
# Generous: retries of calls that met the stopping replica wait for their backoff.
CALL_TIMEOUT = 20.0
# Outcomes that leave a step unknown to the client, not failed: nginx resets a call whose
# replica refused it while shutting down (CANCELLED), or the call outlived its deadline.
UNKNOWN_OUTCOMES = frozenset({"CANCELLED", "DEADLINE_EXCEEDED"})
REPEATS = 3

Request = TypeVar("Request", api.AdmitRequest, api.RecordRequest)
Response = TypeVar("Response")


class StepClient:
    """A client that must get each step done: a call whose outcome it cannot know is repeated
    with the same request id (a replay if it was applied). ``repeated`` counts those."""

    def __init__(self, client: SyncAdmissionClient) -> None:
        self.client = client
        self.repeated = 0

    def admit(self, request: api.AdmitRequest) -> api.AdmitResponse:
        return self._repeat(self.client.admit, request)

    def record(self, request: api.RecordRequest) -> api.RecordResponse:
        return self._repeat(self.client.record, request)

    def _repeat(self, call: Callable[[Request], Response], request: Request) -> Response:
        assert request.request_id, "only a call with its own request id may be repeated"
        for attempt in range(REPEATS):
            try:
                return call(request)
            except AdmissionError as error:
                if error.code.name not in UNKNOWN_OUTCOMES or attempt == REPEATS - 1:
                    raise
                self.repeated += 1
        raise AssertionError("unreachable")


def run(*command: str, timeout: float = 60) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def compose(*args: str) -> str:
    return run("docker-compose", "--project-name", PROJECT, "--file", COMPOSE_FILE, *args)


def containers(service: str) -> list[str]:
    """The ids of every container of ``service``, running or not."""
    return compose("ps", "-a", "-q", service).split()


def container(service: str) -> str:
    [only] = containers(service)
    return only


def inspect(service: str, template: str) -> str:
    return run(DOCKER, "inspect", "--format", template, container(service)).strip()


def logs(service: str) -> str:
    done = subprocess.run(
        [DOCKER, "logs", container(service)], capture_output=True, text=True, timeout=30
    )
    return done.stdout + done.stderr


def psql(query: str) -> str:
    """A query in the pas database, as the postgres superuser inside its container."""
    return run(
        DOCKER, "exec", container("postgres"),
        "psql", "-U", "postgres", "-d", "pas", "-tAc", query,
    ).strip()  # fmt: skip


def health(service: str = "") -> int:
    with grpc.insecure_channel(LB_TARGET) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        )
    return int(reply.status)


def client(
    *,
    retry: RetryPolicy | None = None,
    metadata: tuple[tuple[str, str], ...] = (),
    timeout: float = CALL_TIMEOUT,
) -> SyncAdmissionClient:
    return SyncAdmissionClient(
        LB_TARGET, token=DEMO_TOKEN, retry=retry, metadata=metadata, timeout=timeout
    )


def test_health_is_serving_through_the_balancer() -> None:
    assert health() == health_pb2.HealthCheckResponse.SERVING
    assert health(SERVICE) == health_pb2.HealthCheckResponse.SERVING


def test_the_containers_run_as_the_unprivileged_user() -> None:
    for service in ("migrate", "service-a", "service-b"):
        assert inspect(service, "{{.Config.User}}") == IMAGE_USER, service
    for service in ("service-a", "service-b"):
        uid = run(DOCKER, "exec", container(service), "id", "-u").strip()
        assert uid == "10001", service


def test_the_migrations_ran_once_by_the_job_and_the_replicas_have_data_rights_only() -> None:
    assert len(containers("migrate")) == 1
    assert inspect("migrate", "{{.State.Status}} {{.State.ExitCode}}") == "exited 0"
    job = logs("migrate")
    assert job.count("Running upgrade  -> 0001") == 1, job
    assert "role pas_app may read and write the rows of" in job
    for service in ("service-a", "service-b"):
        assert "running database migrations" not in logs(service), service
    assert psql("SELECT count(*) FROM alembic_version") == "1"
    # The job's role owns the schema; the replicas' role has rows only, and is who they are.
    assert set(psql("SELECT tableowner FROM pg_tables WHERE schemaname = 'public'").split()) == {
        "pas"
    }
    assert psql("SELECT has_schema_privilege('pas_app', 'public', 'CREATE')") == "f"
    assert psql("SELECT rolsuper OR rolcreaterole OR rolcreatedb FROM pg_roles "
                "WHERE rolname = 'pas_app'") == "f"  # fmt: skip
    # Who the replicas are: a call through the balancer opens a pool connection, and the health
    # probe keeps its own.
    with client() as caller:
        caller.list_sessions()
    users = psql(
        "SELECT DISTINCT usename FROM pg_stat_activity"
        " WHERE application_name LIKE 'admission-service%'"
    )
    assert users.split() == ["pas_app"]


def test_calls_keep_their_metadata_and_errors_through_the_balancer() -> None:
    no_retry = RetryPolicy(max_attempts=1)
    # The caller's request id reaches the replica that served the call, through nginx.
    request_id = f"compose-{uuid.uuid4().hex}"
    traced = client(metadata=(("x-request-id", request_id),))
    session_id = traced.create_session().session.session_id
    traced.close()
    replica_lines = [
        json.loads(line)
        for service in ("service-a", "service-b")
        for line in logs(service).splitlines()
        if request_id in line
    ]
    assert [line["grpc_method"] for line in replica_lines] == ["CreateSession"]
    assert request_id in logs("lb")
    # Errors keep their google.rpc.Status through nginx; no token, no service.
    plain = client(retry=no_retry)
    with pytest.raises(AdmissionError) as missing:
        plain.get_session(api.GetSessionRequest(session_id="no-such-session"))
    assert (missing.value.code.name, missing.value.reason) == ("NOT_FOUND", "SESSION_NOT_FOUND")
    plain.delete_session(api.DeleteSessionRequest(session_id=session_id))
    plain.close()
    with pytest.raises(AdmissionError) as anonymous:
        SyncAdmissionClient(LB_TARGET, retry=no_retry).list_sessions()
    assert anonymous.value.code.name == "UNAUTHENTICATED"


def test_a_response_over_4_mib_streams_through_the_balancer() -> None:
    """StreamAdmit's 1 MiB chunks pass nginx to a client with gRPC's default 4 MiB receive
    limit (issue 23 item 2): five 1 MB tool outputs, FULL; the unary Admit of it is refused."""
    route = pb.Route(provider="other", model="big-context")
    with client(timeout=120) as caller:
        session_id = caller.create_session().session.session_id
        step = caller.admit_streamed(
            api.AdmitRequest(session_id=session_id, turn=1, rendered_prompt="p", route=route)
        )
        for number in range(1, 5):
            step = caller.admit_streamed(
                tool_step(session_id, number, step.admission_id, 1_000_000, route)
            )
        last = with_request_id(tool_step(session_id, 5, step.admission_id, 1_000_000, route))
        with pytest.raises(AdmissionError) as refused:
            caller.admit(last)
        assert refused.value.reason == "RESPONSE_TOO_LARGE"
        streamed = caller.admit_streamed(last)
        assert streamed.ByteSize() > 4 * 1024 * 1024
        assert streamed.request.total_messages == 11  # the system message, 5 x (call, result)
        caller.delete_session(api.DeleteSessionRequest(session_id=session_id))


def test_a_million_token_session_streams_through_the_balancer_to_both_clients(
    tmp_path: Path,
) -> None:
    """A FULL StreamAdmit of a session of over a million tokens (the 1M sessions of
    tests/clients/test_large_sessions.py: five 920 000-character tool outputs on an ``openai``
    and an ``anthropic`` route) passes nginx, in every wire format, to the Python client
    (gRPC's default 4 MiB receive limit) and the TypeScript client (a 4 MiB read limit): both
    receive the same derived request, byte for byte (issue 23). Each client's time per Admit
    goes to $PAS_LARGE_SESSIONS_REPORT when it is set."""
    node = shutil.which("node")
    if node is None or not LARGE_DRIVER.exists():
        missing = f"node and {LARGE_DRIVER.relative_to(ROOT)} (`make ts-build`)"
        if os.environ.get("PAS_REQUIRE_TYPESCRIPT") == "1":
            pytest.fail(f"needs {missing}")
        pytest.skip(f"needs {missing}")
    typescript = LargeDriver(
        node, LARGE_DRIVER, f"http://{LB_TARGET}", env={**os.environ, "PAS_TOKEN": DEMO_TOKEN}
    )
    rows: list[Served] = []
    try:
        with client(timeout=300) as caller:
            families: tuple[Family, ...] = ("openai", "anthropic")
            sessions = {family: grow(caller, "1M", family) for family in families}
            for wire, family in FAMILY.items():
                grown = sessions[family]
                started = time.perf_counter()
                response = caller.admit_streamed(full_request(grown, wire, step=len(rows)))
                seconds = time.perf_counter() - started
                derived = response.request
                assert (derived.view, derived.first_message_index) == (pb.REQUEST_VIEW_FULL, 0)
                assert response.forecast.total_tokens >= ONE_MILLION
                assert response.ByteSize() > 4 * 1024 * 1024
                rows.append(
                    Served(
                        "python",
                        WIRE_NAMES[wire],
                        "1M",
                        seconds,
                        response.ByteSize(),
                        derived.total_messages,
                        response.forecast.total_tokens,
                        len(derived.body_json.encode()),
                    )
                )
                derived_file = tmp_path / "derived.bin"
                answer = typescript.admit(full_request(grown, wire, step=len(rows)), derived_file)
                assert derived_file.read_bytes() == derived.SerializeToString(deterministic=True)
                rows.append(
                    Served(
                        "typescript",
                        WIRE_NAMES[wire],
                        "1M",
                        answer["admitMs"] / 1000,
                        answer["responseBytes"],
                        answer["totalMessages"],
                        answer["totalTokens"],
                    )
                )
            for grown in sessions.values():
                caller.delete_session(api.DeleteSessionRequest(session_id=grown.session_id))
    finally:
        typescript.close()
        if path := os.environ.get("PAS_LARGE_SESSIONS_REPORT"):
            Path(path).write_text(json.dumps([row.row() for row in rows], indent=1))


def test_sessions_stay_exact_across_both_replicas_and_one_stopped_mid_run() -> None:
    # Retries reuse the request id, so a call that met the stopping replica is replayed, never
    # applied twice; every step must be acknowledged, and every acknowledged step kept.
    plain = client(retry=RetryPolicy(max_attempts=8, max_backoff=1.0))
    steady = StepClient(plain)
    sessions = [plain.create_session().session.session_id for _ in range(SESSIONS)]
    acknowledged = [0] * SESSIONS
    enough = threading.Event()
    stopped = threading.Event()
    served_before_stop: dict[str, float] = {}

    def session_worker(n: int) -> None:
        for step in range(STEPS):
            run_step(steady, sessions[n], n, step)
            acknowledged[n] += 1
            if sum(acknowledged) >= STOP_AFTER_STEPS:
                enough.set()
            if step == STEPS // 2:
                # Half the steps after the stop, whenever this session gets there.
                stopped.wait(timeout=60)

    with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
        running = [pool.submit(session_worker, n) for n in range(SESSIONS)]
        assert enough.wait(timeout=120), f"only {sum(acknowledged)} steps acknowledged"
        for service, port in METRICS.items():
            served_before_stop[service] = scrape(port).get((SERVICE, "Admit", "OK"), 0)
        stop_started = time.monotonic()
        run(DOCKER, "stop", container("service-a"), timeout=60)
        stop_seconds = time.monotonic() - stop_started
        stopped.set()
        for future in running:
            future.result()  # a step that failed for good fails the test here

    assert acknowledged == [STEPS] * SESSIONS
    # Both replicas served before one was stopped; nginx sent calls to both.
    assert all(count > 0 for count in served_before_stop.values()), served_before_stop
    upstreams = {
        json.loads(line)["upstream"]
        for line in logs("lb").splitlines()
        if line.startswith("{") and '"upstream"' in line
    }
    assert len({u for u in upstreams if u and "," not in u}) >= 2, upstreams
    # Every acknowledged step is in its session, exactly once and in order.
    for n, session_id in enumerate(sessions):
        check_history(plain, session_id, n, STEPS)
    assert inspect("service-a", "{{.State.Running}}") == "false"
    assert stop_seconds < 20, f"docker stop took {stop_seconds:.1f}s (graceful stop expected)"
    assert health() == health_pb2.HealthCheckResponse.SERVING  # the other replica serves
    plain.close()

    for service in ("service-a", "service-b"):
        text = logs(service)
        lines = [line for line in text.splitlines() if line.strip()]
        assert lines and all(json.loads(line) for line in lines), service  # JSON, line by line
        assert SECRET not in text, service
    assert SECRET not in logs("lb")
