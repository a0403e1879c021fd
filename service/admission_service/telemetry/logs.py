"""Log configuration: one JSON object per line (default) or plain text, each record tagged
with the current call's request id and tenant.

Structured fields go in ``extra={"fields": {...}}``; they become top-level keys of the JSON
object (and ``key=value`` pairs in text). Nothing here logs prompt or message text: what a
record says is up to its caller, and callers log payloads only when ``PAS_LOG_PAYLOADS`` asks.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from admission_service.telemetry import context

LOG_FORMATS = ("json", "text")
# Loggers that narrate every statement or connection at INFO; the service's own call log is
# the record of what happened.
_QUIET = ("sqlalchemy", "grpc", "opentelemetry")
_HANDLER_NAME = "admission_service"


class CallContextFilter(logging.Filter):
    """Stamps every record with the request id and tenant of the call that logged it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = context.request_id.get()
        record.tenant = context.tenant.get()
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("request_id", "tenant"):
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        entry.update(_fields(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = {"request_id": getattr(record, "request_id", None), **_fields(record)}
        pairs = " ".join(f"{k}={v}" for k, v in extras.items() if v is not None)
        if not pairs:
            return text
        first, newline, rest = text.partition("\n")
        return f"{first} [{pairs}]{newline}{rest}"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of each record."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def configure_logging(level: str, fmt: str = "json", stream: TextIO | None = None) -> None:
    """Route log records to ``stream`` (default: the current stderr) in ``fmt``. Calling it
    again replaces the handler an earlier call installed and leaves any other one alone."""
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.addFilter(CallContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == _HANDLER_NAME:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    quiet = logging.WARNING if logging.getLevelName(level) != logging.DEBUG else logging.INFO
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(quiet, root.level))
