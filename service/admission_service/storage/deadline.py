"""The caller's deadline bounds the database work of its call.

The API layer records how long the call has left (``call_deadline``) and each transaction of
the call starts with ``deadline_bound()``: ``SET LOCAL`` of ``statement_timeout``,
``lock_timeout`` and ``idle_in_transaction_session_timeout`` to that time. So PostgreSQL itself
stops a statement — one waiting for a session's row lock, say — once the caller has given up,
even when the service cannot reach it to cancel (a silent network), and a transaction left
idle by a stalled replica does not keep its locks. Transaction-scoped: safe behind a
transaction-mode pooler. Without a deadline nothing is set (the server's defaults apply).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from admission_service.storage.raw import RawStatement

# The SQLSTATEs of those timeouts: query_canceled (statement_timeout), lock_not_available
# (lock_timeout), idle_in_transaction_session_timeout.
TIMEOUT_SQLSTATES = frozenset({"57014", "55P03", "25P03"})

_deadline: ContextVar[float | None] = ContextVar("pas_call_deadline", default=None)

_BOUND = (
    "SELECT set_config('statement_timeout', %(ms)s, true),"
    " set_config('lock_timeout', %(ms)s, true),"
    " set_config('idle_in_transaction_session_timeout', %(ms)s, true)"
)


@contextmanager
def call_deadline(remaining_seconds: float | None) -> Iterator[None]:
    """Within this block, transactions are bounded by ``remaining_seconds`` from now (None:
    the call has no deadline)."""
    deadline = None if remaining_seconds is None else time.monotonic() + remaining_seconds
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def deadline_bound() -> RawStatement | None:
    """The statement that limits the current transaction to the time the call has left (at
    least 1 ms), sent after its ``BEGIN`` with its first statement; None without a deadline."""
    deadline = _deadline.get()
    if deadline is None:
        return None
    milliseconds = max(1, int((deadline - time.monotonic()) * 1000))
    return RawStatement(_BOUND, {"ms": str(milliseconds)})
