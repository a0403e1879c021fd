"""Large content never stalls the worker (issue 23 item 5), through the real server.

A step's large texts are counted off the event loop, before its transaction
(``tokenizers.counter_off_the_loop``): another session's Admit completes while a large one is
being counted. A step whose new messages alone are over the response bound is refused before
anything is counted. The speed of the other session under that load is measured in
``bench.large_content``, not here.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from admission_service import off_loop, tokenizers
from admission_service.api import convert, malformed
from admission_service.app import derivation, replay
from admission_service.domain import wire
from admission_service.storage import codec
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import admit_request, create_session, rich_error

MIB = 1 << 20
# DeepSeek's route: its tokenizer counts a MiB in ~0.5 s, with the GIL released by its batch API.
ROUTE = pb.Route(provider="deepseek", model="deepseek-flash", context_window=1_000_000)


def fresh_text(chars: int) -> str:
    """Prose-like text no tokenizer cache has seen (random words)."""
    rng = random.Random()
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    words: list[str] = []
    size = 0
    while size < chars:
        word = "".join(rng.choice(letters) for _ in range(rng.randint(1, 9)))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


@pytest.fixture
def counting_started(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when a counter starts counting a batch of large texts (in its thread)."""
    started = threading.Event()
    original = tokenizers.LoadedCounter.count_many

    def count_many(self: tokenizers.LoadedCounter, texts: list[str]) -> list[int]:
        if any(len(text) >= tokenizers.OFF_LOOP_CHARS for text in texts):
            started.set()
        return original(self, texts)

    monkeypatch.setattr(tokenizers.LoadedCounter, "count_many", count_many)
    return started


async def test_another_session_is_served_while_a_large_admit_is_counted(
    stub: api_grpc.AdmissionServiceAsyncStub, counting_started: threading.Event
) -> None:
    large_session = await create_session(stub)
    other_session = await create_session(stub)
    large_users = [fresh_text(MIB) for _ in range(3)]
    large = asyncio.ensure_future(
        stub.Admit(admit_request(large_session, "You are terse.", *large_users, route=ROUTE))
    )
    assert await asyncio.to_thread(counting_started.wait, 120), "the large texts were not counted"
    other = await stub.Admit(admit_request(other_session, "You are terse.", "hi", route=ROUTE))
    # The other session's whole call completed while the large one was still in flight: its
    # counting did not hold the worker.
    assert not large.done()
    assert other.revision > 0
    response = await large
    assert [m.content[0].text.text for m in response.request.messages[1:]] == large_users


