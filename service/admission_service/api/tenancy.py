"""Which tenant a call acts for.

Every use case is scoped to a tenant. For now every call acts for the configured default tenant;
bearer-token authentication (a token in the ``authorization`` metadata mapped to a tenant) plugs
in here as another ``TenantResolver`` without touching the servicer.
"""

from __future__ import annotations

from typing import Any, Protocol

import grpc


class TenantResolver(Protocol):
    async def tenant(self, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        """The tenant of the call; raises (for example an authentication error) to refuse it."""
        ...


class DefaultTenant:
    """Every call acts for one configured tenant (no authentication)."""

    def __init__(self, tenant: str) -> None:
        self._tenant = tenant

    async def tenant(self, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        return self._tenant
