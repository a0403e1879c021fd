"""Deferred writes sent as one statement.

A transaction's writes that nothing reads before its end (events, surface nodes, tool calls,
the ledger, the session row, the stored response) are collected here and sent together: each but
the last as a data-modifying CTE of the last (``WITH w0 AS (INSERT …), w1 AS (…) UPDATE …``).
They touch different rows; foreign keys between them are checked at the end of the statement,
when every row exists. A mutation then costs about as many round trips as the irreducible lock,
read, write and commit.

The statement is assembled here with server-side placeholders (``$n``; table and column names
are the schema's own, every value a bound parameter) and sent on a raw cursor: its shape changes
with the number of rows, so SQLAlchemy would compile it on every call, which cost more than the
round trips it saves.

It is the one place SQL uses ``$n``: every fixed statement is written with psycopg's
``%(name)s`` (``raw.py``). A generated statement numbers its parameters as it grows (``param``),
and ``$n`` is what both of its paths take as they are: a raw cursor (``raw.execute_flight`` with
``raw_placeholders``, no client-side parse of the long text) and, at a transaction's end, the
simple-query script that binds each ``$n`` as a literal (``raw.execute_script``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

# A deferred write: adds its values to the statement's parameters and returns its SQL.
Write = Callable[[list[Any]], str]


def param(params: list[Any], value: Any) -> str:
    """A server-side placeholder (``$n``) bound to ``value``."""
    params.append(value)
    return f"${len(params)}"


class StatementBatch:
    """The deferred writes of one transaction, in the order they were made."""

    def __init__(self) -> None:
        self._writes: list[Write] = []

    def __bool__(self) -> bool:
        return bool(self._writes)

    def defer(self, write: Write) -> None:
        self._writes.append(write)

    def insert(
        self, table: str, rows: Sequence[Mapping[str, Any]], *, skip_existing: bool = False
    ) -> None:
        """Defer one ``INSERT`` of ``rows`` (which share the first row's columns);
        ``skip_existing``: a row whose key is stored already is left as it is."""

        def build(params: list[Any]) -> str:
            names = list(rows[0])
            values = ", ".join(
                "(" + ", ".join(param(params, row[name]) for name in names) + ")" for row in rows
            )
            conflict = " ON CONFLICT DO NOTHING" if skip_existing else ""
            return f"INSERT INTO {table} ({', '.join(names)}) VALUES {values}{conflict}"

        self.defer(build)

    def take(self, last: Write | None = None) -> tuple[str, list[Any]] | None:
        """The deferred writes (then ``last``, if given) as one statement and its parameters,
        leaving the batch empty; None when there is nothing to send."""
        builds = [*self._writes, *([last] if last is not None else [])]
        self._writes = []
        if not builds:
            return None
        params: list[Any] = []
        *ahead, final = [build(params) for build in builds]
        if not ahead:
            return final, params
        ctes = ", ".join(f"w{index} AS ({part})" for index, part in enumerate(ahead))
        return f"WITH {ctes} {final}", params
