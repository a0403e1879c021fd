"""The operator inspector over a real server: HTTP behaviour (authentication, tenancy, read
only, escaping) and, in a real browser (Debian's headless Chromium through chromedriver), what
an operator checks on each page. Screenshots of every view are kept as test artifacts in
``PAS_SCREENSHOT_DIR`` (default ``.data/inspector-screenshots``).

Without chromium the browser tests skip, unless CI is set: then they must run.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from admission_service.api.tenancy import hash_token
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import StartApi, admit_request, async_stub, channel_with_metadata
from tests.browser import chrome, full_page_screenshot, missing

RUN = uuid.uuid4().hex[:8]
TOKEN = f"inspector-token-{RUN}-0123456789abcdef"
OTHER_TOKEN = f"inspector-other-{RUN}-0123456789abcdef"
TOKENS = {hash_token(TOKEN): f"ops-{RUN}", hash_token(OTHER_TOKEN): f"other-{RUN}"}
SCRIPT = "<script>document.title='pwned'</script>"
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Inspected:
    base_url: str
    session_id: str
    other_session_id: str


async def drive_session(target: str, token: str) -> str:
    channel = channel_with_metadata(target, ("authorization", f"Bearer {token}"))
    stub = async_stub(channel)
    session_id = f"inspect-{uuid.uuid4().hex[:12]}"
    await stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
    tools = [pb.Tool(name="read", parameters_json='{"type":"object"}')]
    prompts = ["You are A.", f"You are B. {SCRIPT}", "You are C."]
    for step, prompt in enumerate(prompts, start=1):
        users = [f"question {step}"] if step != 2 else [f"user says {SCRIPT}"]
        admitted = await stub.Admit(
            admit_request(session_id, prompt, *users, turn=1, step=step, tools=tools)
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
            )
        )
    # A config change in the same step as a prompt update: the header must not repeat it.
    await stub.Admit(
        admit_request(
            session_id, "You are D.", "last", turn=2, step=1, tools=tools, config={"t": "0.3"}
        )
    )
    await channel.close(None)
    return session_id


@pytest.fixture
async def inspected(start_api: StartApi) -> Inspected:
    client = await start_api(token_tenants=TOKENS, inspector_listen="127.0.0.1:0")
    assert client.server.inspector is not None
    target = client.server.target
    return Inspected(
        f"http://127.0.0.1:{client.server.inspector.port}",
        await drive_session(target, TOKEN),
        await drive_session(target, OTHER_TOKEN),
    )


def fetch(
    url: str, *, method: str = "GET", authorization: str | None = None
) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, method=method)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
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


@pytest.mark.parametrize("view", ["trajectory", "tokens"])
async def test_a_forged_page_token_is_a_bad_request(inspected: Inspected, view: str) -> None:
    url = f"{inspected.base_url}/sessions/{inspected.session_id}/{view}?page=AAAAforged"
    status, _, page = await asyncio.to_thread(fetch, url, authorization=f"Bearer {TOKEN}")
    assert status == 400 and "page_token" in page


async def test_times_are_shown_in_utc_with_the_zone(inspected: Inspected) -> None:
    status, _, page = await asyncio.to_thread(
        fetch, inspected.base_url + "/", authorization=f"Bearer {TOKEN}"
    )
    assert status == 200
    assert re.search(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td>", page)


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
