"""The use cases (SPEC §3, §4): one method per RPC, each one database transaction.

Every mutation follows the same shape (``_mutate``, one ``UnitOfWork``): lock the session row,
replay a stored response for a repeated ``request_id``, check ``expected_revision``, run the pure
domain transition, write its events and the new session state, store the response, commit. Any
exception — including the cancellation of a call whose client went away or whose deadline
passed — leaves the unit of work without a commit, so nothing is written.
"""

from __future__ import annotations

from admission_service.app.use_cases.admit import Admission
from admission_service.app.use_cases.compact import Compaction
from admission_service.app.use_cases.inspect import Reads
from admission_service.app.use_cases.sessions import Sessions


class AdmissionApp(Sessions, Admission, Compaction, Reads):
    """Every mutating method takes the caller's ``Idempotency`` (or None) and returns a
    ``Reply``: its typed result and the response bytes, encoded once by the method's encoder
    (``encoders``, given at composition), stored in the same transaction as the effect and
    replayed verbatim for a repeated ``request_id``. With ``validate_only`` nothing is
    committed, stored or encoded."""
