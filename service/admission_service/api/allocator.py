"""A serving process's large buffers reused, not faulted in afresh each call.

A FULL response of a long session is one buffer of megabytes, built (the join of its head and
frames) and copied again by gRPC into its own, every call. glibc serves an allocation above its
mmap threshold with a fresh ``mmap`` and unmaps it when freed, so every page of it is faulted in
and zeroed again: 28 MB (S3's 100 000 nodes) is ~7 000 page faults, ~17 ms for the join alone.
glibc raises the threshold to the size of a freed mapping (its *dynamic* threshold) so that a
program repeating one size soon allocates from its heap instead, but a session's response is a
little larger every step, so it is always just past the threshold, and never reused.

A serving process therefore fixes the threshold at glibc's largest, 32 MiB, and the trim
threshold (how much free memory at the top of a heap glibc keeps instead of returning it) at
64 MiB: what glibc's own dynamic rule reaches after freeing a 32 MiB buffer, without waiting for
one. A buffer under 32 MiB then lands in pages the previous one left. The cost is memory a
worker keeps after large calls (freed, reused by the next): ``bench.cache_memory`` and
``bench.large_memory`` measure it (docs/BENCHMARKS.md, twenty-first round).

An operator's own glibc settings win: with ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``
or a ``glibc.malloc`` tunable in ``GLIBC_TUNABLES`` set, nothing is changed. Not glibc (musl,
macOS): nothing to do.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
from collections.abc import Mapping

M_TRIM_THRESHOLD = -1  # malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # where the dynamic rule puts it for such a buffer

_OPERATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def operator_chose(environ: Mapping[str, str]) -> bool:
    """Whether the environment sets glibc's allocator thresholds itself."""
    return any(name in environ for name in _OPERATOR_SETTINGS) or "glibc.malloc." in environ.get(
        "GLIBC_TUNABLES", ""
    )


def reuse_large_buffers() -> bool:
    """Fix glibc's mmap and trim thresholds for this process (see the module); whether they
    were set (False: not glibc, or the operator chose them)."""
    if platform.libc_ver()[0] != "glibc" or operator_chose(os.environ):
        return False
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None)
        return bool(
            libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        )
    return False
