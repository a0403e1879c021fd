"""Hypothesis profiles: random exploration while developing, a fixed and larger search in CI.

CI (``CI=true``) uses a derandomized profile so a run is reproducible; a property failure found
while developing is kept in ``.hypothesis/`` and replayed first on the next run.

``collector_off``: for tests that check something is freed by reference counting alone (no
cycle keeps it for a full collection).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, max_examples=600, deadline=None)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
