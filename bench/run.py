"""``python -m bench [--smoke] [--out PATH] [--only S1,S2,...]``: run the benchmark, print a
table and write the results as JSON (default ``bench/results/latest.json``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import scenarios, streamed_full, trace
from bench.infra import (
    REPO,
    ServerProcess,
    bench_database,
    postgres_version,
    start_floor,
    start_service,
)

TARGETS = {
    # Issue 22 (issue 14's, revised): one call per step against the physical floor (with as
    # many processes as the service has workers, one connection per caller), in both of the
    # service's configurations: prepared statements on (connected directly, as the floors are)
    # and as deployments run it (``_as_deployed``: PAS_DB_PREPARED_STATEMENTS unset, so the
    # service's default for a DATABASE_URL, off).
    "s1_step_p50_ratio_physical": ("<=", 2.0),
    "s1_step_p99_ratio_physical": ("<=", 2.5),
    "s2_steps_ratio_physical": (">=", 0.4),
    "s1_step_p50_ratio_physical_as_deployed": ("<=", 2.0),
    "s1_step_p99_ratio_physical_as_deployed": ("<=", 2.5),
    "s2_steps_ratio_physical_as_deployed": (">=", 0.4),
    # Issue 7: against the same-stack floor.
    "s1_p50_ratio": ("<=", 1.5),
    "s1_p99_ratio": ("<=", 1.5),
    "s2_throughput_ratio": (">=", 0.6),
    "s3_delta_ratio_100k_to_10": ("<=", 1.2),
    "s3_full_us_per_node": ("<=", 1.0),
    "s4_inspect_ratio_100k_to_10": ("<=", 1.2),
    "s5_compact_10k_ms": ("report", None),
    "s6_rss_mib": ("<=", 150.0),
    # Issue 23: a 1M-token FULL Admit, streamed, against the transport floor of the same bytes
    # (the worst of the wire formats; bench/streamed_full.py).
    "s7_streamed_full_p50_ratio_transport": ("<=", streamed_full.TARGET_RATIO),
    "cache_prefix_share_in_history": (">=", 0.97),
    "cache_prefix_share_replace": ("report", None),
    "cache_cold_requests_in_history": ("report", None),
}


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError):
        memory = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory": memory,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "commit": commit,
    }


def _verdict(key: str, value: float) -> str:
    op, target = TARGETS[key]
    if op == "report" or target is None:
        return "report"
    ok = value <= target if op == "<=" else value >= target
    return "holds" if ok else "MISSES"


def py_spy() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")


def deployed_profile(profile: Path) -> Path:
    """Where ``--profile`` records the as-deployed service: beside the first service's file."""
    return profile.with_name(f"{profile.stem}-as-deployed{profile.suffix}")


