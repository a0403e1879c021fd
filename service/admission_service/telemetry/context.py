"""What the current call is, for logs and spans: its request id and, once resolved, its tenant.

Set by the telemetry interceptor (request id) and the tenant resolver (tenant) at the start of
a call; asyncio gives every call its own copy, so concurrent calls never see each other's.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

REQUEST_ID_HEADER = "x-request-id"
# What a caller-provided request id may look like: short, printable, no spaces or quotes (it
# is written into log lines and echoed back as metadata).
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")

request_id: ContextVar[str | None] = ContextVar("pas_request_id", default=None)
tenant: ContextVar[str | None] = ContextVar("pas_tenant", default=None)


def valid_request_id(value: str) -> bool:
    return _REQUEST_ID.fullmatch(value) is not None


def new_request_id() -> str:
    return uuid.uuid4().hex
