"""Bearer tokens reloaded without a restart (issue 13): revoking a token must not need every
replica restarted.

``TokenReloader`` reads ``PAS_AUTH_TOKENS`` and ``PAS_AUTH_TOKENS_FILE`` again and hands the
result to the running ``BearerTokens``: on SIGHUP (``serve``) and when the file changes
(``watch``, a cheap ``stat`` every few seconds: no inotify dependency, and it works on the
volumes and ConfigMaps orchestrators mount). A file that does not read or does not parse keeps
the tokens in force and logs why: a half-written file must not lock everybody out, nor let
anybody in.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from admission_service.api.tenancy import BearerTokens
from admission_service.config import ConfigError, read_token_tenants

_log = logging.getLogger(__name__)


class TokenReloader:
    def __init__(self, tokens: BearerTokens, inline: str, path: Path | None) -> None:
        self._tokens = tokens
        self._inline = inline
        self._path = path
        self._seen = self._signature()

    def _signature(self) -> tuple[int, int, int] | None:
        if self._path is None:
            return None
        try:
            stat = os.stat(self._path)
        except OSError:
            return None
        return (stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def reload(self) -> bool:
        """Read the tokens again; True when they are in force."""
        self._seen = self._signature()
        try:
            tenants = read_token_tenants(self._inline, self._path)
        except ConfigError as exc:
            _log.error("bearer tokens not reloaded, the previous ones stay in force: %s", exc)
            return False
        self._tokens.replace(tenants)
        _log.info(
            "bearer tokens reloaded: %d tokens of %d tenants",
            len(tenants),
            len(set(tenants.values())),
        )
        return True

    async def watch(self, interval: float) -> None:
        """Reload whenever the tokens file changes (checked every ``interval`` seconds)."""
        while True:
            await asyncio.sleep(interval)
            if self._signature() != self._seen:
                self.reload()


def on_sighup(reloader: TokenReloader | None) -> Callable[[], None]:
    """SIGHUP's handler: reload the tokens. Without tokens to reload it only logs: SIGHUP (a
    terminal closing, an operator's habit) never stops a server, whatever its configuration."""
    if reloader is not None:

        def reload() -> None:
            reloader.reload()

        return reload

    def nothing_to_reload() -> None:
        _log.info("SIGHUP: no bearer tokens are configured, nothing to reload")

    return nothing_to_reload
