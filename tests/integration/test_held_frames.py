"""Large node frames a worker holds (storage/held_frames.py), on real PostgreSQL: a FULL read
leaves out the frames a worker holds only while the session row is at the version they were
left at, so the request a worker builds from them is, byte for byte, what reading every node
gives — after replacements (positions reused), compactions, another worker's writes, a
session deleted and created again under its id (seqs reused), and rolled-back reads (seqs
reused by the next commit)."""

from __future__ import annotations

import random
from typing import Any

from admission_service.app import handlers
from admission_service.app.commands import (
    AdmitCommand,
    AttemptResult,
    CompactCommand,
    EncodedMessages,
    PlanCompactionCommand,
    RecordCommand,
    RouteRequest,
)
from admission_service.app.deps import Deps
from admission_service.domain.catalog import Capability
from admission_service.domain.errors import NothingToCompact, SummaryNotSmaller
from admission_service.domain.messages import Message, Role, Text
from admission_service.domain.session import Frames
from admission_service.storage.frame_chunks import FULL_FRAMES
from admission_service.storage.held_frames import HELD_FRAME_MIN
from admission_service.storage.log_and_surface import _FRAMES, _frames
from admission_service.storage.raw import RawStatement
from admission_service.storage.repository import SessionStore
from admission_service.storage.transactions import PostgresStorage
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.app_support import ROUTE, user
from tests.integration.workers import TENANT, held_of, new_session, worker

# The head is rewritten on a changed prompt (a replacement at position 0).
REPLACING = RouteRequest("deepseek", "deepseek-flash", 128_000, Capability.REPLACE)


