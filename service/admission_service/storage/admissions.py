"""The SQL of the ``admissions`` and ``requests`` tables: a step's admission (what Reconcile
reuses) and the cache ledger's rows, written in the statement batch; the ledger as the read
RPCs read it (Inspect, ListTrajectory), as typed rows (``rows``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select

from admission_service.domain.stored import AdmissionRecord
from admission_service.storage import codec
from admission_service.storage.batch import param
from admission_service.storage.raw import RawStatement
from admission_service.storage.rows import LedgerRow, columns
from admission_service.storage.scope import NOT_READ, SessionScope, where_session
from admission_service.storage.tables import requests

_ADMISSION = (
    "SELECT admission_id, turn, step, rendered_prompt, tools, attempts FROM admissions"
    " WHERE tenant_id = %(t)s AND session_id = %(s)s AND admission_id = %(a)s"
)


def admission_statement(tenant: str, session_id: str, admission_id: str) -> RawStatement:
    """The read of one admission (its row: ``admission_record``)."""
    return RawStatement(_ADMISSION, {"t": tenant, "s": session_id, "a": admission_id}, binary=True)


def admission_record(row: tuple[Any, ...] | None) -> AdmissionRecord | None:
    if row is None:
        return None
    admission_id, turn, step, rendered_prompt, tools, attempts = row
    return AdmissionRecord(
        admission_id,
        turn,
        step,
        bytes(rendered_prompt).decode(),
        codec.decode_tools(bytes(tools)),
        attempts,
    )


class AdmissionsAndLedger(SessionScope):
    """Admissions and the ledger: written in the statement batch, an admission read by key, the
    ledger by request index."""

    async def add_admission(self, admission: AdmissionRecord, user_seqs: Sequence[int]) -> None:
        self.batch.insert(
            "admissions",
            [
                {
                    **self._keys(),
                    "admission_id": admission.admission_id,
                    "turn": admission.turn,
                    "step": admission.step,
                    "rendered_prompt": admission.rendered_prompt.encode(),
                    "tools": codec.encode_tools(admission.tools),
                    "users_seqs": list(user_seqs),
                    "attempts": admission.attempts,
                }
            ],
        )

    async def admission(self, admission_id: str) -> AdmissionRecord | None:
        if (kept := self._kept("admission", admission_id)) is not NOT_READ:
            return kept  # type: ignore[no-any-return]
        statement = admission_statement(self.tenant, self.session_id, admission_id)
        *_, row = await self._flight(*self._deferred(), statement)
        return admission_record(row)

    async def count_attempt(self, admission_id: str) -> None:
        key = self.key

        def build(params: list[Any]) -> str:
            return (
                "UPDATE admissions SET attempts = attempts + 1"
                f" WHERE {where_session(params, key)}"
                f" AND admission_id = {param(params, admission_id)}"
            )

        self.batch.defer(build)

    async def add_request(
        self, request_index: int, admission_id: str, attempt: int, forecast: Mapping[str, Any]
    ) -> None:
        self.batch.insert(
            "requests",
            [
                {
                    **self._keys(),
                    "request_index": request_index,
                    "admission_id": admission_id,
                    "attempt": attempt,
                    "forecast": codec.dumps(forecast),
                }
            ],
        )

    async def observe_usage(self, admission_id: str, observed: Mapping[str, Any]) -> None:
        """Attach the provider's usage to the admission's latest request."""
        stored = codec.dumps(observed)
        key = self.key

        def build(params: list[Any]) -> str:
            return (
                f"UPDATE requests SET observed = {param(params, stored)}"
                f" WHERE {where_session(params, key)} AND request_index = ("
                f"SELECT max(request_index) FROM requests WHERE {where_session(params, key)}"
                f" AND admission_id = {param(params, admission_id)})"
            )

        self.batch.defer(build)

    async def ledger(self, limit: int) -> list[LedgerRow]:
        """The latest ``limit`` ledger rows, in request order."""
        await self.flush()
        statement = (
            select(*columns(requests, LedgerRow))
            .where(self._mine(requests))
            .order_by(requests.c.request_index.desc())
            .limit(limit)
        )
        rows = (await self.connection.execute(statement)).all()
        return [LedgerRow(*row) for row in reversed(rows)]

    async def requests_from(self, first_index: int, limit: int) -> list[LedgerRow]:
        """Ledger rows from ``first_index`` on, in request order (ListTrajectory)."""
        await self.flush()
        statement = (
            select(*columns(requests, LedgerRow))
            .where(self._mine(requests), requests.c.request_index >= first_index)
            .order_by(requests.c.request_index)
            .limit(limit)
        )
        return [LedgerRow(*row) for row in await self.connection.execute(statement)]
