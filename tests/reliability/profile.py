"""How big the reliability scenarios are: a named profile, each figure overridable by env.

``PAS_RELIABILITY_PROFILE=ci`` (the default, what ``make test`` runs) keeps the whole suite to
a few minutes on a small machine; ``full`` is the run whose figures ``docs/RELIABILITY.md``
reports (``make reliability-full``). Any single figure can be set with
``PAS_RELIABILITY_<FIELD>`` (upper case), e.g. ``PAS_RELIABILITY_LOAD_STEPS=100``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

PROFILE_VARIABLE = "PAS_RELIABILITY_PROFILE"
PREFIX = "PAS_RELIABILITY_"


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    # 1. load: loops x steps over sessions
    load_loops: int
    load_sessions: int
    load_steps: int  # steps per loop
    # 2. contention: callers x admits on one session, while probes run on other sessions
    contention_callers: int
    contention_calls: int  # admits per caller
    # 3. cancellation storm: calls cancelled or deadline-expired at random points
    cancel_calls: int
    # 4. lost responses: calls whose connection is dropped right after sending
    lost_calls: int
    # 5. database outage: seconds PostgreSQL stays down, and how many outages
    outage_seconds: float
    outages: int
    outage_loops: int
    # 6. process crash: kill -9 rounds under load
    crash_kills: int
    crash_loops: int
    # 7. hostile input: hypothesis examples per RPC, raw garbage payloads and connections
    fuzz_examples: int
    garbage_payloads: int
    # 8. resource bounds: seconds of the long-running loop
    soak_seconds: float
    soak_loops: int


PROFILES = {
    "ci": Profile(
        name="ci",
        load_loops=64,
        load_sessions=200,
        load_steps=4,
        contention_callers=32,
        contention_calls=4,
        cancel_calls=1000,
        lost_calls=150,
        outage_seconds=3.0,
        outages=1,
        outage_loops=16,
        crash_kills=2,
        crash_loops=16,
        fuzz_examples=60,
        garbage_payloads=200,
        soak_seconds=20.0,
        soak_loops=16,
    ),
    "full": Profile(
        name="full",
        load_loops=64,
        load_sessions=200,
        load_steps=40,
        contention_callers=32,
        contention_calls=25,
        cancel_calls=5000,
        lost_calls=1000,
        outage_seconds=10.0,
        outages=3,
        outage_loops=32,
        crash_kills=5,
        crash_loops=32,
        fuzz_examples=1500,
        garbage_payloads=2000,
        soak_seconds=300.0,
        soak_loops=32,
    ),
}


def load_profile(env: dict[str, str] | None = None) -> Profile:
    env = dict(os.environ) if env is None else env
    name = env.get(PROFILE_VARIABLE, "").strip() or "ci"
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_VARIABLE} must be one of {', '.join(PROFILES)}, got {name!r}")
    profile = PROFILES[name]
    overrides: dict[str, int | float] = {}
    for field in dataclasses.fields(Profile):
        raw = env.get(PREFIX + field.name.upper(), "").strip()
        if field.name == "name" or not raw:
            continue
        overrides[field.name] = float(raw) if field.type == "float" else int(raw)
    return dataclasses.replace(profile, **overrides)  # type: ignore[arg-type]
