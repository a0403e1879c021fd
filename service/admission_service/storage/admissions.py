"""A step's admission (what Reconcile reuses) and the cache ledger's rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from admission_service.domain import codec
from admission_service.domain.messages import Tool
from admission_service.storage.batch import param
from admission_service.storage.rows import AdmissionRecord
from admission_service.storage.scope import SessionScope
from admission_service.storage.tables import admissions


class AdmissionWrites(SessionScope):
    """Admissions and the ledger: written in the statement batch, read by key."""

    async def add_admission(
        self,
        admission_id: str,
        turn: int,
        step: int,
        rendered: str,
        tools: tuple[Tool, ...],
        user_seqs: Sequence[int],
    ) -> None:
        self.batch.insert(
            "admissions",
            [
                {
                    **self._keys(),
                    "admission_id": admission_id,
                    "turn": turn,
                    "step": step,
                    "rendered_prompt": rendered.encode(),
                    "tools": codec.encode_tools(tools),
                    "users_seqs": list(user_seqs),
                    "attempts": 1,
                }
            ],
        )

    async def admission(self, admission_id: str) -> AdmissionRecord | None:
        await self.flush()
        statement = select(
            admissions.c.admission_id,
            admissions.c.turn,
            admissions.c.step,
            admissions.c.rendered_prompt,
            admissions.c.tools,
            admissions.c.attempts,
        ).where(self._mine(admissions), admissions.c.admission_id == admission_id)
        row = (await self.connection.execute(statement)).first()
        if row is None:
            return None
        return AdmissionRecord(
            row.admission_id,
            row.turn,
            row.step,
            row.rendered_prompt.decode(),
            codec.decode_tools(row.tools),
            row.attempts,
        )

    async def count_attempt(self, admission_id: str) -> None:
        def build(params: list[Any]) -> str:
            return (
                "UPDATE admissions SET attempts = attempts + 1"
                f" WHERE {self._where_mine(params)}"
                f" AND admission_id = {param(params, admission_id)}"
            )

        self.batch.defer(build)

    async def add_request(
        self, request_index: int, admission_id: str, attempt: int, forecast: bytes
    ) -> None:
        self.batch.insert(
            "requests",
            [
                {
                    **self._keys(),
                    "request_index": request_index,
                    "admission_id": admission_id,
                    "attempt": attempt,
                    "forecast": forecast,
                }
            ],
        )

    async def observe_usage(self, admission_id: str, observed: bytes) -> None:
        """Attach the provider's usage to the admission's latest request."""

        def build(params: list[Any]) -> str:
            return (
                f"UPDATE requests SET observed = {param(params, observed)}"
                f" WHERE {self._where_mine(params)} AND request_index = ("
                f"SELECT max(request_index) FROM requests WHERE {self._where_mine(params)}"
                f" AND admission_id = {param(params, admission_id)})"
            )

        self.batch.defer(build)
