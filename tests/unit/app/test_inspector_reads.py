"""The reads the inspector pages with, on the in-memory storage: the ledger newest first and
the chat's window of events from the newest backwards."""

from __future__ import annotations

import pytest
from admission_service.app.service import AdmissionApp
from admission_service.domain.errors import InvalidArgument

from tests.app_support import user
from tests.fakes.storage import FakeStorage
from tests.unit.app.test_use_cases import admit, create, make_app


@pytest.fixture
def app() -> AdmissionApp:
    return make_app(FakeStorage())


async def test_the_ledger_window_starts_at_the_latest_request_and_pages_backwards(
    app: AdmissionApp,
) -> None:
    sid = await create(app)
    for step in range(7):
        await admit(app, sid, f"P{step % 2}", users=(user(f"u{step}"),))
    windows, token = [], ""
    while True:
        page = await app.ledger_window("t", sid, 3, token)
        windows.append([entry.request_index for entry in page.items])
        if not (token := page.next_page_token):
            break
    assert windows == [[4, 5, 6], [1, 2, 3], [0]]
    with pytest.raises(InvalidArgument, match="page_token"):
        await app.ledger_window("t", sid, 3, "forged")
    empty = await create(app, "empty")
    assert (await app.ledger_window("t", empty, 3, "")).items == ()
