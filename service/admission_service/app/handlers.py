"""The use cases, one handler per RPC: ``await handlers.admit(deps, tenant, command, key)``.

Each is a plain module-level function in ``use_cases/`` (a mutation: one ``UnitOfWork``; a
read: one ``snapshot``), composed at the root with the ``Deps`` it runs on (``api/server.py``).
"""

from admission_service.app.use_cases.admit import admit, reconcile
from admission_service.app.use_cases.compact import compact, plan_compaction
from admission_service.app.use_cases.inspect import (
    chat_window,
    inspect,
    ledger_window,
    list_events,
    list_trajectory,
)
from admission_service.app.use_cases.record import record
from admission_service.app.use_cases.sessions import (
    create_session,
    delete_session,
    get_session,
    list_sessions,
)

__all__ = [
    "admit",
    "chat_window",
    "compact",
    "create_session",
    "delete_session",
    "get_session",
    "inspect",
    "ledger_window",
    "list_events",
    "list_sessions",
    "list_trajectory",
    "plan_compaction",
    "reconcile",
    "record",
]
