"""The repository contract runs against the in-memory fake and PostgreSQL (through the real
migrations, ``tests/conftest.py``): one suite, two adapters of the app's storage port."""

from __future__ import annotations

import pytest
from admission_service.app.limits import SESSION_CACHE_BYTES
from admission_service.app.ports import Storage
from admission_service.storage.transactions import PostgresStorage

from tests.fakes.storage import FakeStorage


@pytest.fixture(params=["fake", pytest.param("postgres", marks=pytest.mark.database)])
def storage(request: pytest.FixtureRequest) -> Storage:
    if request.param == "fake":
        return FakeStorage()
    return PostgresStorage(request.getfixturevalue("engine"), SESSION_CACHE_BYTES)
