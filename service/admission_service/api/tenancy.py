"""Which tenant a call acts for.

Every use case is scoped to a tenant, and a session is visible to its tenant only: the tenant is
part of every key the storage reads or writes, so another tenant's session is simply not found
(``NOT_FOUND``, never ``PERMISSION_DENIED``: its existence is not leaked).

``BearerTokens`` authenticates a call by the ``authorization: Bearer <token>`` metadata and maps
the token to its tenant. The configuration holds only SHA-256 digests of the tokens
(``sha256:<hex>``, see ``hash_token``); tokens are random secrets of at least 128 bits, so a
plain digest is as hard to invert as the token is to guess. ``DefaultTenant`` serves
development setups without authentication.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import grpc
from promptadmission.v1.error_reasons import Reason

from admission_service.telemetry import context as call_context

# hash_token is re-exported: callers that make tokens (the CLI, tests) find it here too.
from admission_service.token_hashes import hash_token as hash_token
from admission_service.token_hashes import is_token_hash

BEARER = "bearer"
MISSING_CREDENTIALS = Reason.MISSING_CREDENTIALS
INVALID_TOKEN = Reason.INVALID_TOKEN


class Unauthenticated(Exception):
    """The call carries no valid credentials; the interceptor maps it to UNAUTHENTICATED."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class TenantResolver(Protocol):
    async def tenant(self, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        """The tenant of the call; raises (for example ``Unauthenticated``) to refuse it."""
        ...


class DefaultTenant:
    """Every call acts for one configured tenant (no authentication)."""

    def __init__(self, tenant: str) -> None:
        self._tenant = tenant

    async def tenant(self, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        call_context.tenant.set(self._tenant)
        return self._tenant


class BearerTokens:
    """Authenticates ``authorization: Bearer <token>`` against hashed tokens."""

    def __init__(
        self, tenants_by_hash: Mapping[str, str], *, open_tenant: str | None = None
    ) -> None:
        """``open_tenant``: while no token has been configured yet (a tokens file empty at start,
        with ``PAS_ALLOW_UNAUTHENTICATED=true``), every call acts for it unauthenticated; the
        first reload that finds tokens turns authentication on for good."""
        self._tenants: dict[str, str] = {}
        self._open_tenant = open_tenant
        self.replace(tenants_by_hash)

    def replace(self, tenants_by_hash: Mapping[str, str]) -> None:
        """Authenticate by these tokens from now on (a reload: revoked tokens are refused by
        the next call; calls already past authentication finish)."""
        for token_hash in tenants_by_hash:
            if not is_token_hash(token_hash):
                raise ValueError("token hashes must look like sha256:<64 lower-case hex digits>")
        self._tenants = dict(tenants_by_hash)  # one assignment: a call sees old or new
        if self._tenants:
            self._open_tenant = None  # removing every token later refuses every call

    def tenant_of_token(self, token: str) -> str | None:
        """The tenant a bearer token authenticates, or None (also for the operator inspector)."""
        if self._open_tenant is not None:
            return self._open_tenant
        # A lookup by digest: its timing depends only on the digest of what the caller sent,
        # which tells nothing about any valid token.
        return self._tenants.get(hash_token(token))

    async def tenant(self, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        if (open_tenant := self._open_tenant) is not None:
            call_context.tenant.set(open_tenant)
            return open_tenant
        values = [
            value for key, value in (context.invocation_metadata() or ()) if key == "authorization"
        ]
        if not values:
            raise Unauthenticated(
                MISSING_CREDENTIALS, "missing credentials: send authorization: Bearer <token>"
            )
        if len(values) > 1:
            raise Unauthenticated(INVALID_TOKEN, "more than one authorization header")
        value = values[0]
        scheme, _, token = (value if isinstance(value, str) else "").partition(" ")
        token = token.strip()
        if scheme.lower() != BEARER or not token:
            raise Unauthenticated(INVALID_TOKEN, "the authorization header is not Bearer <token>")
        tenant = self.tenant_of_token(token)
        if tenant is None:
            raise Unauthenticated(INVALID_TOKEN, "the bearer token is not valid")
        call_context.tenant.set(tenant)
        return tenant
