"""The inspector's HTTP server: read-only pages in a process of their own (issue 21).

``serve`` starts it beside the API workers (``api/workers.py``); it has its own event loop
(aiohttp's HTTP/1.1 server), its own database pool and use cases, its own bearer tokens
(reloaded like the workers'), and runs at a lower CPU priority (``PAS_INSPECTOR_NICE``): no
page is ever rendered on an API worker's event loop or in its process, so a slow page, a page
loader or a flood of connections costs the API nothing but the CPU the kernel lets it have.

Bounded against slow and idle clients (``PAS_INSPECTOR_*``, ``config.InspectorSettings``):

* at most ``max_connections`` open connections: the accept loop answers one more 503 and
  closes it at once (a TLS connection is closed), so the process holds a bounded number of
  sockets whatever arrives;
* a connection must send a complete request's headers within ``header_timeout_seconds`` of its
  opening or of its previous response (aiohttp's keep-alive timer, armed at the connection's
  start and not extended by the bytes of an incomplete request), or it is closed; the TLS
  handshake has as long;
* no body is read: a request that announces one is 413 and its connection closed, after at most
  ``body_timeout_seconds`` of reading and dropping what it sends meanwhile; request lines and
  header fields are bounded by aiohttp (8 190 bytes each, 128 fields);
* pages render in ``render_threads`` threads (the use cases they call run on the event loop),
  so the event loop keeps accepting, timing out and refusing while a long page renders.

What a request may reach: only GET and HEAD (every other method is 405); a ``Host`` the
allow-list names (421 otherwise: a DNS-rebinding page cannot read the inspector through a
browser); TLS with the API's certificate and key (and client CA) when the API serves TLS.
Authentication is the API's: a bearer token in ``Authorization: Bearer <token>``, or, for a
browser, HTTP Basic with the token as the password (any user name); the token's tenant scopes
every page, another tenant's session is 404. Pages carry no scripts and load nothing from
elsewhere (a Content-Security-Policy says so); every text is escaped (``pages``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import os
import socket
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from jinja2 import Environment
from sqlalchemy.ext.asyncio import AsyncEngine

from admission_service.api.tenancy import BearerTokens, TenantResolver
from admission_service.api.token_reload import TokenReloader
from admission_service.config import ConfigError, InspectorSettings, Settings, split_listen
from admission_service.domain.errors import (
    Aborted,
    AlreadyExists,
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from admission_service.inspector.pages import Pages, Refused, error_page

_log = logging.getLogger(__name__)

REALM = 'Basic realm="Prompt Admission inspector", charset="UTF-8"'
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
HTML = "text/html; charset=utf-8"
READ_METHODS = ("GET", "HEAD")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
# What a connection over the cap is told before it is closed (plaintext only).
OVER_CAPACITY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n"
    b"Retry-After: 5\r\n\r\n"
)
# An error's status by the class of the use case's error (the first match, in order).
STATUS_OF: tuple[tuple[type[DomainError], HTTPStatus], ...] = (
    (NotFound, HTTPStatus.NOT_FOUND),
    (InvalidArgument, HTTPStatus.BAD_REQUEST),
    (ResourceExhausted, HTTPStatus.TOO_MANY_REQUESTS),
    (Unavailable, HTTPStatus.SERVICE_UNAVAILABLE),
    (FailedPrecondition, HTTPStatus.CONFLICT),
    (Aborted, HTTPStatus.CONFLICT),
    (AlreadyExists, HTTPStatus.CONFLICT),
)


def token_of(authorization: str | None) -> str:
    """The bearer token in an Authorization header (Bearer, or Basic with it as password)."""
    if not authorization:
        raise Refused(HTTPStatus.UNAUTHORIZED, "credentials required", {"WWW-Authenticate": REALM})
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return value
    if scheme.lower() == "basic" and value:
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            decoded = ""
        password = decoded.partition(":")[2]
        if password:
            return password
    raise Refused(HTTPStatus.UNAUTHORIZED, "credentials required", {"WWW-Authenticate": REALM})


def allowed_hosts(settings: Settings) -> frozenset[str] | None:
    """The host names the inspector answers (None: any, ``PAS_INSPECTOR_ALLOWED_HOSTS=*``)."""
    configured = settings.inspector.allowed_hosts
    if "*" in configured:
        return None
    if configured:
        return frozenset(configured)
    host = split_listen(settings.inspector_listen or "")[0].lower()
    return frozenset((*LOOPBACK_NAMES, *(() if host in WILDCARD_HOSTS else (host,))))


def host_name(header: str) -> str:
    """The host name of a ``Host`` header: without its port or an IPv6 address's brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """TLS from the API's PEM files (requiring client certificates when the API does)."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
        if settings.tls_client_ca_file is not None:
            context.load_verify_locations(settings.tls_client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"the inspector cannot use the TLS files: {exc}") from exc
    return context


