"""Phase hooks: a seam where tests pause a handler to cancel it at a chosen point.

Production uses ``NO_HOOKS``. The cancellation tests (SPEC §4) inject hooks that block at a
phase until the test has cancelled the call, then assert nothing was committed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol


class Phase(StrEnum):
    LOAD = "load"  # the session row is locked and its indexed state read
    VALIDATE = "validate"  # the input was checked against limits and the session
    PROJECT = "project"  # the domain transition produced the events to commit
    DERIVE = "derive"  # the events were written and the derived request built
    COMMIT = "commit"  # just before COMMIT
    COMMITTED = "committed"  # after COMMIT, before the response is sent (lost-response tests)


class PhaseHooks(Protocol):
    async def reached(self, method: str, phase: Phase) -> None: ...


class _NoHooks:
    async def reached(self, method: str, phase: Phase) -> None:
        return None


NO_HOOKS: PhaseHooks = _NoHooks()