def large(tag: str) -> str:
    """A text whose node's frame is held (a tool output's size, scaled down)."""
    text = f"{tag}: " + " ".join(f"{tag}-{n}" for n in range(HELD_FRAME_MIN // 6))
    assert len(text) > HELD_FRAME_MIN
    return text


async def admit(
    deps: Deps,
    sid: str,
    *texts: str,
    prompt: str = "be brief",
    route: RouteRequest = ROUTE,
    **kwargs: Any,
) -> AttemptResult:
    """A FULL Admit of ``texts`` as user messages."""
    command = AdmitCommand(sid, 1, 1, prompt, (), route, users=tuple(map(user, texts)), **kwargs)
    reply = await handlers.admit(deps, TENANT, command, None)
    assert reply.result is not None
    return reply.result


async def read_both_ways(deps: Deps, sid: str) -> tuple[Frames, Frames]:
    """A FULL read through the worker (its held frames where it may) and every node's frame
    read one by one (nothing held)."""
    async with deps.storage.unit(TENANT, sid, snapshot=True) as unit:
        store = unit.store
        assert isinstance(store, SessionStore)
        through_worker = await store.frames(0, None)
        params = {"t": TENANT, "s": sid, "from_position": 0, "split": -1}
        one_by_one = _frames(await store._execute_raw(_FRAMES, params, binary=True))
    return through_worker, one_by_one


async def assert_exact(deps: Deps, sid: str, *, held_used: bool) -> None:
    """The worker's FULL read is the nodes' frames, and it did (or did not) use held ones."""
    before = held_of(deps).used
    through_worker, one_by_one = await read_both_ways(deps, sid)
    assert b"".join(through_worker.parts) == b"".join(one_by_one.parts)
    assert through_worker.messages == one_by_one.messages
    assert through_worker.tokens == one_by_one.tokens
    assert (held_of(deps).used > before) is held_used


def texts_of(result: AttemptResult) -> bytes:
    """The derived request's messages as their stored frames (their texts are in them)."""
    messages = result.request.messages
    assert isinstance(messages, EncodedMessages)
    return messages.frames


def held_texts(deps: Deps, sid: str) -> bytes:
    return b"".join(held_of(deps).get((TENANT, sid)).parts.values())


async def test_a_full_read_leaves_out_only_held_frames_and_only_at_their_version(
    engine: AsyncEngine,
) -> None:
    a = worker(engine)
    sid = await new_session(a)
    await admit(a, sid, large("one"), "small")
    await admit(a, sid, large("two"))
    await admit(a, sid, "small")  # its FULL read found both and the commit held them
    held = held_of(a).get((TENANT, sid))
    assert held.row_version >= 0 and len(held.parts) >= 1
    async with a.storage.unit(TENANT, sid, snapshot=True) as unit:
        store = unit.store
        assert isinstance(store, SessionStore)

        async def null_frames(seqs: list[int], version: int) -> set[int]:
            params = {
                "t": TENANT,
                "s": sid,
                "split": -1,
                "held": seqs,
                "held_version": version,
            }
            statement = RawStatement(FULL_FRAMES, params, binary=True, all_rows=True)
            rows = (await store._flight(statement))[0]
            return {row[6] for row in rows if row[1] is None}

        seqs = list(held.parts)
        assert await null_frames(seqs, held.row_version) == set(seqs)
        assert await null_frames(seqs, held.row_version + 1) == set()  # another version
        assert await null_frames(seqs, held.row_version - 1) == set()
        assert await null_frames([], held.row_version) == set()


async def test_held_frames_serve_full_admits_and_follow_replacements_and_compactions(
    engine: AsyncEngine,
) -> None:
    a = worker(engine)
    sid = await new_session(a)
    await admit(a, sid, large("one"), large("two"))  # its commit holds what it wrote
    await admit(a, sid, "small")
    await admit(a, sid, large("three"))
    used = held_of(a).used
    result = await admit(a, sid, "small")
    assert held_of(a).used == used + 3  # "one", "two" and "three" came from the worker
    assert texts_of(result).count(b"three-1 ") == 1
    await assert_exact(a, sid, held_used=True)
    # A changed prompt on a replacing route rewrites the head: every node after it moves to
    # a position another node had (positions are reused, seqs never).
    await admit(a, sid, large("four"), prompt="be thorough", route=REPLACING)
    await assert_exact(a, sid, held_used=True)
    await admit(a, sid, "small", prompt="be brief again", route=REPLACING)
    await assert_exact(a, sid, held_used=True)
    # A compaction shadows the large nodes behind a summary.
    planned = await handlers.plan_compaction(a, TENANT, PlanCompactionCommand(sid, retain_tokens=0))
    await handlers.compact(a, TENANT, CompactCommand(sid, planned.plan_token, "summary"), None)
    await assert_exact(a, sid, held_used=False)  # nothing it held is on the surface
    await admit(a, sid, large("five"))
    assert b"five" in held_texts(a, sid) and b"one" not in held_texts(a, sid)
    await assert_exact(a, sid, held_used=True)


async def test_another_workers_write_makes_the_read_fetch_every_frame(
    engine: AsyncEngine,
) -> None:
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    await admit(a, sid, large("one"))
    await admit(a, sid, large("two"))
    await admit(a, sid, "small")
    await assert_exact(a, sid, held_used=True)
    await admit(b, sid, large("three"))  # the row moves on past a's held version
    await assert_exact(a, sid, held_used=False)
    await admit(a, sid, "small")  # a's FULL read fetched every frame; its commit holds them
    await assert_exact(a, sid, held_used=True)


async def test_a_session_created_again_under_its_id_is_not_read_with_the_old_frames(
    engine: AsyncEngine,
) -> None:
    """The new lifetime's nodes take the old one's seqs, with other content: what a worker
    held of the old lifetime must not stand for them."""
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    await admit(a, sid, large("old"))
    await admit(a, sid, "small")
    await admit(a, sid, "small")
    old_seqs = set(held_of(a).get((TENANT, sid)).parts)
    await handlers.delete_session(b, TENANT, sid, None, None)
    await handlers.create_session(b, TENANT, sid, None)
    await admit(b, sid, large("new"))
    await admit(b, sid, "small")
    await admit(b, sid, "small")
    assert set(held_of(b).get((TENANT, sid)).parts) == old_seqs  # the same seqs
    await assert_exact(a, sid, held_used=False)
    result = await admit(a, sid, "next")
    assert b"new-1 " in texts_of(result) and b"old-1 " not in texts_of(result)


async def test_a_rolled_back_read_leaves_nothing_held(engine: AsyncEngine) -> None:
    """A validate_only Admit records its previous output (a large reply) and reads it back
    in its FULL read, uncommitted, then rolls back; the next commit gives the reply's seq to
    another node."""
    a = worker(engine)
    sid = await new_session(a)
    await admit(a, sid, "small")
    await admit(a, sid, "small")
    last = await admit(a, sid, "small")

    def reply(tag: str) -> RecordCommand:
        message = Message(Role.ASSISTANT, (Text(large(tag)),))
        return RecordCommand(sid, last.admission_id, message)

    await admit(a, sid, "next", previous_output=reply("draft"), validate_only=True)
    final = await admit(a, sid, "next", previous_output=reply("final"))
    assert b"final-1 " in texts_of(final) and b"draft-1 " not in texts_of(final)
    await admit(a, sid, "small")
    assert b"final" in held_texts(a, sid) and b"draft" not in held_texts(a, sid)
    await assert_exact(a, sid, held_used=True)


async def test_without_held_frames_every_read_fetches_them(engine: AsyncEngine) -> None:
    a = worker(engine, held_frame_bytes=0)
    sid = await new_session(a)
    await admit(a, sid, large("one"))
    result = await admit(a, sid, large("two"))
    assert isinstance(a.storage, PostgresStorage) and a.storage.held is None
    assert b"one-1 " in texts_of(result)


async def test_a_seeded_mix_of_two_workers_never_reads_a_stale_frame(engine: AsyncEngine) -> None:
    """Two workers take turns on one session at random — large and small steps, replies
    recorded with the next step, prompt changes on a replacing route, compactions,
    validate_only steps, the session deleted and created again — and after each, both
    workers' FULL reads are every node's frame as stored."""
    rng = random.Random(20261207)
    workers = worker(engine), worker(engine)
    sid = await new_session(workers[0])
    last: AttemptResult | None = None
    used = 0
    for number in range(60):
        deps = rng.choice(workers)
        roll = rng.random()
        text = large(f"t{number}") if rng.random() < 0.5 else f"small {number}"
        if roll < 0.08:
            await handlers.delete_session(deps, TENANT, sid, None, None)
            await handlers.create_session(deps, TENANT, sid, None)
            last = None
        elif roll < 0.18:
            retain = rng.choice([0, 2000])
            try:
                planned = await handlers.plan_compaction(
                    deps, TENANT, PlanCompactionCommand(sid, retain_tokens=retain)
                )
                await handlers.compact(
                    deps, TENANT, CompactCommand(sid, planned.plan_token, "summary"), None
                )
            except (NothingToCompact, SummaryNotSmaller):
                pass  # too little to summarise: nothing committed
        else:
            previous = None
            if last is not None and rng.random() < 0.5:
                reply = large(f"r{number}") if rng.random() < 0.5 else f"reply {number}"
                message = Message(Role.ASSISTANT, (Text(reply),))
                previous = RecordCommand(sid, last.admission_id, message)
            result = await admit(
                deps,
                sid,
                text,
                prompt=rng.choice(["be brief", "be thorough"]),
                route=rng.choice([ROUTE, REPLACING]),
                previous_output=previous,
                validate_only=roll < 0.3,
            )
            if roll >= 0.3:
                last = result
        for reader in workers:
            before = held_of(reader).used
            through_worker, one_by_one = await read_both_ways(reader, sid)
            assert through_worker == one_by_one, number
            used += held_of(reader).used - before
    assert used > 20  # the mix went through the held path, not around it


async def test_a_chunk_sealed_again_elsewhere_is_not_read_from_the_old_copy(
    engine: AsyncEngine,
) -> None:
    """Chunks are held by first position: another worker's replacement drops the first chunk
    and its next FULL Admit seals it again with the new head. The old copy must not stand for
    the new chunk."""
    a, b = worker(engine), worker(engine)
    sid = await new_session(a)
    for first in range(0, 300, 50):
        texts = [f"message {n} " + "x" * 100 for n in range(first, first + 50)]
        await admit(a, sid, *texts, route=REPLACING)
    await admit(a, sid, "small", route=REPLACING)  # its commit seals the first chunk
    await admit(a, sid, "small", route=REPLACING)  # its read found the chunk; its commit holds it
    first_chunk = -1 - 0
    assert first_chunk in held_of(a).get((TENANT, sid)).parts
    await assert_exact(a, sid, held_used=True)
    await admit(b, sid, "new head", prompt="be thorough", route=REPLACING)  # drops the chunk
    await admit(b, sid, "small", prompt="be thorough", route=REPLACING)  # seals it again
    await assert_exact(a, sid, held_used=False)
    await assert_exact(b, sid, held_used=True)
