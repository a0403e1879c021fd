"""Phase hooks for the in-process scenarios: random pauses at every phase, so cancellations and
dropped connections land anywhere in a handler, with a count of where they landed."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from admission_service.app.hooks import Phase


class JitterHooks:
    """Sleeps a random 0..``max_delay`` seconds at every phase (``COMMITTED`` gets
    ``committed_delay``: the window where a response is lost after the commit)."""

    def __init__(self, rng: random.Random, max_delay: float, committed_delay: float) -> None:
        self.rng = rng
        self.max_delay = max_delay
        self.committed_delay = committed_delay
        self.arrivals: Counter[str] = Counter()
        self.cancelled_at: Counter[str] = Counter()

    async def reached(self, method: str, phase: Phase) -> None:
        self.arrivals[phase.value] += 1
        limit = self.committed_delay if phase is Phase.COMMITTED else self.max_delay
        try:
            await asyncio.sleep(self.rng.uniform(0, limit))
        except asyncio.CancelledError:
            self.cancelled_at[phase.value] += 1
            raise
