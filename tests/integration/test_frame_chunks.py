"""Chunked frames (storage/frame_chunks.py) against the nodes they stand for, on real PostgreSQL:
after appends that seal chunks, a replacement that drops them, a change of tokenizer that
reprices every node and splits inside and between chunks, a FULL read through the chunks is
byte for byte, count for count, what reading every node one by one gives."""

from __future__ import annotations

import uuid

import pytest
from admission_service.api import convert
from admission_service.app import handlers
from admission_service.app.commands import AdmitCommand, AttemptResult, RouteRequest
from admission_service.app.deps import Deps
from admission_service.domain.catalog import Capability
from admission_service.domain.session import Frames
from admission_service.storage.frame_chunks import FRAME_CHUNK
from admission_service.storage.log_and_surface import _FRAMES, _frames
from admission_service.storage.repository import SessionStore
from admission_service.storage.transactions import PostgresStorage
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.app_support import CATALOG, ROUTE, user

TENANT = "t"
# The head is rewritten on a changed prompt (a replacement at position 0: every chunk goes).
REPLACING = RouteRequest("deepseek", "deepseek-flash", 128_000, Capability.REPLACE)
# Another tokenizer family: every surviving node is priced again.
OTHER_FAMILY = RouteRequest("openai", "gpt-x", 128_000, Capability.IN_HISTORY)


@pytest.fixture(scope="module")
def deps(engine: AsyncEngine) -> Deps:
    return Deps.compose(engine, CATALOG, encoders=convert.ENCODERS)


async def admit(
    deps: Deps, sid: str, prompt: str, users: int, route: RouteRequest = ROUTE
) -> AttemptResult:
    """``users`` user messages (in Admits of at most 50), the last Admit's result."""
    result = None
    for first in range(0, max(users, 1), 50):
        # ~85 bytes a frame: a chunk of 256 is past HELD_FRAME_MIN, so the worker holds it.
        texts = [
            f"message {n} " + "x" * (40 + n % 50) for n in range(first, min(first + 50, users))
        ]
        command = AdmitCommand(sid, 1, 1, prompt, (), route, users=tuple(map(user, texts)))
        reply = await handlers.admit(deps, TENANT, command, None)
        result = reply.result
    assert result is not None
    return result


async def both_ways(deps: Deps, sid: str, split: int | None) -> tuple[Frames, Frames, int]:
    """A FULL read through the chunks, the same read node by node, and how many chunks."""
    async with deps.storage.unit(TENANT, sid, snapshot=True) as unit:
        store = unit.store
        assert isinstance(store, SessionStore)
        chunked = await store.frames(0, split)
        params = {
            "t": TENANT,
            "s": sid,
            "from_position": 0,
            "split": -1 if split is None else split,
        }
        one_by_one = _frames(await store._execute_raw(_FRAMES, params, binary=True))
        chunks = await store._execute_raw(
            "SELECT count(*) FROM frame_chunks WHERE tenant_id = %(t)s AND session_id = %(s)s",
            {"t": TENANT, "s": sid},
        )
    assert chunks is not None
    return chunked, one_by_one, chunks[0]


async def check(deps: Deps, sid: str, end: int) -> int:
    """Every split (none, at 0, inside a chunk, on a boundary, past the end) reads the same
    both ways; the number of chunks."""
    chunks = 0
    for split in (
        None,
        0,
        1,
        FRAME_CHUNK - 1,
        FRAME_CHUNK,
        FRAME_CHUNK + 7,
        end // 2,
        end,
        end + 5,
    ):
        chunked, one_by_one, chunks = await both_ways(deps, sid, split)
        assert chunked == one_by_one, split
    return chunks


async def test_chunked_full_reads_are_the_nodes_through_appends_replacements_and_repricing(
    deps: Deps,
) -> None:
    sid = f"chunks-{uuid.uuid4().hex}"
    await handlers.create_session(deps, TENANT, sid, None)
    for _ in range(4):
        await admit(deps, sid, "be brief", 200)  # FULL admits: each commit seals what it read
    assert await check(deps, sid, 800) >= 2
    # A changed prompt on a replacing route rewrites the head: every chunk reaching it goes
    # (and the derived request read after the replacement seals them again, from the nodes).
    await admit(deps, sid, "be briefer", 10, REPLACING)
    await check(deps, sid, 820)
    await admit(deps, sid, "be briefer", 300, REPLACING)
    await admit(deps, sid, "be briefer", 10, REPLACING)  # seals again
    assert await check(deps, sid, 1200) >= 3
    # Another tokenizer: every node is priced again, and with it every chunk.
    await admit(deps, sid, "be briefer", 1, OTHER_FAMILY)
    await check(deps, sid, 1200)
    await admit(deps, sid, "be briefer", 1, OTHER_FAMILY)
    chunked, one_by_one, chunks = await both_ways(deps, sid, None)
    assert chunked == one_by_one and chunks >= 3 and chunked.messages > 1000
    # The worker's reads went through chunks it held (held_frames.py) at every step above.
    storage = deps.storage
    assert isinstance(storage, PostgresStorage) and storage.held is not None
    assert storage.held.used > 10
