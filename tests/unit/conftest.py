"""Hypothesis profiles: random exploration while developing, a fixed and larger search in CI.

CI (``CI=true``) uses a derandomized profile so a run is reproducible; a property failure found
while developing is kept in ``.hypothesis/`` and replayed first on the next run.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, max_examples=600, deadline=None)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")
