"""The inspector on long sessions, as an operator opens them: ``serve`` with the default worker
count and the inspector on, through gRPC one session of 2 600 steps whose prompt changes every
43 steps, and one whose 32 KB prompt changes at each of 61 requests (60 in-history updates).
Every page stays bounded in bytes, the newest events are the first thing Chat shows and the
oldest are reachable by its links, the Trajectory shows each change as a diff and reaches
every request, and the ledger chart keeps its width; checked over HTTP and in Debian's headless
Chromium.

Before issue 21 Chat folded the first 5 000 events with no way to the newest, the Trajectory
held every request with its whole prompt, and the chart grew 34 px per request.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from html import unescape
from typing import Any

import pytest
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import admit_request, async_stub, channel_with_metadata
from tests.api.test_inspector import (
    TOKEN,
    browser,
    fetch,
    inspector_started,
    serving_with_inspector,
)
from tests.api.test_inspector import visit as visit_and_capture

__all__ = ["browser"]  # the module's Chromium fixture, shared

STEPS = 2600
CHANGES = 60
LINES = 820  # 40-byte lines: a 32 KB prompt
# A Chat page holds at most 512 KiB of events (pages.CHAT_PAGE_BYTES); with the markup and a
# header card's prompt an operator's page stays under this.
PAGE_BOUND = 1024 * 1024


def prompt(version: int) -> str:
    """The prompt's ``version``: each version rewrites one line of the previous one."""
    lines = [
        f"rule {line:03d}: keep the build green and the diff small."[:39] for line in range(LINES)
    ]
    for change in range(1, version + 1):
        lines[change * 13 % LINES] = f"rule {change * 13 % LINES:03d} v{change}: changed."
    return "\n".join(lines)


@dataclass
class Long:
    base_url: str
    session_id: str  # 2 600 steps
    wide_session_id: str  # a 32 KB prompt, changed at each of its 61 requests


