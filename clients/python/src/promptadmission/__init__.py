"""Python client of the Prompt Admission Service.

The generated API (messages and stubs) is ``promptadmission.v1``; this package adds
``AdmissionClient`` (asyncio) and ``SyncAdmissionClient``: default deadlines, retries with the
same ``request_id``, bearer-token metadata, and typed errors (``AdmissionError``).
"""

from promptadmission.client import (
    DEFAULT_TARGET,
    DEFAULT_TIMEOUT,
    AdmissionClient,
    RetryPolicy,
    SyncAdmissionClient,
    with_request_id,
)
from promptadmission.errors import ERROR_DOMAIN, AdmissionError, FieldViolation, Reason
from promptadmission.messages import assistant_message, text_message, user_message
from promptadmission.streaming import StreamedResponseError, reassemble
from promptadmission.trajectory import Trajectory

__all__ = [
    "DEFAULT_TARGET",
    "DEFAULT_TIMEOUT",
    "ERROR_DOMAIN",
    "AdmissionClient",
    "AdmissionError",
    "FieldViolation",
    "Reason",
    "RetryPolicy",
    "StreamedResponseError",
    "SyncAdmissionClient",
    "Trajectory",
    "assistant_message",
    "reassemble",
    "text_message",
    "user_message",
    "with_request_id",
]
