"""Sessions driven through a deployed topology, and the checks that they stayed exact.

Shared by the process-level topology test (tests/deploy/test_topology.py, behind pgbouncer) and
the compose test under a real Docker engine (tests/compose/). Each session ``n`` has a known
script: at step ``s`` the user says ``s{n} u{s}``, the assistant answers ``s{n} a{s}``, and the
system prompt changes at the steps of ``PROMPT_CHANGES``; so the history a session must have
after any number of steps is known exactly.
"""

from __future__ import annotations

import urllib.request
import uuid
from typing import Protocol

from admission_service.domain.surface import SessionLog
from prometheus_client.parser import text_string_to_metric_families
from promptadmission import SyncAdmissionClient
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import IN_HISTORY_ROUTE, user
from tests.auditing import event_from_proto, message_from_proto

PROMPT_CHANGES = {0: "P0", 2: "P1", 4: "P2"}  # step -> the prompt from that step on
# In every prompt and user message: the logs must never show it.
SECRET = "TOPOLOGY-SECRET-" + uuid.uuid4().hex
SERVICE = "promptadmission.v1.AdmissionService"


class StepCaller(Protocol):
    """What running a step needs: a ``SyncAdmissionClient``, or a wrapper around one."""

    def admit(self, request: api.AdmitRequest) -> api.AdmitResponse: ...

    def record(self, request: api.RecordRequest) -> api.RecordResponse: ...


def assistant(text: str) -> pb.Message:
    return pb.Message(
        role=pb.MESSAGE_ROLE_ASSISTANT, content=[pb.ContentBlock(text=pb.TextBlock(text=text))]
    )


def expected_messages(n: int, steps: int) -> list[tuple[int, str]]:
    """On an in-history route a changed prompt is appended after the history (SPEC §2)."""
    messages: list[tuple[int, str]] = []
    for step in range(steps):
        if step in PROMPT_CHANGES:
            messages.append((pb.MESSAGE_ROLE_SYSTEM, f"{PROMPT_CHANGES[step]} {SECRET}"))
        messages.append((pb.MESSAGE_ROLE_USER, f"s{n} u{step} {SECRET}"))
        messages.append((pb.MESSAGE_ROLE_ASSISTANT, f"s{n} a{step}"))
    return messages


def prompt_at(step: int) -> str:
    return f"{PROMPT_CHANGES[max(s for s in PROMPT_CHANGES if s <= step)]} {SECRET}"


def run_step(client: StepCaller, session_id: str, n: int, step: int) -> int:
    """Admit and record one step of session ``n``; the number of Admit calls made (step 3 is
    admitted twice with the same request id: the retry, wherever it lands, replays exactly)."""
    request = api.AdmitRequest(
        session_id=session_id,
        request_id=str(uuid.uuid4()),
        turn=step,
        rendered_prompt=prompt_at(step),
        route=IN_HISTORY_ROUTE,
        users=[user(f"s{n} u{step} {SECRET}")],
    )
    admitted = client.admit(request)
    admits = 1
    if step == 3:
        assert client.admit(request) == admitted
        admits += 1
    client.record(
        api.RecordRequest(
            session_id=session_id,
            request_id=str(uuid.uuid4()),  # its own: repeating the call is safe
            admission_id=admitted.admission_id,
            assistant=assistant(f"s{n} a{step}"),
            usage=pb.Usage(input_tokens=100, cache_read_tokens=admitted.forecast.reused_tokens),
        )
    )
    return admits


def drive(client: StepCaller, session_id: str, n: int, steps: range) -> int:
    """Run ``steps`` of session ``n``; the number of Admit calls made."""
    return sum(run_step(client, session_id, n, step) for step in steps)


def check_history(client: SyncAdmissionClient, session_id: str, n: int, steps: int) -> None:
    """The derived request is exactly the first ``steps`` steps, and re-derives from the
    event log."""
    inspected = client.inspect(api.InspectRequest(session_id=session_id))
    served = [(m.role, m.content[0].text.text) for m in inspected.request.messages]
    assert served == expected_messages(n, steps), session_id
    events = client.all_events(session_id)
    assert [e.seq for e in events] == list(range(len(events)))
    log = SessionLog(event_from_proto(e) for e in events)
    assert [message_from_proto(m) for m in inspected.request.messages] == log.derived_messages()


def scrape(port: int) -> dict[tuple[str, str, str], float]:
    """A replica's ``grpc_server_handled_total``, keyed by (service, method, code)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.labels["grpc_service"], s.labels["grpc_method"], s.labels["grpc_code"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "grpc_server_handled_total"
    }
