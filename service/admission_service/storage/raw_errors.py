"""A failed raw statement's error, as SQLAlchemy would have raised it (issue 13, finding 5).

``raw.execute_raw`` sends some statements on the psycopg connection itself. When one
fails, ``raw_statement_error`` does what SQLAlchemy does for its own statements
(``Connection._handle_dbapi_exception``): the DBAPI error is wrapped in its ``sqlalchemy.exc``
class (``IntegrityError``, ``OperationalError``…, the original kept as ``.orig``), with the
parameters hidden (they hold prompts) and ``connection_invalidated`` set when the connection is
gone, and the dialect's ``handle_error`` listeners see it (statement tracing ends its span
there). The error interceptor then maps it like any other database error: a deadlock,
serialization failure or unique violation is ABORTED/CONCURRENT_MODIFICATION, a lost
connection UNAVAILABLE.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy.exc
from sqlalchemy.engine import Connection
from sqlalchemy.engine.base import ExceptionContextImpl


def raw_statement_error(
    connection: Connection,
    dbapi_connection: Any,
    error: Exception,
    statement: str,
    parameters: Any,
    execution_context: Any,
) -> Exception:
    """The exception to raise for ``error``, which ``statement`` raised on ``connection``."""
    dialect = connection.dialect
    dbapi_error = dialect.loaded_dbapi.Error
    if not isinstance(error, dbapi_error):
        return error  # not the database's: a bug or a cancellation, raised as is
    is_disconnect = dialect.is_disconnect(error, dbapi_connection, None)
    wrapped = sqlalchemy.exc.DBAPIError.instance(
        statement,
        parameters,
        error,
        dbapi_error,
        hide_parameters=True,
        connection_invalidated=is_disconnect,
        dialect=dialect,
    )
    context = ExceptionContextImpl(
        error,
        wrapped,
        connection.engine,
        dialect,
        connection,
        None,
        statement,
        parameters,
        execution_context,
        is_disconnect,
        True,
        False,
    )
    raised: Exception = wrapped
    for listener in dialect.dispatch.handle_error:
        replacement = listener(context)  # a listener may replace the exception
        if replacement is not None:
            raised = context.chained_exception = replacement
    return raised
