"""``admission-service serve`` as an operator runs it: a subprocess that stops on SIGTERM."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from admission_service.api.shutdown_watchdog import EXIT_STUCK
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc

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


@contextmanager
def silent_collector() -> Iterator[int]:
    """A port that accepts connections and never answers (a collector gone quiet): the OTLP
    exporter's call to it waits for its whole timeout."""
    held: list[socket.socket] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.2)
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    held.append(listener.accept()[0])

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        try:
            yield listener.getsockname()[1]
        finally:
            stop.set()
            acceptor.join()
            for connection in held:
                connection.close()


@pytest.mark.slow
def test_a_stop_stuck_past_its_overrun_ends_with_every_stack(
    database_url: str, tmp_path: Path
) -> None:
    """A worker whose stop cannot finish (here: its spans' last flush to a collector that never
    answers, under a 60 s export timeout) writes every stack and ends
    ``PAS_SHUTDOWN_OVERRUN_SECONDS`` past the grace, not at the 30 s default; the parent then
    exits non-zero, naming it."""
    grace, overrun = 1, 2
    with (
        silent_collector() as port,
        serving(
            database_url,
            tmp_path,
            PAS_SHUTDOWN_GRACE_SECONDS=str(grace),
            PAS_SHUTDOWN_OVERRUN_SECONDS=str(overrun),
            PAS_TRACING_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
            OTEL_EXPORTER_OTLP_INSECURE="true",
            OTEL_EXPORTER_OTLP_TIMEOUT="60",
        ) as served,
    ):
        with grpc.insecure_channel(served.target) as channel:  # a call, so a span to flush
            stub = api_grpc.AdmissionServiceStub(channel)
            stub.CreateSession(api.CreateSessionRequest(session_id="stuck-stop"), timeout=10)
        started = time.monotonic()
        code = stop_with_sigterm(served.process, served.log, grace)
        took = time.monotonic() - started
    text = served.log.read_text()
    assert code != 0, text
    assert f"the shutdown did not finish within {grace + overrun:g}s" in text, text
    assert f"exited with status {EXIT_STUCK} while stopping" in text, text
    assert "Thread 0x" in text or "Current thread 0x" in text, text  # faulthandler's stacks
    assert took < 20, took
