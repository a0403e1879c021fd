"""bench/large_content.py, bench/large_memory.py, bench/harness_writes.py, bench/full_ab.py,
bench/step_ab.py and bench/streamed_ab.py run against the real service (their figures are not
asserted: speed is measured, not timed). Small messages keep them short; 15 x 0.3 MiB is still
above the default 4 MiB response bound, so the *refused* case is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import full_ab, harness_writes, large_content, large_memory, step_ab, streamed_ab

SMALL = ["--mib", "0.3"]


@pytest.fixture
def bench_server(postgres_server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The benches create their database on the run's server (bench/infra.bench_database)."""
    monkeypatch.setenv("DATABASE_URL", postgres_server_url)


def test_the_large_content_bench_runs(
    bench_server: None, capsys: pytest.CaptureFixture[str]
) -> None:
    large_content.main(["--calls", "5", *SMALL])
    report = json.loads(capsys.readouterr().out)
    assert set(report["refused"]["large_calls"]) == {"RESOURCE_EXHAUSTED"}
    assert set(report["admitted"]["large_calls"]) == {"OK"}
    assert set(report["committed"]["large_calls"]) == {"OK"}
    assert set(report["tools"]["large_calls"]) == {"OK"}
    for case in ("refused", "admitted", "committed", "tools"):
        assert set(report[case]["loaded"]) == {"p50_ms", "p99_ms", "max_ms"}


def test_the_large_memory_bench_runs(
    bench_server: None, capsys: pytest.CaptureFixture[str]
) -> None:
    large_memory.main(["--calls", "2", "--idle", "0", *SMALL])
    report = json.loads(capsys.readouterr().out)
    assert report["refused"]["calls"] == {"RESOURCE_EXHAUSTED": 2}
    assert report["admitted"]["calls"] == {"OK": 2}
    assert report["cancelled"]["calls"] == {"CANCELLED_AFTER_FIRST_CHUNK": 2}
    assert report["large_admit_mib"] == 4.5
    assert all(rss > 0 for rss in report["admitted"]["rss_mib"].values())


def test_the_harness_writes_bench_runs(
    bench_server: None, capsys: pytest.CaptureFixture[str]
) -> None:
    harness_writes.main(["--steps", "2"])
    report = json.loads(capsys.readouterr().out)
    for case in harness_writes.cases():
        assert report[case]["steps"] == 2
        assert set(report[case]) >= {"wal_bytes_per_step", "table_bytes_per_step", "step_p50_ms"}


def test_the_paired_full_bench_runs(bench_server: None, capsys: pytest.CaptureFixture[str]) -> None:
    here = Path(__file__).resolve().parents[2]  # this checkout, served twice
    full_ab.main([str(here), str(here), "--nodes", "300", "--calls", "2"])
    report = json.loads(capsys.readouterr().out)
    for checkout in ("before", "after"):
        assert report[checkout]["nodes"] >= 300
        assert 0 < report[checkout]["full_min_ms"] <= report[checkout]["full_p50_ms"]


def test_the_paired_step_bench_runs(bench_server: None, capsys: pytest.CaptureFixture[str]) -> None:
    here = Path(__file__).resolve().parents[2]  # this checkout, served twice
    # Enough steps for their CPU to span several of /proc's clock ticks (10 ms): three steps a
    # block once measured 0.0.
    step_ab.main([str(here), str(here), "--blocks", "2", "--steps", "12"])
    report = json.loads(capsys.readouterr().out)
    for checkout in ("before", "after"):
        assert report[checkout]["steps"] == 24
        assert len(report[checkout]["block_p50s_ms"]) == 2
        assert 0 < report[checkout]["step_p50_ms"] <= report[checkout]["step_p99_ms"]
        assert report[checkout]["cpu_ms_per_step"] > 0


def test_the_paired_streamed_bench_runs(
    bench_server: None, capsys: pytest.CaptureFixture[str]
) -> None:
    here = Path(__file__).resolve().parents[2]  # this checkout, served twice
    streamed_ab.main([str(here), str(here), "--samples", "2", "--text-results", "1"])
    report = json.loads(capsys.readouterr().out)
    assert report["samples"] == 2
    assert set(report["formats"]) == {
        "neutral",
        "openai_chat",
        "openai_responses",
        "anthropic_messages",
    }
    for row in report["formats"].values():
        assert row["floor_p50_ms"] > 0
        assert row["before_p50_ms"] > 0 and row["after_p50_ms"] > 0
