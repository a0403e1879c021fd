"""The inspector's HTTP listener: read-only pages over the service's own use cases.

A ``ThreadingHTTPServer`` on ``PAS_INSPECTOR_LISTEN`` (off by default) whose handler threads
run the use cases on the service's event loop (``run_coroutine_threadsafe``) and render the
Jinja2 templates with autoescaping on, so prompt and message text is always escaped. Only GET
and HEAD exist: every other method is 405. Authentication is the API's: a bearer token in
``Authorization: Bearer <token>``, or, for a browser, HTTP Basic with the token as the password
(any user name); the token's tenant scopes every page, and another tenant's session is 404. The
pages carry no scripts and load nothing from elsewhere (a Content-Security-Policy says so).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jinja2 import Environment

from admission_service.api.tenancy import BearerTokens, TenantResolver
from admission_service.app.service import AdmissionApp
from admission_service.domain.errors import InvalidArgument, SessionNotFound
from admission_service.inspector.pages import Pages, Refused, error_page

_log = logging.getLogger(__name__)

REALM = 'Basic realm="Prompt Admission inspector", charset="UTF-8"'
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


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


@dataclass(eq=False)
class Inspector:
    """The pages, bound to one service (its use cases, tenants and event loop)."""

    app: AdmissionApp
    tenants: TenantResolver
    default_tenant: str
    loop: asyncio.AbstractEventLoop
    pages: Pages = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.pages = Pages(self.app, self.loop)

    @property
    def environment(self) -> Environment:
        return self.pages.environment

    def tenant(self, authorization: str | None) -> str:
        if not isinstance(self.tenants, BearerTokens):
            return self.default_tenant
        tenant = self.tenants.tenant_of_token(token_of(authorization))
        if tenant is None:
            raise Refused(HTTPStatus.UNAUTHORIZED, "invalid token", {"WWW-Authenticate": REALM})
        return tenant

    def render(self, path: str, authorization: str | None) -> str:
        return self.pages.render(self.tenant(authorization), path)


def _handler(inspector: Inspector) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "PromptAdmissionInspector"
        sys_version = ""

        def do_GET(self) -> None:
            self._respond(body=True)

        def do_HEAD(self) -> None:
            self._respond(body=False)

        def _refuse_write(self) -> None:
            self._send(HTTPStatus.METHOD_NOT_ALLOWED, "read-only", {"Allow": "GET, HEAD"}, True)

        do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _refuse_write

        def _respond(self, *, body: bool) -> None:
            try:
                page = inspector.render(self.path, self.headers.get("Authorization"))
            except Refused as refused:
                self._send(refused.status, refused.message, refused.headers, body)
                return
            except SessionNotFound:
                self._send(HTTPStatus.NOT_FOUND, "session not found", {}, body)
                return
            except InvalidArgument as exc:
                self._send(HTTPStatus.BAD_REQUEST, exc.message, {}, body)
                return
            except Exception:
                _log.exception("inspector page %s failed", self.path)
                self._send(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error", {}, body)
                return
            self._write(HTTPStatus.OK, page.encode(), "text/html; charset=utf-8", {}, body)

        def _send(
            self, status: HTTPStatus, message: str, headers: dict[str, str], body: bool
        ) -> None:
            page = error_page(inspector.environment, status, message)
            self._write(status, page.encode(), "text/html; charset=utf-8", headers, body)

        def _write(
            self,
            status: HTTPStatus,
            payload: bytes,
            content_type: str,
            headers: dict[str, str],
            body: bool,
        ) -> None:
            self.send_response(status)
            for name, value in {**SECURITY_HEADERS, **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if body:
                self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            _log.debug("inspector: " + format, *args)

    return Handler


class InspectorServer:
    """The listener, serving in a thread of its own until ``stop``."""

    def __init__(self, inspector: Inspector, host: str, port: int) -> None:
        self.httpd = ThreadingHTTPServer((host, port), _handler(inspector))
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="inspector", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
