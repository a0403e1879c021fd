"""The operator inspector over a real server: ``admission-service serve`` with the default
worker count (one per core) and the inspector in its own process, as an operator runs it. HTTP
behaviour (authentication, tenancy, read only, escaping, ``Host``, bodies, timeouts, the
connection cap, TLS) and, in a real browser (Debian's headless Chromium through chromedriver),
what an operator checks on each page. Screenshots of every view are kept as test artifacts in
``PAS_SCREENSHOT_DIR`` (default ``.data/inspector-screenshots``).

Without chromium the browser tests skip, unless CI is set: then they must run.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from admission_service.api.tenancy import hash_token
from admission_service.config import InspectorSettings, usable_cores
from admission_service.inspector.http import RunningInspector, start_inspector
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.api.serve_process import Served, free_port, serving
from tests.api.support import admit_request, api_settings, async_stub, channel_with_metadata
from tests.browser import chrome, full_page_screenshot, missing

RUN = uuid.uuid4().hex[:8]
TOKEN = f"inspector-token-{RUN}-0123456789abcdef"
OTHER_TOKEN = f"inspector-other-{RUN}-0123456789abcdef"
TOKENS = {hash_token(TOKEN): f"ops-{RUN}", hash_token(OTHER_TOKEN): f"other-{RUN}"}
SCRIPT = "<script>document.title='pwned'</script>"
ROOT = Path(__file__).resolve().parents[2]
INSPECTOR_LINE = re.compile(r"inspector \(pid (\d+)\) serving on \S+:(\d+)")
WORKERS_LINE = re.compile(r"serving with (\d+) workers \(pids ([\d, ]+)\)")


def auth_tokens(tokens: dict[str, str]) -> str:
    return " ".join(f"{tenant}={token_hash}" for token_hash, tenant in tokens.items())


@dataclass
class Inspected:
    base_url: str
    session_id: str
    other_session_id: str
    served: Served
    inspector_pid: int
    worker_pids: set[int]


async def drive_session(target: str, token: str) -> str:
    channel = channel_with_metadata(target, ("authorization", f"Bearer {token}"))
    stub = async_stub(channel)
    session_id = f"inspect-{uuid.uuid4().hex[:12]}"
    await stub.CreateSession(api.CreateSessionRequest(session_id=session_id), timeout=10)
    tools = [pb.Tool(name="read", parameters_json='{"type":"object"}')]
    prompts = ["You are A.", f"You are B. {SCRIPT}", "You are C."]
    for step, prompt in enumerate(prompts, start=1):
        users = [f"question {step}"] if step != 2 else [f"user says {SCRIPT}"]
        admitted = await stub.Admit(
            admit_request(session_id, prompt, *users, turn=1, step=step, tools=tools), timeout=10
        )
        await stub.Record(
            api.RecordRequest(
                session_id=session_id,
                admission_id=admitted.admission_id,
                assistant=pb.Message(
                    role=pb.MESSAGE_ROLE_ASSISTANT,
                    content=[pb.ContentBlock(text=pb.TextBlock(text=f"answer {step}"))],
                ),
                usage=pb.Usage(input_tokens=40 * step, cache_read_tokens=12 * (step - 1)),
            ),
            timeout=10,
        )
    # A config change in the same step as a prompt update: the header must not repeat it.
    await stub.Admit(
        admit_request(
            session_id, "You are D.", "last", turn=2, step=1, tools=tools, config={"t": "0.3"}
        ),
        timeout=10,
    )
    await channel.close(None)
    return session_id


def inspector_started(log: Path, timeout: float = 60) -> tuple[int, int]:
    """The inspector process's pid and port, from its start line in the server's log."""
    deadline = time.monotonic() + timeout
    while (found := INSPECTOR_LINE.search(log.read_text())) is None:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)  # polling: another process's log
    return int(found.group(1)), int(found.group(2))


def serving_with_inspector(database_url: str, tmp_path: Path) -> AbstractContextManager[Served]:
    """``serve`` as configured by default (PAS_WORKERS unset: one worker per core) with the
    inspector on and this module's tokens."""
    return serving(
        database_url,
        tmp_path,
        PAS_WORKERS=None,
        PAS_AUTH_TOKENS=auth_tokens(TOKENS),
        PAS_INSPECTOR_LISTEN=f"127.0.0.1:{free_port()}",
        PAS_LOG_FORMAT="text",
    )