async def drive(stub: Any, prompts: list[str], steps: int) -> str:
    """A session of ``steps`` Admits, step ``n`` under ``prompts[n * len(prompts) // steps]``."""
    session_id = f"long-{uuid.uuid4().hex[:12]}"
    await stub.CreateSession(api.CreateSessionRequest(session_id=session_id), timeout=10)
    held = pb.HeldPrefix()
    for step in range(steps):
        text = f"question {step} " + "context " * 60
        # DELTA, as a harness holding the request does: FULL responses would grow to MBs.
        admitted = await stub.Admit(
            admit_request(
                session_id,
                prompts[step * len(prompts) // steps],
                text,
                turn=1,
                step=step,
                view=pb.REQUEST_VIEW_DELTA,
                held_prefix=held,
            ),
            timeout=30,
        )
        held = pb.HeldPrefix(
            message_count=admitted.request.total_messages, digest=admitted.request.digest
        )
    return session_id


@pytest.fixture(scope="module")
async def long_session(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Long]:
    with serving_with_inspector(database_url, tmp_path_factory.mktemp("inspector-long")) as served:
        _, port = await asyncio.to_thread(inspector_started, served.log)
        channel = channel_with_metadata(served.target, ("authorization", f"Bearer {TOKEN}"))
        stub = async_stub(channel)
        short = [f"You are agent version {version}.\nBe brief." for version in range(CHANGES + 1)]
        wide = [prompt(version) for version in range(CHANGES + 1)]
        assert len(wide[0].encode()) >= 32_000
        long_id = await drive(stub, short, STEPS)
        wide_id = await drive(stub, wide, CHANGES + 1)
        await channel.close(None)
        yield Long(f"http://127.0.0.1:{port}", long_id, wide_id)


async def page(url: str) -> str:
    status, _, body = await asyncio.to_thread(fetch, url, authorization=f"Bearer {TOKEN}")
    assert status == 200, body[:2000]
    assert len(body.encode()) < PAGE_BOUND, f"{url}: {len(body.encode())} bytes"
    return body


def link(body: str, kind: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)" data-kind="{kind}">', body)
    return unescape(found.group(1)) if found else None


async def test_chat_opens_at_the_newest_events_and_reaches_the_oldest(long_session: Long) -> None:
    base = long_session.base_url
    chat = f"{base}/sessions/{long_session.session_id}/chat"
    body = await page(chat)
    assert f"question {STEPS - 1} " in body and "question 0 " not in body
    pages, href = 1, link(body, "older")
    while href is not None:
        body = await page(base + href)
        pages, href = pages + 1, link(body, "older")
        assert pages < 200
    assert "question 0 " in body and f"question {STEPS - 1} " not in body
    assert pages > 1


async def test_the_trajectory_pages_are_bounded_and_reach_every_request(long_session: Long) -> None:
    base = long_session.base_url
    seen: list[int] = []
    href: str | None = f"/sessions/{long_session.wide_session_id}/trajectory"
    while href is not None:
        body = await page(base + href)  # 61 changes of 32 KB: pages under PAGE_BOUND
        seen += [int(index) for index in re.findall(r'<tr data-request="(\d+)">', body)]
        assert body.count('data-kind="prompt-diff"') >= 1
        href = link(body, "newer")
    assert seen == list(range(CHANGES + 1))  # every request once, in order
    assert len({*seen}) == len(seen)


async def test_the_ledger_shows_the_latest_requests_in_a_chart_of_bounded_width(
    long_session: Long,
) -> None:
    tokens = await page(f"{long_session.base_url}/sessions/{long_session.session_id}/tokens")
    width = re.search(r'<svg id="ledger-chart"[^>]* width="(\d+)"', tokens)
    assert width is not None and int(width.group(1)) <= 1100
    assert f"<td>{STEPS - 1}</td>" in tokens  # the latest request first
    assert link(tokens, "older") is not None


async def test_the_wide_sessions_chat_pages_stay_bounded(long_session: Long) -> None:
    base = long_session.base_url
    href: str | None = f"/sessions/{long_session.wide_session_id}/chat"
    updates = 0
    while href is not None:
        body = await page(base + href)
        updates += body.count('data-kind="system-prompt-update"')
        href = link(body, "older")
    assert updates == CHANGES


def check_long_session(driver: Any, long: Long) -> None:
    from selenium.webdriver.common.by import By

    session = f"{long.base_url}/sessions/{long.session_id}"
    visit_and_capture(driver, session + "/chat", "long-chat")
    users = driver.find_elements(By.CSS_SELECTOR, "[data-role='user'] pre")
    assert users[-1].text.startswith(f"question {STEPS - 1} ")
    driver.find_element(By.CSS_SELECTOR, "[data-kind='older']").click()
    users = driver.find_elements(By.CSS_SELECTOR, "[data-role='user'] pre")
    newest_here = int(users[-1].text.split()[1])
    assert newest_here < STEPS - 1

    # The wide session's first change is request 1, on its first Trajectory page.
    wide = f"{long.base_url}/sessions/{long.wide_session_id}"
    visit_and_capture(driver, wide + "/trajectory", "long-trajectory")
    row = driver.find_element(By.CSS_SELECTOR, "tr[data-request='1']")
    assert row.find_element(By.CSS_SELECTOR, "td.change").text == "system"
    diff = row.find_element(By.CSS_SELECTOR, "[data-kind='prompt-diff']")
    removed = [line.text for line in diff.find_elements(By.CSS_SELECTOR, ".removed")]
    added = [line.text for line in diff.find_elements(By.CSS_SELECTOR, ".added")]
    assert removed == [f"- {prompt(0).splitlines()[13]}"] and added == ["+ rule 013 v1: changed."]
    details = row.find_element(By.CSS_SELECTOR, "td.prompt details")
    assert details.get_attribute("open") is None
    height = driver.execute_script("return document.documentElement.scrollHeight")
    assert height < 20_000  # collapsed prompts: one page of rows, not 1.38 M px


async def test_an_operator_reads_a_long_session_in_a_real_browser(
    long_session: Long, browser: Any
) -> None:
    await asyncio.to_thread(check_long_session, browser, long_session)
