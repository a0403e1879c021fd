"""``admission-service serve`` as an operator runs it: a subprocess that stops on SIGTERM."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.serve_process import serving, stop_with_sigterm

GRACE_SECONDS = 5


@pytest.mark.slow
def test_sigterm_shuts_down_gracefully(database_url: str, tmp_path: Path) -> None:
    with serving(database_url, tmp_path, PAS_SHUTDOWN_GRACE_SECONDS=str(GRACE_SECONDS)) as served:
        code = stop_with_sigterm(served.process, served.log, GRACE_SECONDS)
    text = served.log.read_text()
    assert code == 0, text
    assert "shutting down" in text
    assert "Traceback" not in text
