"""app/background.py: a server's periodic background work stops when asked, also when a
cancellation is lost (Python 3.11's ``asyncio.wait_for`` drops one that lands as its inner
wait completes: CPython gh-86296), and a stop never waits without bound."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from admission_service.app.background import PeriodicTask


async def test_the_body_runs_every_interval_until_stopped() -> None:
    rounds = 0
    three = asyncio.Event()

    async def body() -> None:
        nonlocal rounds
        rounds += 1
        if rounds == 3:
            three.set()

    periodic = PeriodicTask("test", 0.01, body)
    periodic.start()
    await asyncio.wait_for(three.wait(), 5)
    await periodic.stop()
    assert not periodic.running
    after = rounds
    await asyncio.sleep(0.05)
    assert rounds == after


async def test_a_round_that_loses_its_cancellation_is_the_last() -> None:
    """The body swallows the cancellation, as wait_for does on 3.11: before the flag, the loop
    slept on and a shutdown awaiting it waited for ever."""
    in_round = asyncio.Event()
    rounds = 0

    async def body() -> None:
        nonlocal rounds
        rounds += 1
        in_round.set()
        if rounds > 1:
            await asyncio.sleep(0.2)  # a later round (there must be none) takes its cancel
            return
        # Lost: the round returns as if it had not been cancelled.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.2)

    periodic = PeriodicTask("test", 0.01, body)
    periodic.start()
    await in_round.wait()
    await asyncio.wait_for(periodic.stop(), 2)
    assert not periodic.running
    assert rounds == 1


async def test_a_round_that_never_ends_is_left_after_the_stop_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    in_round = asyncio.Event()
    release = asyncio.Event()

    async def body() -> None:
        in_round.set()
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # deaf to cancellation

    periodic = PeriodicTask("stubborn", 0.01, body)
    periodic.start()
    await in_round.wait()
    with caplog.at_level(logging.WARNING):
        await asyncio.wait_for(periodic.stop(timeout_seconds=0.1), 2)
    assert "stubborn did not stop within 0.1s" in caplog.text
    release.set()  # let it end, so the test leaves no task behind
    await asyncio.sleep(0.05)


async def test_an_interval_of_zero_runs_nothing() -> None:
    periodic = PeriodicTask("off", 0, lambda: asyncio.sleep(0))
    periodic.start()
    assert not periodic.running
    await periodic.stop()
