"""A serving process reuses its large buffers (api/allocator.py), checked by the kernel's count
of the page faults a growing response's buffers cost, each run in a fresh interpreter (the
setting is the process's)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator")

# A session's FULL response, a little larger each step: 20 MiB joined from its parts, 8 times.
_GROWING_RESPONSES = """
import json, resource, sys
from admission_service.api.allocator import reuse_large_buffers
applied = reuse_large_buffers() if sys.argv[1] == "reuse" else None
parts = [bytes([i % 251]) * (64 * 1024) for i in range(320)]
faults = []
for step in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    response = b"".join((b"head" * (1024 * step), *parts))
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del response
print(json.dumps({"applied": applied, "faults": faults[2:]}))
"""


def _run(mode: str, **environ: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    done = subprocess.run(
        [sys.executable, "-c", _GROWING_RESPONSES, mode],
        env={**env, **environ},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_growing_response_lands_in_the_pages_the_last_one_left() -> None:
    page_count = 20 * 1024 * 1024 // 4096  # a 20 MiB buffer's pages
    plain, reused = _run("plain"), _run("reuse")
    assert reused["applied"] is True
    # glibc's dynamic threshold alone: every buffer is a fresh mapping, each page faulted in.
    assert all(count >= page_count * 0.9 for count in plain["faults"])  # type: ignore[attr-defined]
    # Fixed thresholds: the next buffer reuses the freed one's pages (only its growth is new).
    assert all(count < page_count * 0.1 for count in reused["faults"])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "environ",
    [
        {"MALLOC_MMAP_THRESHOLD_": "131072"},
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"},
    ],
)
def test_an_operators_own_allocator_settings_win(environ: dict[str, str]) -> None:
    page_count = 20 * 1024 * 1024 // 4096
    result = _run("reuse", **environ)
    assert result["applied"] is False
    assert all(count >= page_count * 0.9 for count in result["faults"])  # type: ignore[attr-defined]
