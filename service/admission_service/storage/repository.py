"""SQL for one session inside one transaction. It reads and writes, never commits.

``SessionStore`` is the session's repository, made of one part per table group, each in the
module that holds that group's SQL:

* ``session_rows`` (``sessions``): the session row (counters, series state, the previous
  request's prefix and the surface's running price);
* ``idempotency`` (``idempotency_keys``): the stored responses of idempotent calls;
* ``log_and_surface`` (``events``, ``surface_nodes``, ``tool_calls``): the event log and the
  surface nodes and tool calls it builds; reads of the surface, derived requests as stored
  frames concatenated by the database (a DELTA request reads only the nodes appended since the
  previous request); pages of the log for the read RPCs, as typed ``rows``;
* ``admissions`` (``admissions``, ``requests``): a step's admission and the cache ledger's rows.

Everything the projection rule needs is indexed, so an admission does not read or rewrite the
whole surface. Writes nothing later reads in the same transaction go into the statement batch
(``batch``) and are sent at the end as one statement (``flush``), so a mutation costs about as
many round trips as the irreducible lock, read, write and commit.
"""

from __future__ import annotations

from admission_service.domain.stored import AdmissionRecord, Growth, StoredResponse
from admission_service.storage.admissions import AdmissionsAndLedger
from admission_service.storage.idempotency import StoredResponses
from admission_service.storage.log_and_surface import FrameReads, InspectionReads, SurfaceWrites
from admission_service.storage.rows import (
    LedgerRow,
    NodeRecord,
    StoredEvent,
    SystemNodeDetail,
)
from admission_service.storage.session_rows import SessionRows, list_sessions

__all__ = [
    "AdmissionRecord",
    "Growth",
    "LedgerRow",
    "NodeRecord",
    "SessionStore",
    "StoredEvent",
    "StoredResponse",
    "SystemNodeDetail",
    "list_sessions",
]


class SessionStore(
    SessionRows, StoredResponses, SurfaceWrites, AdmissionsAndLedger, FrameReads, InspectionReads
):
    """The SQL of one (tenant, session) within the caller's transaction:
    ``SessionStore(connection, tenant, session_id)``."""
