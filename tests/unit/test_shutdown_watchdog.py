"""The shutdown watchdog (api/shutdown_watchdog.py) ends a stop that is stuck, with the stacks
that say where, and never touches one that finishes. Each case runs in a process of its own:
the watchdog ends its process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from admission_service.api.shutdown_watchdog import EXIT_STUCK


def run(body: str) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(
        """
        import asyncio, logging, time
        from admission_service.api.shutdown_watchdog import ShutdownWatchdog
        logging.basicConfig(level=logging.INFO)
        """
    ) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_stop_that_blocks_the_loop_ends_the_process_with_every_threads_stack() -> None:
    done = run(
        """
        def close_the_pool_forever():
            time.sleep(60)

        async def stop():
            with ShutdownWatchdog(0.5):
                close_the_pool_forever()

        asyncio.run(stop())
        print("returned")
        """
    )
    assert done.returncode == EXIT_STUCK, done.stderr
    assert "the shutdown did not finish within 0.5s" in done.stderr
    assert "close_the_pool_forever" in done.stderr  # the blocked thread's stack
    assert "returned" not in done.stdout


def test_a_stop_awaiting_forever_is_named_by_its_pending_task() -> None:
    done = run(
        """
        async def drain_calls_that_never_end():
            await asyncio.Event().wait()

        async def stop():
            with ShutdownWatchdog(0.5):
                await asyncio.create_task(drain_calls_that_never_end())

        asyncio.run(stop())
        """
    )
    assert done.returncode == EXIT_STUCK, done.stderr
    assert "Stack for <Task pending" in done.stderr
    assert "drain_calls_that_never_end" in done.stderr


def test_a_stop_that_finishes_in_time_is_left_alone() -> None:
    done = run(
        """
        async def stop():
            with ShutdownWatchdog(0.5):
                await asyncio.sleep(0.1)
            await asyncio.sleep(1)  # well past the limit, after the stop

        asyncio.run(stop())
        print("stopped")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"
    assert "did not finish" not in done.stderr
