"""Idempotency keys expire (AIP-155): a retry within the retention window replays the first
response; after it the key is deleted and the ``request_id`` is new again.

``IdempotencySweeper`` runs in every replica as one background task: every ``interval`` seconds
it deletes expired keys in batches of ``batch`` rows, one short transaction each (no long
locks; no call ever locks an expired key, see storage/idempotency.py), yielding to the event
loop between batches, until a batch comes back short. It never blocks a call; a failed sweep
(the database away) is logged and retried at the next interval.
``pas_idempotency_keys_swept_total`` counts the rows it deleted.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import KW_ONLY, dataclass, field

from prometheus_client import Counter
from sqlalchemy.ext.asyncio import AsyncEngine

from admission_service.app.background import PeriodicTask
from admission_service.app.limits import IDEMPOTENCY_RETENTION_SECONDS, IDEMPOTENCY_SWEEP_SECONDS
from admission_service.storage.idempotency import sweep_expired_keys

SWEEP_BATCH = 500

_log = logging.getLogger(__name__)


@dataclass(eq=False)
class IdempotencySweeper:
    engine: AsyncEngine
    swept: Counter
    _: KW_ONLY
    retention_seconds: float = IDEMPOTENCY_RETENTION_SECONDS
    interval_seconds: float = IDEMPOTENCY_SWEEP_SECONDS
    batch: int = SWEEP_BATCH
    _rounds: PeriodicTask = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rounds = PeriodicTask(
            "idempotency-sweeper", self.interval_seconds, self._sweep_or_log
        )

    async def sweep(self) -> int:
        """Delete every key expired now, batch by batch; how many."""
        total = 0
        while True:
            deleted = await sweep_expired_keys(self.engine, self.retention_seconds, self.batch)
            self.swept.inc(deleted)
            total += deleted
            if deleted < self.batch:
                return total
            await asyncio.sleep(0)  # let calls run between batches

    async def _sweep_or_log(self) -> None:
        try:
            await self.sweep()
        except Exception:  # the database away, a failover: try again next interval
            _log.warning("idempotency key sweep failed; retrying later", exc_info=True)

    def start(self) -> None:
        self._rounds.start()

    async def stop(self) -> None:
        await self._rounds.stop()
