"""Fixtures for the use cases on PostgreSQL (``test_app.py``, ``test_delta.py``)."""

from __future__ import annotations

import pytest
from admission_service.api import convert
from admission_service.app.deps import Deps
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.app_support import CATALOG


@pytest.fixture(scope="module")
def deps(engine: AsyncEngine) -> Deps:
    """The application on the run's database, with the API's response encoders."""
    return Deps.compose(engine, CATALOG, encoders=convert.ENCODERS)
