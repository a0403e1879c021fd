"""What the paired benches share (``bench.full_ab``, ``bench.step_ab``): two checkouts of the
service named on the command line, served at once against one database, and their report.

Each checkout's ``service`` folder is put first on its server's ``PYTHONPATH``, so the same
installed environment runs either tree."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.infra import ServerProcess, start_service


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments every paired bench takes (``before``, ``after``); ``doc``'s first line
    describes it."""
    parsed = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parsed.add_argument("before", type=Path, help="a checkout of the service (its root folder)")
    parsed.add_argument("after", type=Path, help="another checkout")
    return parsed


def checkouts(args: argparse.Namespace) -> dict[str, str]:
    """``before`` and ``after``, each its checkout's absolute folder."""
    return {"before": str(args.before.resolve()), "after": str(args.after.resolve())}


def serve(url: str, logs: Path, trees: dict[str, str], **options: Any) -> dict[str, ServerProcess]:
    """Each checkout served against ``url`` (``options``: ``start_service``'s), by name."""
    return {
        key: start_service(url, logs, env={"PYTHONPATH": f"{tree}/service"}, name=key, **options)
        for key, tree in trees.items()
    }


def report(trees: dict[str, str], results: dict[str, Any]) -> None:
    print(json.dumps({"checkouts": trees, **results}, indent=2))  # noqa: T201
