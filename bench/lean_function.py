"""The lean step prototype in ONE round trip (``bench/lean_step.py --one-call``): the same
statements inside a PL/pgSQL function, one prepared call per step. A module of its own so that
the benchmark starts it as it starts the floors.

    python -m bench.lean_function --listen 127.0.0.1:PORT --database-url URL
"""

from __future__ import annotations

import sys

from bench.lean_step import main

if __name__ == "__main__":
    main([*sys.argv[1:], "--one-call"])
