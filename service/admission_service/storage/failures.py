"""What a database failure means, decided where the database is known: SQLSTATE codes, the
driver's and SQLAlchemy's exception classes and Citus's error text stay in ``storage/``; the gRPC
edge (``api/error_status.py``) maps only the ``Failure`` this module names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import psycopg
import sqlalchemy.exc

from admission_service.storage.deadline import TIMEOUT_SQLSTATES


class Failure(Enum):
    # The database rolled the transaction back to break a conflict: the caller may retry.
    CONFLICT = "conflict"
    # PostgreSQL stopped the work at the call's deadline (storage/deadline.py).
    TIMEOUT = "timeout"
    # A value the database can never store as sent: a retry cannot succeed.
    UNSTORABLE = "unstorable"
    # The database is unreachable or was lost, or the outcome of a COMMIT is unknown.
    UNAVAILABLE = "unavailable"


class SessionMoved(RuntimeError):
    """The session a step ran on, as its worker had cached it (``session_cache.py``), was not
    the stored one any more: another worker or replica wrote or deleted it. Nothing was
    committed; the step runs again, on a fresh read. Should it move every time, the caller
    gets a conflict to retry."""


@dataclass(frozen=True)
class DatabaseFailure:
    failure: Failure
    sqlstate: str  # '' when the database sent none (a lost connection, an exhausted pool)


# Failures to reach or keep the database. (psycopg's OperationalError family also holds the
# transaction conflicts — deadlock, serialization failure — and the program limits, which are
# classified first.)
_UNREACHABLE: tuple[type[BaseException], ...] = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,  # the connection pool is exhausted
    sqlalchemy.exc.DisconnectionError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)

# A row the transaction wrote was committed first by a concurrent one (every write is under
# the session's row lock, so only a writer outside it, or a race on a new key, gets here).
UNIQUE_VIOLATION = "23505"

# SQLSTATE classes of a value the database can never store as sent: data exceptions (22:
# a string too long for its type, an invalid byte sequence) and program limits (54: an index
# row over 2 704 bytes, a statement too complex). psycopg files class 54 under its
# OperationalError, with the lost connections: retrying those can never succeed. The edge's
# bounds keep client values from getting here (app/limits.py); one that does is still the
# caller's input, and not retryable.
_UNSTORABLE_CLASSES = ("22", "54")

# How a commit on a cached session fails when the cache was stale (``session_rows.py``): the
# row's UPDATE divides by whether the row is at the cached version (it is not: 22012), a key it
# took for new was written since (23505), the session row is gone (23503, a foreign key).
_MOVED_SQLSTATES = frozenset({"22012", UNIQUE_VIOLATION, "23503"})

# Citus (a distributed PostgreSQL, docs/SCALING.md) when a worker fails at COMMIT: the
# coordinator cannot tell whether the shard's transaction committed. Like a connection lost
# during COMMIT, that is an unknown outcome for the caller to retry with its request_id (XX000,
# the error's only distinguishing mark is its text).
_REMOTE_COMMIT_FAILED = "could not commit transaction for shard "


def driver_error(exc: BaseException) -> BaseException:
    """The driver's own exception behind SQLAlchemy's wrapper (``exc`` itself otherwise)."""
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None:
        return exc.orig
    return exc


def unreachable_cause(exc: BaseException) -> BaseException | None:
    """The driver's error when ``exc`` says the database could not be reached or spoken to
    (what the command line reports, without SQLAlchemy's statement); None otherwise."""
    if isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
        return exc.orig if exc.orig is not None else exc
    if isinstance(exc, psycopg.OperationalError):
        return exc
    return None


def moved(exc: BaseException) -> bool:
    """Whether the commit of a step on a cached session failed because the cache was stale."""
    cause = driver_error(exc)
    return isinstance(cause, psycopg.Error) and (cause.sqlstate or "") in _MOVED_SQLSTATES


def classify(exc: BaseException) -> DatabaseFailure | None:
    """What ``exc`` means as a database failure; None when it is not one (a bug, say)."""
    if isinstance(exc, SessionMoved):
        return DatabaseFailure(Failure.CONFLICT, "")
    cause = driver_error(exc)
    sqlstate = (cause.sqlstate or "") if isinstance(cause, psycopg.Error) else ""
    # SQLSTATE class 40, "transaction rollback": psycopg's DeadlockDetected (40P01) and
    # SerializationFailure (40001) are not subclasses of its TransactionRollback (40000).
    if sqlstate.startswith("40") or sqlstate == UNIQUE_VIOLATION:
        return DatabaseFailure(Failure.CONFLICT, sqlstate)
    if sqlstate in TIMEOUT_SQLSTATES:
        return DatabaseFailure(Failure.TIMEOUT, sqlstate)
    if sqlstate[:2] in _UNSTORABLE_CLASSES:
        return DatabaseFailure(Failure.UNSTORABLE, sqlstate)
    if (
        isinstance(exc, _UNREACHABLE)
        or (
            isinstance(cause, psycopg.errors.InternalError_)
            and str(cause).startswith(_REMOTE_COMMIT_FAILED)
        )
        or (isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated)
    ):
        return DatabaseFailure(Failure.UNAVAILABLE, sqlstate)
    return None
