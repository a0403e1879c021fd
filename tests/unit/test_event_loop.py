"""``serve``'s event loop (``PAS_EVENT_LOOP``): uvloop by default, asyncio's on request."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop
from admission_service.api import event_loop


def _loop_of(name: str) -> asyncio.AbstractEventLoop:
    seen: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0)

    event_loop.run(main(), name)
    return seen[0]


def test_uvloop_runs_the_server_coroutine() -> None:
    assert isinstance(_loop_of("uvloop"), uvloop.Loop)


def test_asyncio_keeps_the_standard_loop() -> None:
    assert not isinstance(_loop_of("asyncio"), uvloop.Loop)


def test_an_unknown_loop_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event loop 'trio'"):
        event_loop.loop_factory("trio")


def test_the_loop_gets_the_gil_back_within_half_a_millisecond() -> None:
    """A worker thread converting a large request must not hold the loop 5 ms per wake-up."""
    seen: list[float] = []
    before = sys.getswitchinterval()

    async def main() -> None:
        seen.append(sys.getswitchinterval())

    event_loop.run(main(), "uvloop")
    assert seen == [pytest.approx(event_loop.SWITCH_INTERVAL_SECONDS)]
    assert event_loop.SWITCH_INTERVAL_SECONDS <= 0.0005
    assert sys.getswitchinterval() == before