@dataclass(eq=False)
class Site:
    """The request handler: checks, authentication, then a page rendered off the loop."""

    pages: Pages
    tenants: TenantResolver
    default_tenant: str
    hosts: frozenset[str] | None
    renderers: ThreadPoolExecutor

    @property
    def environment(self) -> Environment:
        return self.pages.environment

    def tenant(self, request: web.BaseRequest) -> str:
        if not isinstance(self.tenants, BearerTokens):
            return self.default_tenant
        values = request.headers.getall("Authorization", [])
        if len(values) > 1:
            raise Refused(HTTPStatus.BAD_REQUEST, "more than one Authorization header")
        tenant = self.tenants.tenant_of_token(token_of(values[0] if values else None))
        if tenant is None:
            raise Refused(HTTPStatus.UNAUTHORIZED, "invalid token", {"WWW-Authenticate": REALM})
        return tenant

    def check(self, request: web.BaseRequest) -> None:
        """What is refused before anything is read for the request."""
        if request.method not in READ_METHODS:
            raise Refused(HTTPStatus.METHOD_NOT_ALLOWED, "read-only", {"Allow": "GET, HEAD"})
        hosts = request.headers.getall("Host", [])
        if len(hosts) != 1 or (self.hosts is not None and host_name(hosts[0]) not in self.hosts):
            raise Refused(HTTPStatus.MISDIRECTED_REQUEST, "this inspector does not serve that host")
        if request.body_exists:
            raise Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "the inspector reads no body")

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            self.check(request)
            tenant = self.tenant(request)
            loop = asyncio.get_running_loop()
            page = await loop.run_in_executor(
                self.renderers, self.pages.render, tenant, request.raw_path
            )
        except Refused as refused:
            return self.error(request, refused.status, refused.message, refused.headers)
        except DomainError as exc:
            status = next((s for kind, s in STATUS_OF if isinstance(exc, kind)), None)
            if status is not None:
                return self.error(request, status, exc.message, {})
            _log.exception("inspector page %r failed", request.raw_path)
            return self.error(request, HTTPStatus.INTERNAL_SERVER_ERROR, "internal error", {})
        except TimeoutError:
            return self.error(request, HTTPStatus.SERVICE_UNAVAILABLE, "the page timed out", {})
        except Exception:
            _log.exception("inspector page %r failed", request.raw_path)
            return self.error(request, HTTPStatus.INTERNAL_SERVER_ERROR, "internal error", {})
        return web.Response(body=page.encode(), status=200, headers=_headers(HTML, {}))

    def error(
        self, request: web.BaseRequest, status: HTTPStatus, message: str, headers: dict[str, str]
    ) -> web.Response:
        page = error_page(self.environment, status, message)
        response = web.Response(body=page.encode(), status=status, headers=_headers(HTML, headers))
        if request.body_exists or status == HTTPStatus.MISDIRECTED_REQUEST:
            response.force_close()  # what follows on this connection is not read
        return response


def _headers(content_type: str, extra: dict[str, str]) -> dict[str, str]:
    return {**SECURITY_HEADERS, **extra, "Content-Type": content_type}


