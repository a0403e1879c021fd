"""The README's worked example runs against the real server and shows what the README says."""

from __future__ import annotations

import asyncio
import contextlib
import io
from pathlib import Path

from examples.walkthrough import run

from .support import ApiClient


async def test_the_worked_example_shows_append_consolidation_and_compaction(
    api: ApiClient,
) -> None:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        # The example uses a blocking channel; the server shares this event loop.
        await asyncio.to_thread(run, api.server.target)
    text = output.getvalue()
    # The README shows this output whole, as the example prints it.
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    shown = readme.split("## Worked example", 1)[1].split("```\n", 2)[1]

    def lines(block: str) -> list[str]:  # Markdown keeps no trailing spaces
        return [line.rstrip() for line in block.strip("\n").splitlines()]

    assert lines(text) == lines(shown)
    assert "## 2. in-history append (forecast: 2 of 5 messages reused)" in text
    assert (
        "  [3] system    You are a careful coding agent. PLAN MODE: propose, do not edit." in text
    )
    assert "## 3. series start: consolidated into the head\n  [0] system    You are a careful" in (
        text
    )
    assert (
        "  [1] user      The user asked to read main.py, planned a refactor and approved it."
        in (text)
    )
    assert "effective prompt (seq 9, PROMPT_LOCATION_HEAD)" in text
