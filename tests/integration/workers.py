"""What the tests of a worker's caches share (``test_session_cache``, ``test_held_frames``):
workers on one engine, each its own storage and so its own caches, and new sessions."""

from __future__ import annotations

import uuid
from typing import Any

from admission_service.api import convert
from admission_service.app import handlers
from admission_service.app.deps import Deps
from admission_service.storage.held_frames import HeldFrames
from admission_service.storage.session_cache import SessionCache
from admission_service.storage.transactions import PostgresStorage
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.app_support import CATALOG

TENANT = "t"


def worker(engine: AsyncEngine, **kwargs: Any) -> Deps:
    """One worker's application: its own storage, so its own session cache and held frames."""
    return Deps.compose(engine, CATALOG, encoders=convert.ENCODERS, **kwargs)


def _storage(deps: Deps) -> PostgresStorage:
    assert isinstance(deps.storage, PostgresStorage)
    return deps.storage


def cache_of(deps: Deps) -> SessionCache:
    cache = _storage(deps).cache
    assert cache is not None
    return cache


def held_of(deps: Deps) -> HeldFrames:
    held = _storage(deps).held
    assert held is not None
    return held


async def new_session(deps: Deps) -> str:
    session_id = f"w-{uuid.uuid4().hex}"
    await handlers.create_session(deps, TENANT, session_id, None)
    return session_id
