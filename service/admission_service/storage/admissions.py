"""The SQL of the ``admissions``, ``admission_inputs`` and ``requests`` tables: a step's
admission (what Reconcile reuses), its prompt and tool set stored once per session by digest,
and the cache ledger's rows, written in the statement batch; the ledger as the read RPCs read
it (Inspect, ListTrajectory), as typed rows (``rows``)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select

from admission_service.domain.stored import AdmissionRecord
from admission_service.storage import codec
from admission_service.storage.batch import param
from admission_service.storage.raw import RawStatement
from admission_service.storage.rows import LedgerRow, StoredInputs, columns
from admission_service.storage.scope import NOT_READ, SessionScope, where_session
from admission_service.storage.tables import requests

# An admission with its prompt and tools, joined from their bodies by digest.
_ADMISSION = (
    "SELECT a.admission_id, a.turn, a.step, p.body, t.body, a.attempts,"
    " a.prompt_digest, a.tools_digest FROM admissions AS a"
    " JOIN admission_inputs AS p ON p.tenant_id = a.tenant_id"
    " AND p.session_id = a.session_id AND p.digest = a.prompt_digest"
    " JOIN admission_inputs AS t ON t.tenant_id = a.tenant_id"
    " AND t.session_id = a.session_id AND t.digest = a.tools_digest"
    " WHERE a.tenant_id = %(t)s AND a.session_id = %(s)s AND a.admission_id = %(a)s"
)


def input_digest(body: bytes) -> bytes:
    """The key of an input's body in ``admission_inputs`` (what migration 0011's ``sha256``
    computed for the inputs stored before it)."""
    return hashlib.sha256(body).digest()


def admission_statement(tenant: str, session_id: str, admission_id: str) -> RawStatement:
    """The read of one admission (its row: ``stored_admission``)."""
    return RawStatement(_ADMISSION, {"t": tenant, "s": session_id, "a": admission_id}, binary=True)


def stored_admission(row: tuple[Any, ...] | None) -> StoredInputs | None:
    if row is None:
        return None
    admission_id, turn, step, rendered_prompt, tools, attempts, prompt_digest, tools_digest = row
    admission = AdmissionRecord(
        admission_id,
        turn,
        step,
        bytes(rendered_prompt).decode(),
        codec.decode_tools(bytes(tools)),
        attempts,
    )
    return StoredInputs(admission, bytes(prompt_digest), bytes(tools_digest))


class AdmissionsAndLedger(SessionScope):
    """Admissions and the ledger: written in the statement batch, an admission read by key, the
    ledger by request index."""

    async def add_admission(self, admission: AdmissionRecord, user_seqs: Sequence[int]) -> None:
        """The admission's row, naming its prompt and tools by digest; their bodies too, unless
        the admission this transaction found (``known_inputs``) has the same ones, which are
        then stored already (a harness's usual step: nothing but two digests is sent)."""
        known = self.known_inputs
        bodies: dict[bytes, bytes] = {}
        if known is not None and known.admission.rendered_prompt == admission.rendered_prompt:
            prompt_digest = known.prompt_digest
        else:
            prompt = admission.rendered_prompt.encode()
            prompt_digest = input_digest(prompt)
            bodies[prompt_digest] = prompt
        if known is not None and known.admission.tools == admission.tools:
            tools_digest = known.tools_digest
        else:
            tools = codec.encode_tools(admission.tools)
            tools_digest = input_digest(tools)
            bodies[tools_digest] = tools
        if bodies:
            rows = [{**self._keys(), "digest": key, "body": body} for key, body in bodies.items()]
            self.batch.insert("admission_inputs", rows, skip_existing=True)
        self.batch.insert(
            "admissions",
            [
                {
                    **self._keys(),
                    "admission_id": admission.admission_id,
                    "turn": admission.turn,
                    "step": admission.step,
                    "prompt_digest": prompt_digest,
                    "tools_digest": tools_digest,
                    "users_seqs": list(user_seqs),
                    "attempts": admission.attempts,
                }
            ],
        )
        self.known_inputs = StoredInputs(admission, prompt_digest, tools_digest)

    async def admission(self, admission_id: str) -> AdmissionRecord | None:
        if (kept := self._kept("admission", admission_id)) is not NOT_READ:
            return kept  # type: ignore[no-any-return]
        statement = admission_statement(self.tenant, self.session_id, admission_id)
        *_, row = await self._flight(*self._deferred(), statement)
        stored = stored_admission(row)
        return stored.admission if stored is not None else None

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
