"""A session of a million tokens and one of 20 MB, FULL and streamed, in every wire format, to
both clients, checked against the official SDKs (issue 23, "checked against the outside
world").

Two sessions per size, grown as a harness grows them (tests/clients/large_sessions.py): one on
an ``openai`` route (o200k_base counts its tokens), admitted in NEUTRAL, OPENAI_CHAT and
OPENAI_RESPONSES, one on an ``anthropic`` route (Claude's tokenizer), admitted in
ANTHROPIC_MESSAGES. The 1M session is five 920 000-character tool outputs (~4.6 MB, over a
million tokens by the service's count); the 20 MB one adds 16 tool outputs with a PNG each and a
screenshot with the question (~20.8 MB of content). For each format, a FULL StreamAdmit of it
reaches

* the Python client (``admit_streamed``, gRPC's default 4 MiB receive limit), whose kit
  rebuilds the body (``HeldRequest``): the body validates against the SDK's types
  (``tests.provider.oracles.check_body``), and posted by the official Python SDK to a local
  recording server, the bytes that arrive are the rebuilt body serialized, byte for byte;
* the TypeScript client (``admitStreamed`` at a 4 MiB read limit, clients/typescript/test/
  largeDriver.ts), whose derived request is the Python client's byte for byte, whose rebuilt
  body (``JSON.stringify``) is byte-equal to what the Python SDK posted, and which posts it with
  the official Node SDK (``openai``, ``@anthropic-ai/sdk``): the same bytes arrive.

Each client's time for each Admit is written, with the sizes, to ``large_sessions.json`` in
the run's temporary directory (and to ``$PAS_LARGE_SESSIONS_REPORT`` when set).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from admission_service import tokenizers
from promptadmission import SyncAdmissionClient
from promptadmission.kit.bodies import HeldRequest
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.clients.large_sessions import (
    FAMILY,
    ONE_MILLION,
    WIRE_NAMES,
    Family,
    Grown,
    LargeDriver,
    Served,
    Size,
    full_request,
    grow,
)
from tests.provider.oracles import check_body
from tests.provider.recording import Recorder, recording_server

pytestmark = pytest.mark.timeout(900)

SIZES: tuple[Size, ...] = ("1M", "20MB")
MODEL = "m"
PATHS = {
    "openai_chat": "/v1/chat/completions",
    "openai_responses": "/v1/responses",
    "anthropic_messages": "/v1/messages",
}


@pytest.fixture(scope="module")
def python_client(server_target: str) -> Iterator[SyncAdmissionClient]:
    # Default channel limits: a 4 MiB receive limit, which StreamAdmit's chunks pass.
    with SyncAdmissionClient(server_target, timeout=300) as client:
        yield client


@pytest.fixture(scope="module")
def sessions(python_client: SyncAdmissionClient) -> Callable[[Size, Family], Grown]:
    """Each size's session on each family's route, grown once, the first time it is asked."""
    grown: dict[tuple[Size, Family], Grown] = {}

    def get(size: Size, family: Family) -> Grown:
        if (size, family) not in grown:
            grown[size, family] = grow(python_client, size, family)
        return grown[size, family]

    return get


@pytest.fixture(scope="module")
def typescript(node_driver: list[str], server_target: str) -> Iterator[LargeDriver]:
    driver = LargeDriver(
        node_driver[0], Path(node_driver[1]).with_name("largeDriver.js"), f"http://{server_target}"
    )
    yield driver
    driver.close()


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    with recording_server() as server:
        yield server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Served]]:
    """Every Admit's client, format, size and time; written out when the module ends."""
    rows: list[Served] = []
    yield rows
    report = json.dumps([row.row() for row in rows], indent=1)
    (tmp_path_factory.getbasetemp() / "large_sessions.json").write_text(report)
    if path := os.environ.get("PAS_LARGE_SESSIONS_REPORT"):
        Path(path).write_text(report)
    print(report)  # noqa: T201 (shown with -s)


def sdk_post(recorder: Recorder, wire: str, body: dict[str, Any]) -> tuple[bytes, list[str]]:
    """What the official Python SDK posts for ``body`` (the model and, for Anthropic, the
    required max_tokens added as a harness adds them): its bytes and its top-level keys in
    the order it sent them."""
    before = len(recorder.raw)
    if wire == "anthropic_messages":
        client = anthropic.Anthropic(api_key="test", base_url=recorder.base_url, max_retries=0)
        client.messages.create(model=MODEL, max_tokens=16, **body)
    else:
        sdk = openai.OpenAI(api_key="test", base_url=f"{recorder.base_url}/v1", max_retries=0)
        if wire == "openai_chat":
            sdk.chat.completions.create(model=MODEL, **body)
        else:
            sdk.responses.create(model=MODEL, **body)
    assert len(recorder.raw) == before + 1
    path, sent = recorder.bodies[-1]
    assert path == PATHS[wire]
    return recorder.raw[-1], list(sent)


def extra_fields(wire: str) -> dict[str, Any]:
    return {"model": MODEL, **({"max_tokens": 16} if wire == "anthropic_messages" else {})}


