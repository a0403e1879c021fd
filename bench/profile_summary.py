"""Summarise py-spy collapsed stacks (``--format raw``): where the samples fall, by function
(self and inclusive), so a profile can be read in a terminal or quoted in a note.

    python -m bench.profile_summary /tmp/service.txt [--top 30] [--match admission_service]
        [--within AdmissionServicer.Admit] [--by-function] [--active]

``--active`` (for a profile recorded with native frames, ``profile_step --native``): leaves out
the samples of threads waiting (in ``epoll_wait`` or on a lock), which py-spy cannot tell from
work in native code, and adds the shares by the innermost Python module of each sample.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--match", default="", help="only inclusive rows whose frame contains this")
    parser.add_argument(
        "--within",
        default="",
        help="only samples with a frame containing this (e.g. Servicer.Admit)",
    )
    parser.add_argument(
        "--by-function", action="store_true", help="merge a function's lines into one row"
    )
    parser.add_argument(
        "--active", action="store_true", help="leave out waiting threads' samples (native stacks)"
    )
    args = parser.parse_args()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    total = 0
    for line in args.path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        if args.within and not any(args.within in frame for frame in frames):
            continue
        if args.active and _waiting(frames):
            continue
        modules[_innermost_module(frames)] += count
        if args.by_function:
            frames = [_function(frame) for frame in frames]
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    print(f"{total} samples")  # noqa: T201
    print("\nself:")  # noqa: T201
    for frame, count in own.most_common(args.top):
        print(f"{100 * count / total:6.1f}%  {frame}")  # noqa: T201
    print("\ninclusive:")  # noqa: T201
    rows = [(f, c) for f, c in inclusive.most_common() if args.match in f][: args.top]
    for frame, count in rows:
        print(f"{100 * count / total:6.1f}%  {frame}")  # noqa: T201
    if args.active:
        print("\nby innermost Python module:")  # noqa: T201
        for module, count in modules.most_common(args.top):
            print(f"{100 * count / total:6.1f}%  {module}")  # noqa: T201


# A thread's leaf frames while it waits: the event loop's and gRPC's poller's epoll, an idle
# pool thread's lock.
_WAITS = ("epoll_wait", "epoll_pwait", "PyThread_acquire_lock_timed")


def _waiting(frames: list[str]) -> bool:
    return any(wait in frame for frame in frames[-3:] for wait in _WAITS)


def _innermost_module(frames: list[str]) -> str:
    """The package folder and module of the innermost Python frame (``storage/raw``)."""
    for frame in reversed(frames):
        path = frame.rpartition(" (")[2].rpartition(":")[0]
        if path.endswith(".py"):
            return "/".join(path[:-3].split("/")[-2:])
    return "(native only)"


def _function(frame: str) -> str:
    """``name (path:line)`` -> ``name (path)``."""
    head, _, location = frame.rpartition(" (")
    if not head:
        return frame
    return f"{head} ({location.rpartition(':')[0]})"


if __name__ == "__main__":
    main()
