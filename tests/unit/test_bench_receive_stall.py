"""bench/receive_stall.py runs (its figures are not asserted: speed is measured, not timed)."""

from __future__ import annotations

import json

import pytest

from bench import receive_stall


def test_the_receive_stall_probe_runs(capsys: pytest.CaptureFixture[str]) -> None:
    receive_stall.main(["--mib", "0.25", "--requests", "3"])
    report = json.loads(capsys.readouterr().out)
    assert report["requests"] == 3
    assert set(report["loop_gap_ms"]) == {"p50", "p99", "max", "median_stall", "longest"}
