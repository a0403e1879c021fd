"""The inspector's pages: which use cases a URL reads and which template shows them.

``Pages.render(tenant, target)`` is the one entry the HTTP layer (``http``) calls, from a
rendering thread of the inspector's process: the use cases run on that process's event loop
(``run_coroutine_threadsafe``), the views fold their results and the Jinja2 templates render
them with autoescaping on, so prompt and message text is always escaped. ``Refused`` is a page
that cannot be shown (its HTTP status and message).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined

from admission_service.app import handlers
from admission_service.app.deps import Deps
from admission_service.app.use_cases.inspect import SINCE_LAST_REQUEST
from admission_service.domain.wire import WireFormat
from admission_service.inspector import views

T = TypeVar("T")

SESSIONS_PAGE = 100
# A Chat page: the events just before its cursor (the newest on the first page), at most this
# many and this many payload bytes (the newest always comes).
CHAT_EVENTS = 500
CHAT_PAGE_BYTES = 512 * 1024
# Requests per Trajectory page (each shows its prompt where it changed, and the diff).
TRAJECTORY_ROWS = 50
# The prompt text and diff lines one Trajectory page carries; later rows show line counts.
TRAJECTORY_TEXT_BYTES = 384 * 1024
# Requests per window of the ledger chart (34 px each: the chart stays under 1 100 px wide).
LEDGER_WINDOW = 30
VIEWS = ("chat", "trajectory", "tokens")


Context = dict[str, Any]


def _page_token(query: str) -> str:
    """The ``page`` query parameter: a page token of the view's use case (checked there: a
    forged or foreign one is INVALID_ARGUMENT, HTTP 400)."""
    return parse_qs(query).get("page", [""])[0]


def _view_url(session_id: str, view: str) -> str:
    return f"/sessions/{quote(session_id, safe='')}/{view}"


def _with_page(url: str, token: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{urlencode({'page': token})}"


def _backwards(here: str, token: str, older: str, noun: str, newest: str) -> tuple[views.Link, ...]:
    """The links of a view that opens at its newest page (``here``): to the page before this
    one (``older``, its page token), and, past the first page (``token``), back to the newest."""
    links = []
    if older:
        links.append(views.Link(f"earlier {noun}", _with_page(here, older), "older"))
    if token:
        links.append(views.Link(f"{newest} {noun}", here, "latest"))
    return tuple(links)


class Refused(Exception):
    """A page that cannot be shown: its HTTP status, message and extra response headers."""

    def __init__(self, status: HTTPStatus, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def utc(moment: datetime) -> str:
    """A time as operators compare them across machines: in UTC, the zone written out."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def templates() -> Environment:
    environment = Environment(
        loader=PackageLoader("admission_service.inspector", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["utc"] = utc
    return environment


def error_page(environment: Environment, status: HTTPStatus, message: str) -> str:
    """The page of a refused or failed request: what went wrong and the way back."""
    return environment.get_template("error.html").render(
        status=f"{status.value} {status.phrase}", message=message
    )


@dataclass(eq=False)
class Pages:
    """The pages, over one process's use cases and event loop."""

    deps: Deps
    loop: asyncio.AbstractEventLoop
    _: KW_ONLY
    timeout: float = 10.0
    environment: Environment = field(default_factory=templates, init=False, repr=False)

    def _run(self, work: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(self.timeout)  # type: ignore[arg-type]

    def render(self, tenant: str, target: str) -> str:
        """The page at ``target`` (the request's path and query) for ``tenant``."""
        url = urlsplit(target)
        parts = [unquote(part) for part in url.path.split("/") if part]
        if not parts:
            return self._sessions(tenant, url.query)
        if parts[0] != "sessions" or len(parts) not in (2, 3):
            raise Refused(HTTPStatus.NOT_FOUND, "no such page")
        session_id = parts[1]
        view = parts[2] if len(parts) == 3 else "chat"
        if view not in VIEWS:
            raise Refused(HTTPStatus.NOT_FOUND, "no such page")
        session = self._run(handlers.get_session(self.deps, tenant, session_id))
        common: Context = {"session": session, "view": view}
        token = _page_token(url.query)
        if view == "chat":
            return self._chat(tenant, session_id, token, common)
        if view == "trajectory":
            return self._trajectory(tenant, session_id, token, common)
        return self._tokens(tenant, session_id, token, common)

    def _sessions(self, tenant: str, query: str) -> str:
        """The tenant's sessions, newest first, or those whose id starts with ``?q=``."""
        search = parse_qs(query).get("q", [""])[0].strip()
        page = self._run(
            handlers.list_sessions(
                self.deps,
                tenant,
                SESSIONS_PAGE,
                _page_token(query),
                newest_first=True,
                id_prefix=search,
            )
        )
        here = f"/?{urlencode({'q': search})}" if search else "/"
        links = _backwards(here, _page_token(query), page.next_page_token, "sessions", "newest")
        pager = views.Pager(f"{len(page.items)} sessions", links)
        return self._page("sessions.html", tenant, sessions=page.items, pager=pager, search=search)

    def _chat(self, tenant: str, session_id: str, token: str, common: Context) -> str:
        """The newest events first (what an operator opens a session for), each page linking
        to the events before it; a page holds at most CHAT_PAGE_BYTES of events."""
        window = self._run(
            handlers.chat_window(self.deps, tenant, session_id, CHAT_EVENTS, token, CHAT_PAGE_BYTES)
        )
        facts = views.prompt_facts(window.prompt_events)
        items = views.chat_items(window.events, window.positions, facts)
        here = _view_url(session_id, "chat")
        links = _backwards(here, token, window.next_page_token, "events", "newest")
        events = window.events
        shown = (
            f"events {events[0].event.seq} to {events[-1].event.seq}"
            f" of {common['session'].event_count}"
            if events
            else "no events"
        )
        pager = views.Pager(shown, links)
        return self._page("chat.html", tenant, items=items, pager=pager, **common)

    def _trajectory(self, tenant: str, session_id: str, token: str, common: Context) -> str:
        """One page of the trajectory, oldest requests first; each page links to the next."""
        page = self._run(
            handlers.list_trajectory(self.deps, tenant, session_id, TRAJECTORY_ROWS, token)
        )
        rows = views.trajectory_rows(page.items, text_budget=TRAJECTORY_TEXT_BYTES)
        fitting = next((n for n, row in enumerate(rows) if row.elided), len(rows))
        if fitting < len(rows):
            # The page ends before the first row past the text budget: read the token that
            # leads to it (the same page, shorter), so the next page starts with that row.
            page = self._run(
                handlers.list_trajectory(self.deps, tenant, session_id, fitting, token)
            )
            rows = rows[: len(page.items)]
        here = _view_url(session_id, "trajectory")
        links = []
        if token:
            links.append(views.Link("first requests", here, "first"))
        if page.next_page_token:
            links.append(
                views.Link("later requests", _with_page(here, page.next_page_token), "newer")
            )
        shown = f"requests {rows[0].index} to {rows[-1].index}" if rows else "no requests"
        pager = views.Pager(shown, tuple(links))
        return self._page("trajectory.html", tenant, rows=rows, pager=pager, **common)

    def _tokens(self, tenant: str, session_id: str, token: str, common: Context) -> str:
        """The breakdown, and the ledger chart over a window of requests: the latest first,
        each page linking to the window before."""
        inspected = self._run(
            handlers.inspect(self.deps, tenant, session_id, WireFormat.NEUTRAL, SINCE_LAST_REQUEST)
        )
        window = self._run(
            handlers.ledger_window(self.deps, tenant, session_id, LEDGER_WINDOW, token)
        )
        ledger = window.items
        here = _view_url(session_id, "tokens")
        links = _backwards(here, token, window.next_page_token, "requests", "latest")
        shown = (
            f"requests {ledger[0].request_index} to {ledger[-1].request_index}"
            if ledger
            else "no requests"
        )
        return self._page(
            "tokens.html",
            tenant,
            breakdown=inspected.breakdown,
            effective=inspected.effective_prompt,
            chart=views.ledger_chart(ledger),
            divergence_label=views.divergence_label,
            ledger=ledger,
            pager=views.Pager(shown, links),
            **common,
        )

    def _page(self, name: str, tenant: str, **context: Any) -> str:
        return self.environment.get_template(name).render(tenant=tenant, **context)
