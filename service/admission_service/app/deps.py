"""What every use case runs on (``Deps``), composed once at the root (``api/server.py``) and
handed to each handler: ``await admit(deps, tenant, command, idempotency)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from admission_service.app.gate import SessionGate
from admission_service.app.held_bodies import HeldBodies
from admission_service.app.hooks import NO_HOOKS, PhaseHooks
from admission_service.app.limits import (
    HELD_BODY_BYTES,
    HELD_FRAME_BYTES,
    IDEMPOTENCY_RETENTION_SECONDS,
    SESSION_CACHE_BYTES,
    Limits,
    Quotas,
)
from admission_service.app.page_tokens import PageTokens
from admission_service.app.ports import Storage
from admission_service.app.quotas import TenantQuotas
from admission_service.domain.catalog import Catalog
from admission_service.storage.transactions import PostgresStorage

# Each mutating RPC's response encoder, by method (``Call.method``): the API edge's, given at
# composition. The unit of work stores its bytes for a request_id and replays them verbatim.
ResponseEncoders = Mapping[str, Callable[[Any], bytes]]


@dataclass(frozen=True, slots=True)
class Deps:
    """The storage, the per-session write gate, the tenant quotas, the limits, the phase hooks,
    the catalog, the page tokens and the response encoders."""

    storage: Storage
    catalog: Catalog
    page_tokens: PageTokens
    encoders: ResponseEncoders
    limits: Limits
    quotas: TenantQuotas
    # One writer per session per process: a hot session's queued writers hold no connection.
    gate: SessionGate
    hooks: PhaseHooks = NO_HOOKS
    # The rendered bodies of this worker's sessions' last large requests (app/held_bodies.py).
    bodies: HeldBodies = field(default_factory=lambda: HeldBodies(HELD_BODY_BYTES))
    # How long a request_id replays (AIP-155); an older key is expired when it is read, whether
    # or not the sweeper (app/sweeper.py) has deleted it yet.
    idempotency_retention_seconds: float = IDEMPOTENCY_RETENTION_SECONDS

    @classmethod
    def compose(
        cls,
        engine: AsyncEngine | None,
        catalog: Catalog,
        limits: Limits | None = None,
        hooks: PhaseHooks = NO_HOOKS,
        quotas: Quotas | None = None,
        page_tokens: PageTokens | None = None,
        *,
        storage: Storage | None = None,
        encoders: ResponseEncoders,
        idempotency_retention_seconds: float = IDEMPOTENCY_RETENTION_SECONDS,
        session_cache_bytes: int = SESSION_CACHE_BYTES,
        held_frame_bytes: int = HELD_FRAME_BYTES,
        held_body_bytes: int = HELD_BODY_BYTES,
    ) -> Deps:
        """On PostgreSQL through ``engine`` (with a session cache of ``session_cache_bytes`` and
        large node frames held up to ``held_frame_bytes``), or on another ``storage`` (the
        tests' fake); large rendered bodies held up to ``held_body_bytes``."""
        if storage is None:
            assert engine is not None, "an engine or a storage"
            storage = PostgresStorage(engine, session_cache_bytes, held_frame_bytes)
        return cls(
            storage,
            catalog,
            # The server passes the configured or stored keys (api/server.py); without them,
            # tokens are these deps' own.
            page_tokens or PageTokens.random(),
            encoders,
            limits or Limits(),
            TenantQuotas(quotas or Quotas()),
            SessionGate(),
            hooks,
            HeldBodies(held_body_bytes),
            idempotency_retention_seconds,
        )