def serialized(body: dict[str, Any], keys: list[str]) -> bytes:
    """``body`` as the SDKs serialize JSON (compact, UTF-8), its top-level keys in ``keys``'
    order."""
    assert sorted(body) == sorted(keys)
    ordered = {key: body[key] for key in keys}
    return json.dumps(ordered, ensure_ascii=False, separators=(",", ":")).encode()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("wire", list(FAMILY), ids=WIRE_NAMES.get)
def test_a_full_streamed_admit_reaches_both_clients_as_the_sdks_send_it(
    size: Size,
    wire: pb.WireFormat.ValueType,
    sessions: Callable[[Size, Family], Grown],
    python_client: SyncAdmissionClient,
    typescript: LargeDriver,
    recorder: Recorder,
    served: list[Served],
    tmp_path: Path,
) -> None:
    family = FAMILY[wire]
    name = WIRE_NAMES[wire]
    assert tokenizers.counter_for(family).name != "heuristic", "the real tokenizer is missing"
    grown = sessions(size, family)
    request = full_request(grown, wire, step=len(served))

    started = time.perf_counter()
    response = python_client.admit_streamed(request)
    seconds = time.perf_counter() - started
    derived = response.request
    assert (derived.view, derived.first_message_index) == (pb.REQUEST_VIEW_FULL, 0)
    assert response.forecast.total_tokens >= ONE_MILLION  # by the route's real tokenizer
    if size == "20MB":
        assert response.ByteSize() > 20_000_000
    python = Served(
        "python",
        name,
        size,
        seconds,
        response.ByteSize(),
        derived.total_messages,
        response.forecast.total_tokens,
    )
    served.append(python)

    typescript_request = full_request(grown, wire, step=len(served))
    derived_file = tmp_path / "derived.bin"
    if wire == pb.WIRE_FORMAT_NEUTRAL:
        assert derived.content == pb.REQUEST_CONTENT_MESSAGES and not derived.body_json
        assert derived.ByteSize() >= grown.content_bytes
        answer = typescript.admit(typescript_request, derived_file)
    else:
        assert derived.content == pb.REQUEST_CONTENT_BODY and not derived.messages
        body_json = derived.body_json
        assert len(body_json.encode()) >= grown.content_bytes
        assert check_body(name, body_json, provider=family, in_history=False) == []
        python.body_bytes = len(body_json.encode())

        # The Python client's kit rebuilds the body; the official SDK posts it unchanged.
        body = HeldRequest.of(derived, None).body
        full = extra_fields(name) | body
        raw, keys = sdk_post(recorder, name, body)
        assert serialized(full, keys) == raw
        python.extra["sdk_post_bytes"] = len(raw)

        # The TypeScript client's rebuilt body, in the SDK's key order, is the same bytes, and
        # the official Node SDK posts exactly those.
        body_file = tmp_path / "body.json"
        answer = typescript.admit(
            typescript_request,
            derived_file,
            body_out=body_file,
            extra=extra_fields(name),
            keys=keys,
            post={"baseUrl": recorder.base_url, "wire": name},
        )
        assert body_file.read_bytes() == raw
        assert recorder.raw[-1] == raw, "the Node SDK posted other bytes"
        assert recorder.bodies[-1][0] == PATHS[name]
        recorder.raw.clear()
        recorder.bodies.clear()
        # The next step on the same connection (so the same worker), with a new user message
        # (on the Anthropic session it merges into the held last turn): a body up to
        # PAS_HELD_BODY_BYTES is made from the one the worker holds (app/held_bodies.py). It
        # is the body the Python kit rebuilds from the held one and a validate-only DELTA of
        # the same step, and the SDK's types accept it.
        held = HeldRequest.of(derived, None)
        step = full_request(grown, wire, step=len(served) + 100)
        step.users.add(role=pb.MESSAGE_ROLE_USER).content.add().text.text = "Now the tests."
        delta = api.AdmitRequest()
        delta.CopyFrom(step)
        delta.validate_only = True
        delta.view = pb.REQUEST_VIEW_DELTA
        delta.held_prefix.CopyFrom(held.prefix)
        rebuilt = HeldRequest.of(python_client.admit_streamed(delta).request, held).body
        whole = python_client.admit_streamed(step).request
        assert whole.view == pb.REQUEST_VIEW_FULL
        assert whole.body_json == json.dumps(rebuilt, ensure_ascii=False, separators=(",", ":"))
        assert check_body(name, whole.body_json, provider=family, in_history=False) == []
    # The same request, received by the other client: the same bytes.
    assert derived_file.read_bytes() == derived.SerializeToString(deterministic=True)
    assert answer["totalTokens"] == response.forecast.total_tokens
    served.append(
        Served(
            "typescript",
            name,
            size,
            answer["admitMs"] / 1000,
            answer["responseBytes"],
            answer["totalMessages"],
            answer["totalTokens"],
            answer.get("bodyBytes", 0),
            {"sdk_post_ms": round(answer["postMs"], 1)} if "postMs" in answer else {},
        )
    )
