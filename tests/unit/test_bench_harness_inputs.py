"""bench/harness_inputs.py runs (its figures are not asserted: speed is measured, not timed)."""

from __future__ import annotations

import pytest

from bench import harness_inputs


def test_the_harness_inputs_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    harness_inputs.main(
        ["--tools", "3", "--prompt-kib", "64", "--repeat", "2", "--large-tools-mib", "0.2"]
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 + 4 * len(harness_inputs.PROVIDERS)
    assert all(line.endswith(" ms") for line in lines)