async def test_a_step_too_large_to_return_is_refused_before_counting(
    stub: api_grpc.AdmissionServiceAsyncStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[int] = []
    one, many = tokenizers.LoadedCounter.count, tokenizers.LoadedCounter.count_many

    def count(self: tokenizers.LoadedCounter, text: str) -> int:
        counted.append(len(text))
        return one(self, text)

    def count_many(self: tokenizers.LoadedCounter, texts: list[str]) -> list[int]:
        counted.extend(len(text) for text in texts)
        return many(self, texts)

    monkeypatch.setattr(tokenizers.LoadedCounter, "count", count)
    monkeypatch.setattr(tokenizers.LoadedCounter, "count_many", count_many)
    session_id = await create_session(stub)
    users = ["x" * MIB for _ in range(5)]  # 5 MiB of new messages, over the 4 MiB bound
    for validate_only in (False, True):
        request = admit_request(session_id, "p", *users, route=ROUTE, validate_only=validate_only)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Admit(request)
        error = rich_error(raised.value)
        assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.reason == "RESPONSE_TOO_LARGE"
        assert error.error_infos[0].metadata["bound"] == "max_response_bytes"
    assert not [size for size in counted if size >= tokenizers.OFF_LOOP_CHARS]
    session = await stub.GetSession(api.GetSessionRequest(session_id=session_id))
    assert session.session.revision == 0


async def test_another_session_is_served_while_a_large_body_is_rendered(
    stub: api_grpc.AdmissionServiceAsyncStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large provider body is rendered in a thread (``off_loop.LARGE_BYTES``):
    held there until the other session's whole call has completed, which it could not if the
    rendering held the event loop."""
    rendering, release = threading.Event(), threading.Event()
    released: list[bool] = []  # whether the other call completed while the render was held
    render_body = wire.render_body

    def held_render(*args: Any, **kwargs: Any) -> Any:
        if args[0].size >= off_loop.LARGE_BYTES:
            rendering.set()
            released.append(release.wait(10))
        return render_body(*args, **kwargs)

    monkeypatch.setattr(derivation, "render_body", held_render)
    large_session = await create_session(stub)
    other_session = await create_session(stub)
    chat = pb.WIRE_FORMAT_OPENAI_CHAT
    large = asyncio.ensure_future(
        stub.Admit(admit_request(large_session, "You are terse.", "x" * MIB, wire_format=chat))
    )
    try:
        assert await asyncio.to_thread(rendering.wait, 60), "the large body was not rendered"
        # On the event loop, the held render would hold this call too, until its wait ends.
        other = await stub.Admit(
            admit_request(other_session, "You are terse.", "hi", wire_format=chat)
        )
        assert not large.done()
        assert other.request.body_json
    finally:
        release.set()
    response = await large
    assert released == [True], "the rendering held the event loop"
    assert len(response.request.body_json) > MIB


async def test_another_session_is_served_while_a_large_request_is_converted(
    stub: api_grpc.AdmissionServiceAsyncStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large request becomes its command (its texts Python strings, its encoding hashed for
    the request_id) in a thread (``malformed.OFF_LOOP_BYTES``): held there until the other
    session's whole call has completed, which it could not if the conversion held the loop."""
    converting, release = threading.Event(), threading.Event()
    released: list[bool] = []
    admit_command = convert.admit_command

    def held_conversion(request: api.AdmitRequest, **kwargs: Any) -> Any:
        if request.ByteSize() > malformed.OFF_LOOP_BYTES:
            converting.set()
            released.append(release.wait(10))
        return admit_command(request, **kwargs)

    monkeypatch.setattr(convert, "admit_command", held_conversion)
    large_session = await create_session(stub)
    other_session = await create_session(stub)
    large = asyncio.ensure_future(
        stub.Admit(admit_request(large_session, "You are terse.", "x" * MIB, request_id="r-l"))
    )
    try:
        assert await asyncio.to_thread(converting.wait, 60), "the request was not converted"
        other = await stub.Admit(admit_request(other_session, "You are terse.", "hi"))
        assert not large.done()
        assert other.revision > 0
    finally:
        release.set()
    response = await large
    assert released == [True], "the conversion held the event loop"
    assert response.request.messages[-1].content[0].text.text == "x" * MIB


# Each piece of a large step's work that runs in a thread (``off_loop``), the function doing it,
# and how to tell its call on the large step from the other session's.
LARGE = MIB // 2
_LARGE_STEP_WORK: dict[str, tuple[object, str, Callable[..., bool]]] = {
    "its texts hashed for their remembered counts": (
        tokenizers,
        "_digest",
        lambda text: len(text) >= LARGE,
    ),
    "its messages encoded for the log and the surface": (
        codec,
        "encode_and_frame",
        lambda message: message.chars() >= LARGE,
    ),
    "its derived request's digest": (
        derivation,
        "derive",
        lambda prefix, query, shadowed, found, tail, end: len(tail.frames) >= LARGE,
    ),
    "its response encoded at the edge": (
        convert,
        "encoded_response",
        lambda method, reply: replay.encoding_size(reply.result) >= LARGE,
    ),
    "its response encoded and hashed for its request_id": (
        replay,
        "stored_form",
        lambda result, payload, encode, through_seq: len(payload) >= LARGE,
    ),
}


@pytest.mark.parametrize("work", list(_LARGE_STEP_WORK))
async def test_another_session_is_served_while_a_large_step_is_worked_on(
    stub: api_grpc.AdmissionServiceAsyncStub, monkeypatch: pytest.MonkeyPatch, work: str
) -> None:
    """Each piece of a large step's CPU work (tens of milliseconds for 15 MiB) is done in a
    thread: held there until the other session's whole call has completed, which it could not
    if that work held the event loop."""
    owner, name, on_the_large_step = _LARGE_STEP_WORK[work]
    working, release = threading.Event(), threading.Event()
    released: list[bool] = []
    original = getattr(owner, name)

    def held(*args: Any) -> Any:
        if on_the_large_step(*args):
            working.set()
            released.append(release.wait(10))
        return original(*args)

    monkeypatch.setattr(owner, name, held)
    large_session = await create_session(stub)
    other_session = await create_session(stub)
    text = fresh_text(MIB)
    request = admit_request(large_session, "You are terse.", text, route=ROUTE)
    if name == "stored_form":
        request.request_id = "r-large"
    large = asyncio.ensure_future(stub.Admit(request))
    try:
        assert await asyncio.to_thread(working.wait, 60), f"{name} was not called"
        other = await stub.Admit(admit_request(other_session, "You are terse.", "hi", route=ROUTE))
        assert not large.done()
        assert other.revision > 0
    finally:
        release.set()
    response = await large
    assert released == [True], f"{work}: held the event loop"
    assert response.request.messages[1].content[0].text.text == text
