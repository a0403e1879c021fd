"""Render the figures a run wrote to ``$PAS_RELIABILITY_REPORT`` (JSON lines) as Markdown.

python -m tests.reliability.report .data/reliability-full.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    return str(value)


def render(lines: list[str]) -> str:
    records = sorted(
        (json.loads(line) for line in lines if line.strip()), key=lambda r: r["scenario"]
    )
    out = []
    for record in records:
        out.append(f"### {record['scenario']} ({record['profile']} profile)\n")
        out.append("| figure | value |")
        out.append("|---|---|")
        for key, value in record.items():
            if key not in ("scenario", "profile"):
                out.append(f"| {key.replace('_', ' ')} | {_value(value)} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    print(render(Path(sys.argv[1]).read_text().splitlines()))  # noqa: T201


if __name__ == "__main__":
    main()
