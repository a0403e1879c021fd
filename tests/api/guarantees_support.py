"""Helpers for the guarantee tests: a pausing phase hook, request builders, error details.

The audit (``audit``, ``snapshot``, ``all_events``, proto -> domain) lives in
``tests/auditing.py``, shared with the reliability suite; it is re-exported here.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from admission_service.app.hooks import Phase
from promptadmission.v1 import session_pb2 as pb

from tests.auditing import all_events, audit, event_from_proto, message_from_proto, snapshot

from .support import (
    IN_HISTORY_ROUTE,
    REPLACE_ROUTE,
    admit_request,
    rich_error,
    user,
)

__all__ = [  # re-exported for the guarantee and reliability tests
    "admit_request",
    "all_events",
    "audit",
    "event_from_proto",
    "message_from_proto",
    "snapshot",
    "user",
]

# One source for requests and rich errors: the API tests' support module.
IN_HISTORY = IN_HISTORY_ROUTE
REPLACE = REPLACE_ROUTE


class PausingHooks:
    """Blocks the first call that reaches the armed (method, phase) until it is cancelled.

    ``reached`` is set when the handler arrives at the phase; ``unwound`` when the handler has
    left it (cancelled or released), so a test knows the transaction has rolled back.
    """

    def __init__(self) -> None:
        self.target: tuple[str, Phase] | None = None
        self.occurrence = 1
        self.seen = 0
        self.reached_phase = asyncio.Event()
        self.unwound = asyncio.Event()
        self.release = asyncio.Event()

    def arm(self, method: str, phase: Phase, occurrence: int = 1) -> None:
        """Pause the ``occurrence``-th time ``method`` reaches ``phase`` (an Admit carrying a
        previous output passes VALIDATE, PROJECT and DERIVE twice: recording, admitting)."""
        self.target = (method, phase)
        self.occurrence, self.seen = occurrence, 0
        self.reached_phase.clear()
        self.unwound.clear()
        self.release.clear()

    async def reached(self, method: str, phase: Phase) -> None:
        if self.target != (method, phase):
            return
        self.seen += 1
        if self.seen < self.occurrence:
            return
        self.target = None
        self.reached_phase.set()
        try:
            await self.release.wait()
        finally:
            self.unwound.set()


def assistant(text: str, *calls: str) -> pb.Message:
    blocks = [pb.ContentBlock(text=pb.TextBlock(text=text))]
    blocks += [
        pb.ContentBlock(tool_call=pb.ToolCallBlock(call_id=c, name="read", arguments_json="{}"))
        for c in calls
    ]
    return pb.Message(role=pb.MESSAGE_ROLE_ASSISTANT, content=blocks)


def error_info(error: grpc.aio.AioRpcError) -> Any:
    """The error's one ErrorInfo (``rich_error`` asserts there is exactly one)."""
    rich = rich_error(error)
    assert rich.reason
    return rich.error_infos[0]


def violated_fields(error: grpc.aio.AioRpcError) -> list[str]:
    return rich_error(error).violated_fields
