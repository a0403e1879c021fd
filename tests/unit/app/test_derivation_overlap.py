"""A large derived request's digest and its provider body are made at once, each in a thread
(``derivation.derive_request``, ``off_loop.started_off_the_loop``): the digest hashes every frame
(~3 ms for a 4.6 MB request) with the GIL released, so waiting for it before rendering the body
only added its time to the call (S7 in a provider format)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from admission_service.api import convert
from admission_service.app import derivation, handlers
from admission_service.app.commands import AdmitCommand
from admission_service.app.deps import Deps
from admission_service.domain.wire import WireFormat
from admission_service.off_loop import LARGE_BYTES, started_off_the_loop

from tests.app_support import CATALOG, ROUTE, user
from tests.fakes.storage import FakeStorage
from tests.unit.app.test_use_cases import TOKENS


async def test_a_large_requests_digest_is_made_while_its_body_renders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rendering = threading.Event()
    overlapped: list[bool] = []
    original_derive, original_render = derivation.derive, derivation.render_body

    def derive(*args: Any) -> Any:
        # Sequential work would wait here for the rendering, which starts after it, in vain.
        overlapped.append(rendering.wait(5))
        return original_derive(*args)

    def render_body(*args: Any, **kwargs: Any) -> Any:
        rendering.set()
        return original_render(*args, **kwargs)

    monkeypatch.setattr(derivation, "derive", derive)
    monkeypatch.setattr(derivation, "render_body", render_body)
    deps = Deps.compose(
        None, CATALOG, page_tokens=TOKENS, storage=FakeStorage(), encoders=convert.ENCODERS
    )
    await handlers.create_session(deps, "t", "s", None)
    large = "x" * LARGE_BYTES
    command = AdmitCommand(
        "s", 1, 1, "A", (), ROUTE, (user(large),), wire_format=WireFormat.OPENAI_CHAT
    )
    reply = await handlers.admit(deps, "t", command, None)
    assert overlapped == [True]
    assert reply.result is not None and large in reply.result.request.body.decode()


async def test_small_work_is_done_at_once_and_large_work_in_a_thread() -> None:
    caller = threading.get_ident()
    small = started_off_the_loop(LARGE_BYTES - 1, threading.get_ident)
    assert small.done() and small.result() == caller
    large = started_off_the_loop(LARGE_BYTES, threading.get_ident)
    assert await large != caller