@pytest.fixture(scope="module")
async def inspected(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Inspected]:
    """``serve`` as configured by default (PAS_WORKERS unset: one worker per core) with the
    inspector on; two tenants' sessions driven through the API."""
    with serving_with_inspector(database_url, tmp_path_factory.mktemp("inspector")) as served:
        pid, port = await asyncio.to_thread(inspector_started, served.log)
        workers = WORKERS_LINE.search(served.log.read_text())
        assert workers is not None, served.log.read_text()
        yield Inspected(
            f"http://127.0.0.1:{port}",
            await drive_session(served.target, TOKEN),
            await drive_session(served.target, OTHER_TOKEN),
            served,
            pid,
            {int(p) for p in workers.group(2).split(", ")},
        )


async def in_process(database_url: str, **inspector: Any) -> RunningInspector:
    """An inspector in this process (its own pool on the test database), for what needs
    settings of its own: short timeouts, a small cap, TLS."""
    settings = api_settings(
        database_url,
        token_tenants=TOKENS,
        inspector_listen="127.0.0.1:0",
        **inspector.pop("settings", {}),
    )
    return await start_inspector(replace(settings, inspector=InspectorSettings(**inspector)))


def fetch(
    url: str,
    *,
    method: str = "GET",
    authorization: str | None = None,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def basic(token: str) -> str:
    return "Basic " + base64.b64encode(f"operator:{token}".encode()).decode()


async def test_pages_need_the_apis_bearer_token_and_show_only_the_tenants_sessions(
    inspected: Inspected,
) -> None:
    base = inspected.base_url
    status, headers, _ = await asyncio.to_thread(fetch, base + "/")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic realm=")
    status, _, _ = await asyncio.to_thread(fetch, base + "/", authorization="Bearer wrong")
    assert status == 401

    status, headers, page = await asyncio.to_thread(
        fetch, base + "/", authorization=f"Bearer {TOKEN}"
    )
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert inspected.session_id in page and inspected.other_session_id not in page
    # Basic, with the token as the password, is how a browser asks an operator for it.
    status, _, page = await asyncio.to_thread(fetch, base + "/", authorization=basic(TOKEN))
    assert status == 200 and inspected.session_id in page

    other = f"{base}/sessions/{inspected.other_session_id}/chat"
    status, _, _ = await asyncio.to_thread(fetch, other, authorization=f"Bearer {TOKEN}")
    assert status == 404
    status, _, _ = await asyncio.to_thread(fetch, base + "/nowhere", authorization=basic(TOKEN))
    assert status == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_there_is_no_write_path(inspected: Inspected, method: str) -> None:
    url = f"{inspected.base_url}/sessions/{inspected.session_id}/chat"
    status, headers, _ = await asyncio.to_thread(
        fetch, url, method=method, authorization=f"Bearer {TOKEN}"
    )
    assert status == 405 and headers["Allow"] == "GET, HEAD"


async def test_prompt_and_message_text_is_escaped(inspected: Inspected) -> None:
    for view in ("chat", "trajectory"):
        url = f"{inspected.base_url}/sessions/{inspected.session_id}/{view}"
        status, _, page = await asyncio.to_thread(fetch, url, authorization=f"Bearer {TOKEN}")
        assert status == 200
        assert SCRIPT not in page and "<script" not in page
        assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in page


async def test_a_bad_session_id_is_a_bad_request(inspected: Inspected) -> None:
    url = f"{inspected.base_url}/sessions/{'x' * 300}/chat"
    status, _, page = await asyncio.to_thread(fetch, url, authorization=f"Bearer {TOKEN}")
    assert status == 400 and "session_id" in page
    assert "session_id: session_id" not in page  # the field is named once
    assert '<a id="back" href="/">' in page  # an error page leads back to the sessions


@pytest.mark.parametrize("view", ["chat", "trajectory", "tokens"])
async def test_a_forged_page_token_is_a_bad_request(inspected: Inspected, view: str) -> None:
    url = f"{inspected.base_url}/sessions/{inspected.session_id}/{view}?page=AAAAforged"
    status, _, page = await asyncio.to_thread(fetch, url, authorization=f"Bearer {TOKEN}")
    assert status == 400 and "page_token" in page


async def test_sessions_are_listed_newest_first_and_found_by_the_start_of_their_id(
    inspected: Inspected,
) -> None:
    base = inspected.base_url
    status, _, page = await asyncio.to_thread(fetch, base + "/", authorization=f"Bearer {TOKEN}")
    assert status == 200
    listed = re.findall(r'<a href="/sessions/([^/"]+)/chat">', page)
    assert listed[0] == inspected.session_id  # the last one driven for this tenant
    found = base + "/?" + urllib.parse.urlencode({"q": inspected.session_id[:-3]})
    status, _, page = await asyncio.to_thread(fetch, found, authorization=f"Bearer {TOKEN}")
    assert re.findall(r'<a href="/sessions/([^/"]+)/chat">', page) == [inspected.session_id]
    missing_id = base + "/?q=nobody-has-this-id"
    status, _, page = await asyncio.to_thread(fetch, missing_id, authorization=f"Bearer {TOKEN}")
    assert status == 200 and "No session id starts with" in page
    status, _, page = await asyncio.to_thread(
        fetch, base + "/?q=%3Cscript%3E", authorization=f"Bearer {TOKEN}"
    )
    assert status == 400 and "id_prefix" in page and "<script>" not in page


async def test_times_are_shown_in_utc_with_the_zone(inspected: Inspected) -> None:
    status, _, page = await asyncio.to_thread(
        fetch, inspected.base_url + "/", authorization=f"Bearer {TOKEN}"
    )
    assert status == 200
    assert re.search(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td>", page)


def exchange(port: int, data: bytes, *, wait: float = 10) -> bytes:
    """What the inspector answers ``data`` on one raw connection, until it closes it (or
    ``wait`` passes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def port_of(inspected: Inspected) -> int:
    return int(inspected.base_url.rpartition(":")[2])


async def test_the_inspector_has_a_process_of_its_own_beside_the_default_workers(
    inspected: Inspected,
) -> None:
    """Before issue 21 the inspector was started by each worker: the second one could not bind
    its port and ``serve`` exited 1 on any machine with two cores."""
    assert len(inspected.worker_pids) == usable_cores()
    assert inspected.inspector_pid not in inspected.worker_pids
    parent = Path(f"/proc/{inspected.inspector_pid}/stat").read_text().rpartition(")")[2].split()[1]
    assert int(parent) == inspected.served.process.pid
    # It runs below the workers' priority (PAS_INSPECTOR_NICE, default 10).
    nice = Path(f"/proc/{inspected.inspector_pid}/stat").read_text().rpartition(")")[2].split()[16]
    assert int(nice) == InspectorSettings().nice
    assert inspected.served.process.poll() is None
    status, _, page = await asyncio.to_thread(
        fetch, inspected.base_url + "/", authorization=f"Bearer {TOKEN}"
    )
    assert status == 200 and inspected.session_id in page


async def test_only_the_allowed_hosts_are_served(inspected: Inspected) -> None:
    """A page of another site whose name resolves to the inspector (DNS rebinding) sends its
    own name in Host: it is refused before authentication."""
    port = port_of(inspected)
    bearer = f"Bearer {TOKEN}"
    for host in ("evil.example", "evil.example:80", "127.0.0.2", "localhost.evil.example"):
        status, _, _ = await asyncio.to_thread(
            fetch, inspected.base_url + "/", authorization=bearer, headers={"Host": host}
        )
        assert status == 421, host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
        status, _, _ = await asyncio.to_thread(
            fetch, inspected.base_url + "/", authorization=bearer, headers={"Host": host}
        )
        assert status == 200, host
    twice = b"GET / HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n"
    answer = await asyncio.to_thread(exchange, port, twice)
    assert re.match(rb"HTTP/1\.[01] 4\d\d ", answer), answer  # aiohttp's own 400


async def test_a_request_with_a_body_is_refused_and_its_connection_closed(
    inspected: Inspected,
) -> None:
    request = b"GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 100
    started = time.monotonic()
    answer = await asyncio.to_thread(exchange, port_of(inspected), request)
    assert answer.startswith(b"HTTP/1.1 413")
    assert time.monotonic() - started < InspectorSettings().body_timeout_seconds + 2


async def test_a_connection_that_does_not_finish_its_headers_is_closed(
    database_url: str,
) -> None:
    inspector = await in_process(database_url, header_timeout_seconds=1.0)
    try:
        started = time.monotonic()
        # One byte a while: what keeps a connection open forever without a header timeout.
        with socket.create_connection(("127.0.0.1", inspector.port), timeout=10) as sock:
            closed = await asyncio.to_thread(trickle, sock, b"GET / HTTP/1.1\r\nHost: x\r\nX-a: b")
        assert closed and time.monotonic() - started < 4
        # An idle kept-alive connection is closed as well, after its first answer.
        request = f"GET / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        answer = await asyncio.to_thread(exchange, inspector.port, request.encode())
        assert answer.startswith(b"HTTP/1.1 200")
    finally:
        await inspector.stop()


def trickle(sock: socket.socket, data: bytes) -> bool:
    """Send ``data`` a byte every 0.2 s and then wait; whether the server closed the
    connection meanwhile (within 10 s)."""
    sock.settimeout(0.2)
    for byte in data * 50:
        try:
            sock.send(bytes([byte]))
            if sock.recv(1024) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


async def test_connections_past_the_cap_are_answered_503_and_closed(database_url: str) -> None:
    inspector = await in_process(database_url, max_connections=3)
    held = [socket.create_connection(("127.0.0.1", inspector.port), timeout=5) for _ in range(3)]
    try:
        await asyncio.sleep(0.2)  # accepted
        answer = await asyncio.to_thread(exchange, inspector.port, b"")
        assert answer.startswith(b"HTTP/1.1 503")
        held.pop().close()
        await asyncio.sleep(0.2)  # its place is free again
        status, _, _ = await asyncio.to_thread(
            fetch, f"http://127.0.0.1:{inspector.port}/", authorization=f"Bearer {TOKEN}"
        )
        assert status == 200
        assert inspector.listener.open <= 3
    finally:
        for sock in held:
            sock.close()
        await inspector.stop()


async def test_the_inspector_serves_tls_when_the_api_does(
    database_url: str, tmp_path: Path
) -> None:
    from tests.api.test_tls import Authority

    ca = Authority(tmp_path, "inspector")
    issued = ca.issue("server", server=True)
    inspector = await in_process(
        database_url, settings={"tls_cert_file": issued.cert, "tls_key_file": issued.key}
    )
    try:
        trusting = ssl.create_default_context(cafile=str(ca.cert))
        status, _, page = await asyncio.to_thread(
            fetch,
            f"https://localhost:{inspector.port}/",
            authorization=f"Bearer {TOKEN}",
            context=trusting,
        )
        assert status == 200 and "Sessions" in page
        # Plain HTTP gets no page (the handshake fails and the connection is closed).
        answer = await asyncio.to_thread(
            exchange, inspector.port, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
        )
        assert b"200 OK" not in answer
    finally:
        await inspector.stop()


async def test_two_thousand_slow_clients_leave_the_api_serving(inspected: Inspected) -> None:
    """Issue 21's attack: 2 000 unauthenticated connections to the inspector, each sending
    ``GET / HTTP/1.1\\r\\nHost: x\\r\\n`` and waiting. Before, each got a thread of the
    serving process (1 766 threads) and another tenant's ListSessions took 55 s. Now another
    tenant's calls all succeed meanwhile, and the inspector's process keeps a bounded number of
    threads and sockets. The latency is measured, not asserted: ``python -m
    bench.inspector_slow_clients`` (docs/BENCHMARKS.md)."""
    from bench.inspector_slow_clients import Peaks, open_sockets, slow_clients_process, threads

    port, limit = port_of(inspected), InspectorSettings().max_connections
    pid = inspected.inspector_pid
    channel = channel_with_metadata(
        inspected.served.target, ("authorization", f"Bearer {OTHER_TOKEN}")
    )
    stub = async_stub(channel)
    peaks = Peaks()
    try:
        with slow_clients_process("127.0.0.1", port, 2000) as stop:
            for index in range(100):
                if index % 2:
                    listed = await stub.ListSessions(api.ListSessionsRequest(), timeout=5)
                    assert inspected.other_session_id in [s.session_id for s in listed.sessions]
                else:
                    got = await stub.GetSession(
                        api.GetSessionRequest(session_id=inspected.other_session_id), timeout=5
                    )
                    assert got.session.session_id == inspected.other_session_id
                if index % 10 == 0:
                    peaks.inspector_threads = max(peaks.inspector_threads, threads(pid))
                    peaks.inspector_sockets = max(peaks.inspector_sockets, open_sockets(pid))
            counts = await asyncio.to_thread(stop)
    finally:
        await channel.close(None)
    assert counts["connections_opened"] == 2000
    # Past the cap, a connection is answered 503 and closed at once.
    assert counts["closed_by_server"] >= 2000 - limit
    assert peaks.inspector_threads <= InspectorSettings().render_threads + 4
    assert peaks.inspector_sockets <= limit + 16  # the listener, its pool, the rest
    assert inspected.served.process.poll() is None
    status, _, _ = await asyncio.to_thread(
        fetch, inspected.base_url + "/", authorization=f"Bearer {TOKEN}"
    )
    assert status == 200


# ---- in a real browser ------------------------------------------------------------------


def screenshot_dir() -> Path:
    directory = Path(os.environ.get("PAS_SCREENSHOT_DIR", ROOT / ".data/inspector-screenshots"))
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: CI must run the browser tests (make system-deps)")
        pytest.skip(reason)
    driver = chrome(authorization=f"Bearer {TOKEN}")
    try:
        yield driver
    finally:
        driver.quit()


def visit(driver: Any, url: str, name: str) -> Path:
    driver.get(url)
    path = full_page_screenshot(driver, screenshot_dir() / f"{name}.png")
    print(f"screenshot: {path}")  # noqa: T201 (the artifact's location, for whoever reads the log)
    return path


def check_views(driver: Any, inspected: Inspected) -> None:
    from selenium.webdriver.common.by import By

    base = inspected.base_url
    visit(driver, base + "/", "sessions")
    rows = driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")
    listed = [row.find_element(By.TAG_NAME, "a").text for row in rows]
    assert inspected.session_id in listed and inspected.other_session_id not in listed

    session = f"{base}/sessions/{inspected.session_id}"
    visit(driver, session + "/chat", "chat")
    assert driver.title.endswith("Prompt Admission inspector")  # no injected script ran
    assert driver.find_elements(By.TAG_NAME, "script") == []
    updates = driver.find_elements(By.CSS_SELECTOR, "[data-kind='system-prompt-update']")
    assert len(updates) == 3  # B, C and D, each at its own surface position
    for card in updates:
        assert card.get_attribute("open") is None  # collapsed
        assert card.find_element(By.TAG_NAME, "summary").text.startswith("System prompt update")
        assert not card.find_element(By.TAG_NAME, "pre").is_displayed()
    # The escaped <script> of B's prompt is text: it shows once the card is opened.
    updates[0].find_element(By.TAG_NAME, "summary").click()
    assert updates[0].find_element(By.TAG_NAME, "pre").text == f"You are B. {SCRIPT}"
    user = driver.find_elements(By.CSS_SELECTOR, "[data-role='user'] pre")[1]
    assert user.text == f"user says {SCRIPT}"
    # A header in the same turn and step as a prompt card does not repeat the prompt.
    headers = driver.find_elements(By.CSS_SELECTOR, "[data-kind='request-header']")
    assert len(headers) == 2  # the initial header and D's config change
    for header in headers:
        assert header.find_elements(By.CSS_SELECTOR, "[data-kind='header-prompt']") == []
    assert "config: t=0.3" in headers[1].text
    assert "system change" not in headers[1].text  # it follows an update: none of its own
    visit(driver, session + "/chat", "chat-reloaded")  # a reload shows every card collapsed

    visit(driver, session + "/trajectory", "trajectory")
    rows = driver.find_elements(By.CSS_SELECTOR, "#trajectory tbody tr")
    assert len(rows) == 4
    c = rows[2]
    prompt = c.find_element(By.CSS_SELECTOR, "td.prompt details")
    assert prompt.get_attribute("open") is None  # collapsed: the row stays one line tall
    assert not prompt.find_element(By.TAG_NAME, "pre").is_displayed()
    prompt.find_element(By.TAG_NAME, "summary").click()
    assert prompt.find_element(By.TAG_NAME, "pre").text == "You are C."
    assert c.find_element(By.CSS_SELECTOR, "td.change").text == "system"
    diff = c.find_element(By.CSS_SELECTOR, "td.previous [data-kind='prompt-diff']")
    assert diff.find_element(By.CSS_SELECTOR, ".removed").text == f"- You are B. {SCRIPT}"
    assert diff.find_element(By.CSS_SELECTOR, ".added").text == "+ You are C."
    assert "synthetic" in c.text
    assert rows[0].find_element(By.CSS_SELECTOR, "td.change").text == "initial"

    visit(driver, session + "/tokens", "tokens")
    breakdown = driver.find_element(By.ID, "breakdown").text
    assert "system" in breakdown and "total" in breakdown
    chart = driver.find_element(By.ID, "ledger-chart")
    forecast = chart.find_elements(By.CSS_SELECTOR, "rect.forecast")
    observed = chart.find_elements(By.CSS_SELECTOR, "rect.observed")
    assert len(forecast) == 4 and len(observed) == 3  # the last request has no usage yet
    assert chart.size["height"] > 100


async def test_an_operator_sees_each_view_in_a_real_browser(
    inspected: Inspected, browser: Any
) -> None:
    await asyncio.to_thread(check_views, browser, inspected)