def start_profiler(pid: int, out: Path, native: bool = False) -> subprocess.Popen[bytes]:
    """py-spy (sampling, from PyPI) on the server process, collapsed stacks in ``out``.

    ``native``: with the C and Rust frames under the Python ones (py-spy's ``--native``, which
    pauses the process to sample it, so at 40 a second rather than 250). Without it, native
    work is charged to the Python frame that called it, and what the event loop and gRPC's
    Cython do, and their idle waits, all fall on ``Runner.run``; with it, ``profile_summary
    --active`` drops the idle waits and the rest can be told apart."""
    out.parent.mkdir(parents=True, exist_ok=True)
    sampling = ["--native", "--rate", "40"] if native else ["--nonblocking", "--rate", "250"]
    return subprocess.Popen(
        [
            py_spy(),
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            *sampling,
            "--output",
            str(out),
            "--subprocesses",  # a multi-worker `serve`: the workers are its children
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def run(
    plan: scenarios.Plan, only: set[str], log_dir: Path, profile: Path | None = None
) -> dict[str, Any]:
    results: dict[str, Any] = {"mode": "smoke" if plan is scenarios.SMOKE else "full"}
    results["machine"] = machine()
    with bench_database() as (url, where):
        results["machine"]["postgres"] = f"{postgres_version(url)} ({where})"
        service = start_service(url, log_dir)
        # The service as deployments run it (S1 and S2 only): PAS_DB_PREPARED_STATEMENTS
        # unset, so its default for a DATABASE_URL (the benchmark always passes one, even to
        # the embedded server's database).
        deployed = (
            start_service(url, log_dir, prepared_statements=None, name="service-as-deployed")
            if only & {"S1", "S2"}
            else None
        )
        floor = start_floor(url, log_dir)
        # The physical floor with as many processes as the service has workers (SO_REUSEPORT).
        physical = start_floor(
            url, log_dir, module="bench.physical_floor", processes=len(service.workers())
        )
        # The lean step prototypes on the service's schema (migrated by the service's start):
        # two pipelined round trips, and one (the same statements in a PL/pgSQL function).
        leans = {
            "lean_step": start_floor(url, log_dir, module="bench.lean_step"),
            "lean_function": start_floor(url, log_dir, module="bench.lean_function"),
        }
        results["machine"]["service_workers"] = len(service.workers())
        results["machine"]["physical_floor_processes"] = len(physical.workers())
        results["machine"]["service_prepared_statements"] = "true"
        if deployed is not None:
            results["machine"]["service_as_deployed_prepared_statements"] = (
                "unset (the service's default for a DATABASE_URL: off)"
            )
        profilers = []
        if profile:
            profilers.append(start_profiler(service.pid, profile))
            if deployed is not None:
                profilers.append(start_profiler(deployed.pid, deployed_profile(profile)))
        try:
            results["machine"]["service_rss_idle_mib"] = round(service.rss_mib(), 1)
            if "S1" in only:
                results["s1"] = await scenarios.s1_sequential(
                    service, floor, physical, plan, leans=leans, deployed=deployed
                )
            if "S2" in only:
                # Nothing after S2 uses the floors: each stopped once measured (connections).
                results["s2"], results["s6"] = await scenarios.s2_throughput_and_s6_memory(
                    service,
                    floor,
                    physical,
                    plan,
                    leans=leans,
                    deployed=deployed,
                    floor_measured=ServerProcess.stop,
                )
            if deployed is not None:
                deployed.stop()  # S3 onwards measure the first configuration only
            if "S3" in only:
                results["s3"] = await scenarios.s3_length_and_s4_inspect(service, plan, url)
            if "S5" in only:
                results["s5"] = await scenarios.s5_compact(service, plan)
            if "S7" in only:
                results["s7"] = await streamed_full.s7_streamed_full(
                    service, plan.s7_samples, plan.s7_text_results
                )
            if "TRACE" in only:
                steps = trace.build_trace(plan.trace_steps)
                window = plan.trace_window
                results["cache"] = {
                    "context_window": window,
                    "steps": plan.trace_steps,
                    "in_history": await trace.replay(service.target, "in-history", steps, window),
                    "replace": await trace.replay(service.target, "replace", steps, window),
                }
        finally:
            for profiler in profilers:
                profiler.send_signal(2)  # py-spy writes its output on SIGINT
            for profiler in profilers:
                profiler.wait(60)
            service.stop()
            if deployed is not None:
                deployed.stop()
            floor.stop()
            physical.stop()
            for server in leans.values():
                server.stop()
    return results


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """The flat keys of latest.json (issues 7 and 14), including the raw floor figures."""
    out: dict[str, Any] = {}
    if "s1" in results:
        s1 = results["s1"]
        out |= {
            "physical_floor_p50_ms": s1["physical_floor_p50_ms"],
            "physical_floor_p99_ms": s1["physical_floor_p99_ms"],
            "s1_step_p50_ms": s1["step_p50_ms"],
            "s1_step_p99_ms": s1["step_p99_ms"],
            "s1_step_p50_ratio_physical": s1["step_p50_ratio_physical"],
            "s1_step_p99_ratio_physical": s1["step_p99_ratio_physical"],
            "physical_floor_cpu_ms_per_call": s1["physical_floor_cpu_ms_per_call"],
            "s1_step_cpu_ms_per_call": s1["step_cpu_ms_per_call"],
            "s1_p50_ratio": s1["p50_ratio"],
            "s1_p99_ratio": s1["p99_ratio"],
            "floor_p50_ms": s1["floor_p50_ms"],
            "floor_p99_ms": s1["floor_p99_ms"],
            "s1_admit_p50_ms": s1["admit_p50_ms"],
            "s1_admit_p99_ms": s1["admit_p99_ms"],
            "floor_cpu_ms_per_call": s1["floor_cpu_ms_per_call"],
            "s1_admit_cpu_ms_per_call": s1["admit_cpu_ms_per_call"],
        }
        for measure in ("p50_ms", "p99_ms", "cpu_ms_per_call"):
            if f"step_as_deployed_{measure}" in s1:
                out[f"s1_step_as_deployed_{measure}"] = s1[f"step_as_deployed_{measure}"]
        for quantile in ("p50", "p99"):
            key = f"step_as_deployed_{quantile}_ratio_physical"
            if key in s1:
                out[f"s1_step_{quantile}_ratio_physical_as_deployed"] = s1[key]
        for name in ("lean_step", "lean_function"):
            for measure in (
                "p50_ms",
                "p50_ratio_physical",
                "p99_ratio_physical",
                "cpu_ms_per_call",
            ):
                if f"{name}_{measure}" in s1:
                    out[f"{name}_{measure}"] = s1[f"{name}_{measure}"]
    if "s2" in results:
        out |= {
            "physical_floor_calls_per_s_16": results["s2"]["physical_floor_calls_per_s"],
            "s2_steps_ratio_physical": results["s2"]["steps_ratio_physical"],
            "s2_two_call_steps_per_s_16": results["s2"]["two_call_steps_per_s"],
            "s2_throughput_ratio": results["s2"]["throughput_ratio"],
            "floor_calls_per_s_16": results["s2"]["floor_calls_per_s"],
            "s2_steps_per_s_16": results["s2"]["steps_per_s"],
            "s6_rss_mib": results["s6"]["rss_after_mib"],
            "s6_rss_second_half_growth_mib": results["s6"]["rss_second_half_growth_mib"],
            "s6_pss_mib": results["s6"]["pss_after_mib"],
            "s6_uss_mib": results["s6"]["uss_after_mib"],
            "s6_server_pss_mib": results["s6"]["server_pss_after_mib"],
        }
        if "steps_per_s_as_deployed" in results["s2"]:
            out["s2_steps_per_s_16_as_deployed"] = results["s2"]["steps_per_s_as_deployed"]
            out["s2_steps_ratio_physical_as_deployed"] = results["s2"][
                "steps_ratio_physical_as_deployed"
            ]
    for name in ("lean_step", "lean_function"):
        if f"{name}_ratio_physical" in results.get("s2", {}):
            out[f"s2_{name}_ratio_physical"] = results["s2"][f"{name}_ratio_physical"]
    if "s3" in results:
        s3 = results["s3"]
        out |= {
            "s3_delta_ratio_100k_to_10": s3["delta_ratio_large_to_small"],
            "s3_full_us_per_node": s3["full_us_per_node"],
            "s4_inspect_ratio_100k_to_10": s3["inspect_ratio_large_to_small"],
        }
        if "full_transport_us_per_node" in s3:  # gRPC + the client's parse of the same bytes
            out["s3_full_transport_us_per_node"] = s3["full_transport_us_per_node"]
    if "s5" in results:
        out["s5_compact_10k_ms"] = results["s5"]["compact_p50_ms"]
    if "s7" in results:
        out["s7_streamed_full_p50_ratio_transport"] = results["s7"]["p50_ratio_transport"]
        for name, row in results["s7"]["formats"].items():
            out[f"s7_{name}_p50_ms"] = row["service_p50_ms"]
            out[f"s7_{name}_transport_p50_ms"] = row["floor_p50_ms"]
    if "cache" in results:
        cache = results["cache"]
        out |= {
            "cache_prefix_share_in_history": cache["in_history"]["prefix_share"],
            "cache_prefix_share_replace": cache["replace"]["prefix_share"],
            "cache_cold_requests_in_history": cache["in_history"]["cold_requests"],
            "cache_cold_requests_replace": cache["replace"]["cold_requests"],
            "cache_tokens_written_in_history": cache["in_history"]["tokens_written"],
            "cache_tokens_written_replace": cache["replace"]["tokens_written"],
        }
    return out


def table(results: dict[str, Any], flat: dict[str, Any]) -> str:
    lines = [f"{'measure':<40} {'value':>12}  {'target':<10} verdict", "-" * 76]
    for key, (op, target) in TARGETS.items():
        if key not in flat:
            continue
        goal = "report" if op == "report" else f"{op} {target}"
        lines.append(f"{key:<40} {flat[key]:>12}  {goal:<10} {_verdict(key, flat[key])}")
    lines.append("-" * 76)
    for key, value in flat.items():
        if key not in TARGETS:
            lines.append(f"{key:<40} {value:>12}")
    if "s3" in results:
        lines.append("")
        lines.append(
            f"{'S3/S4 nodes':<12} {'DELTA p50':>10} {'FULL p50':>10} {'Inspect p50':>12}  (ms)"
        )
        for row in results["s3"]["sizes"].values():
            lines.append(
                f"{row['nodes']:<12} {row['delta_p50_ms']:>10} {row['full_p50_ms']:>10}"
                f" {row['inspect_p50_ms']:>12}"
            )
    if "s7" in results:
        lines.append("")
        lines.append(
            f"{'S7 FULL streamed':<20} {'bytes':>10} {'tokens':>9} {'p50':>8} {'floor':>7}"
            f" {'ratio':>6}  (ms)"
        )
        for name, row in results["s7"]["formats"].items():
            lines.append(
                f"{name:<20} {row['response_bytes']:>10} {row['total_tokens']:>9}"
                f" {row['service_p50_ms']:>8} {row['floor_p50_ms']:>7} {row['ratio']:>6}"
            )
    if "cache" in results:
        lines.append("")
        for name in ("in_history", "replace"):
            replayed = results["cache"][name]
            lines.append(
                f"cache {name:<11} share {replayed['prefix_share']:.4f}  cold "
                f"{replayed['cold_requests']:>3}  written {replayed['tokens_written']:>9}  "
                f"reasons {replayed['divergence_reasons']}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a few seconds: checks the bench runs")
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/latest.json")
    parser.add_argument("--only", default="S1,S2,S3,S5,S7,TRACE", help="scenarios to run")
    parser.add_argument(
        "--profile", type=Path, help="record py-spy collapsed stacks of the service to this file"
    )
    parser.add_argument(
        "--logs", type=Path, help="keep the servers' logs in this directory (default: discarded)"
    )
    args = parser.parse_args(argv)
    plan = scenarios.SMOKE if args.smoke else scenarios.FULL
    only = {part.strip().upper() for part in args.only.split(",") if part.strip()}
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            logs = args.logs
        else:
            logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pas-bench-")))
        results = asyncio.run(run(plan, only, logs, args.profile))
    flat = headline(results)
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    document = {**flat, "targets": {k: _verdict(k, v) for k, v in flat.items() if k in TARGETS}}
    document["details"] = results
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(table(results, flat))  # noqa: T201
    print(f"\nwrote {args.out} ({results['elapsed_s']} s)")  # noqa: T201
    return 0
