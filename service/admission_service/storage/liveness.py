"""Whether the database answers: ``SELECT 1`` on a connection of its own (not the pool's: a
pool busy with calls is not an outage), opened again after any failure. The health probe
(``api/health_probe.py``) turns the answer into a serving status.
"""

from __future__ import annotations

import asyncio
import contextlib

import psycopg

from admission_service.storage.engine import libpq_url

# A probe that takes longer than this is a failed one (as long as libpq's connect_timeout).
PROBE_TIMEOUT = 5.0
APPLICATION_NAME = "admission-service-health"
PROBE = "SELECT 1"


class Liveness:
    def __init__(self, url: str) -> None:
        self.url = libpq_url(url)
        self._connection: psycopg.AsyncConnection[tuple[object, ...]] | None = None

    async def check(self) -> BaseException | None:
        """None when the database answered ``PROBE`` within ``PROBE_TIMEOUT``, else why not
        (the connection is closed, to be opened again by the next check)."""
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                if self._connection is None or self._connection.closed:
                    self._connection = await psycopg.AsyncConnection.connect(
                        self.url,
                        autocommit=True,
                        connect_timeout=int(PROBE_TIMEOUT),
                        application_name=APPLICATION_NAME,
                        prepare_threshold=None,  # safe behind a transaction-mode pooler
                    )
                await self._connection.execute(PROBE)
            return None
        except (psycopg.Error, OSError, TimeoutError) as exc:
            await self.close()
            return exc

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()
