"""``admission-service serve`` as an operator runs it: a subprocess that stops on SIGTERM."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.api.serve_process import serving

GRACE_SECONDS = 5


@pytest.mark.slow
def test_sigterm_shuts_down_gracefully(database_url: str, tmp_path: Path) -> None:
    with serving(database_url, tmp_path, PAS_SHUTDOWN_GRACE_SECONDS=str(GRACE_SECONDS)) as served:
        served.process.send_signal(signal.SIGTERM)
        code = served.process.wait(timeout=GRACE_SECONDS + 10)
    text = served.log.read_text()
    assert code == 0, text
    assert "shutting down" in text
    assert "Traceback" not in text