class _Connections(web.Server):
    """aiohttp's connection manager, telling the accept loop when a connection is gone."""

    def __init__(self, handler: Site, on_closed: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._on_closed = on_closed

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self._on_closed()


class Listener:
    """The accept loop: at most ``limit`` open connections, each handed to aiohttp."""

    def __init__(
        self,
        sock: socket.socket,
        site: Site,
        tls: ssl.SSLContext | None,
        inspector: InspectorSettings,
    ) -> None:
        self.sock = sock
        self.tls = tls
        self.limit = inspector.max_connections
        self.handshake_timeout = inspector.header_timeout_seconds
        self.open = 0  # accepted and not yet closed, handshakes included
        self.server = _Connections(
            site,
            self.closed,
            keepalive_timeout=inspector.header_timeout_seconds,
            lingering_time=inspector.body_timeout_seconds,
            access_log=None,
        )
        self._accepting: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    def closed(self) -> None:
        self.open -= 1

    def start(self) -> None:
        self._accepting = asyncio.create_task(self._accept(), name="inspector-accept")

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self.sock)
            except OSError as exc:  # EMFILE, ECONNABORTED: wait, then accept again
                _log.warning("inspector: accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            if self.open >= self.limit:
                self._refuse(conn)
                continue
            self.open += 1
            task = asyncio.create_task(self._connect(conn))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    def _refuse(self, conn: socket.socket) -> None:
        """Best effort, never waiting: what already arrived is dropped (closing over unread
        bytes would reset the connection before the client reads the 503)."""
        if self.tls is None:
            with contextlib.suppress(OSError):
                conn.setblocking(False)
                conn.recv(65536)
            with contextlib.suppress(OSError):
                conn.send(OVER_CAPACITY)
        conn.close()

    async def _connect(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                self.server,
                conn,
                ssl=self.tls,
                ssl_handshake_timeout=self.handshake_timeout if self.tls else None,
            )
        except BaseException as exc:
            # Never connected (a failed or timed-out handshake): aiohttp will not report it.
            self.closed()
            conn.close()
            if not isinstance(exc, Exception):
                raise  # cancelled: the inspector is stopping

    async def stop(self, grace: float) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
        self.sock.close()
        for task in list(self._handshakes):
            task.cancel()
        self.server.pre_shutdown()
        await self.server.shutdown(grace)


def bind(listen: str) -> socket.socket:
    host, port = split_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=1024)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve the inspector on PAS_INSPECTOR_LISTEN={listen}: {exc}"
        ) from exc
    sock.setblocking(False)
    return sock


@dataclass(eq=False)
class RunningInspector:
    """A started inspector. ``stop`` is graceful and idempotent."""

    listener: Listener
    port: int
    renderers: ThreadPoolExecutor
    engine: AsyncEngine
    owns_engine: bool
    token_reloader: TokenReloader | None
    token_watch: asyncio.Task[None] | None
    stopped: bool = False

    async def stop(self, grace: float = 5.0) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.token_watch is not None:
            self.token_watch.cancel()
        await self.listener.stop(grace)
        await asyncio.to_thread(self.renderers.shutdown, True, cancel_futures=True)
        if self.owns_engine:
            await self.engine.dispose()


async def start_inspector(
    settings: Settings, *, engine: AsyncEngine | None = None, tenants: TenantResolver | None = None
) -> RunningInspector:
    """Bind ``PAS_INSPECTOR_LISTEN`` and serve the pages on this event loop.

    Without ``engine`` the inspector connects to ``settings``' database with a pool of its own
    (one connection per rendering thread) and disposes of it on ``stop``.
    """
    from admission_service.api.server import (
        compose,
        configured_engine,
        load_configured_catalog,
        tenant_resolver,
        token_reloader,
        watch_tokens,
    )

    if settings.inspector_listen is None:
        raise ConfigError("PAS_INSPECTOR_LISTEN is not set")
    inspector = settings.inspector
    tls = ssl_context(settings)
    catalog = load_configured_catalog(settings)
    sock = bind(settings.inspector_listen)
    owns_engine = engine is None
    if engine is None:
        url = await asyncio.to_thread(settings.resolve_database_url)
        engine = configured_engine(
            settings, url, pool_size=inspector.render_threads, max_overflow=0
        )
    tenants = tenants or tenant_resolver(settings)
    reloader = token_reloader(settings, tenants)
    renderers = ThreadPoolExecutor(inspector.render_threads, thread_name_prefix="inspector-page")
    pages = Pages(await compose(settings, engine, catalog), asyncio.get_running_loop())
    site = Site(pages, tenants, settings.default_tenant, allowed_hosts(settings), renderers)
    listener = Listener(sock, site, tls, inspector)
    listener.start()
    port = int(sock.getsockname()[1])
    _log.info(
        "inspector (pid %d) serving on %s:%d (%s, at most %d connections)",
        os.getpid(),
        split_listen(settings.inspector_listen)[0],
        port,
        "TLS" if tls is not None else "plaintext",
        inspector.max_connections,
    )
    return RunningInspector(
        listener,
        port,
        renderers,
        engine,
        owns_engine,
        reloader,
        watch_tokens(settings, reloader),
    )


async def serve_inspector(settings: Settings) -> None:
    """Serve the inspector until SIGTERM or SIGINT (SIGHUP reloads the bearer tokens)."""
    from admission_service.api.server import stop_signals

    running = await start_inspector(settings)
    async with stop_signals(running.token_reloader) as stop:
        try:
            await stop.wait()
        finally:
            await running.stop(settings.shutdown_grace_seconds)
    _log.info("inspector stopped")
