"""``python -m bench.tokenizer_load``: how long loading each tokenizer family holds an event
loop, though the load runs in a thread (``tokenizers.load_off_the_loop``, what a worker does on
a family's first request when it was not preloaded).

Each family loads in a fresh process (nothing loaded before it) while a ticker task sleeps
5 ms at a time and records each gap between its wake-ups: the longest gap is how long the
worker's other calls would have waited. Also the process's resident memory before and after,
what preloading the family costs each worker.

    python -m bench.tokenizer_load [--families deepseek,openai,anthropic] [--out FILE]

Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from admission_service.tokenizers import TOKENIZER_FAMILIES

from bench.infra import chosen, print_report

# Run in a process of its own per family: the load, timed, with the loop's gaps meanwhile.
_PROBE = """
import asyncio, json, sys, time
from admission_service import tokenizers

def rss_mib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0

async def main(family):
    gaps, loading = [], True
    async def ticker():
        last = time.perf_counter()
        while loading:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
    before = rss_mib()
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.1)
    started = time.perf_counter()
    await tokenizers.load_off_the_loop(family)
    load = time.perf_counter() - started
    await asyncio.sleep(0.1)
    loading = False
    await tick
    print(json.dumps({
        "load_ms": round(load * 1000, 1),
        "longest_loop_gap_ms": round(max(gaps) * 1000, 1),
        "rss_added_mib": round(rss_mib() - before, 1),
    }))

asyncio.run(main(sys.argv[1]))
"""


def measure(family: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, family], capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(TOKENIZER_FAMILIES))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        families = chosen(args.families, TOKENIZER_FAMILIES)
    except ValueError as error:
        parser.error(f"--families: {error}")
    print_report({family: measure(family) for family in families}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
