"""What the use cases rely on from ``SessionRepository`` (``app/ports.py``), for every adapter."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from admission_service.app.ports import Storage
from admission_service.domain.accounting import PreviousRequest, RequestKey, node_prices
from admission_service.domain.events import (
    Append,
    Event,
    EventKind,
    Replace,
    system_event,
)
from admission_service.domain.messages import Message, Role, Text, ToolCall, ToolResult
from admission_service.domain.session import RequestPrefix, Shadowed, Written
from admission_service.domain.stored import AdmissionRecord
from admission_service.domain.wire import MessagesEnd
from admission_service.storage import codec

TENANT = "contract"


def _sid() -> str:
    return f"c-{uuid.uuid4().hex}"


def user(seq: int, text: str, op: Append | Replace | None = None) -> Event:
    message = Message(Role.USER, (Text(text),))
    sources = (op.start_seq, op.end_seq) if isinstance(op, Replace) else ()
    return Event(seq, EventKind.USER_MESSAGE, 1, 1, op or Append(), sources, message)


def calling(seq: int, *call_ids: str) -> Event:
    calls = tuple(ToolCall(call_id, "f", "{}") for call_id in call_ids)
    message = Message(Role.ASSISTANT, calls)
    return Event(seq, EventKind.ASSISTANT_MESSAGE, 1, 1, Append(), (), message)


def answer(seq: int, call_id: str) -> Event:
    message = Message(Role.TOOL, (ToolResult(call_id, (Text("ok"),)),))
    return Event(seq, EventKind.TOOL_RESULT, 1, 1, Append(), (), message)


def at(position: int, events: list[Event]) -> tuple[list[Event], int, dict[int, int]]:
    """``write_events``'s arguments: ``events`` from ``position``, priced by the domain."""
    return events, position, node_prices(events)


async def new_session(storage: Storage, *events: Event) -> str:
    """A committed session holding ``events`` (their seqs from 0)."""
    session_id = _sid()
    async with storage.unit(TENANT, session_id) as unit:
        created = await unit.store.create()
        assert created is not None
        record = created.session
        written = await unit.store.write_events(events, 0, node_prices(events))
        followed = created.wrote(events, written)  # what save keeps is the aggregate they left
        assert followed is not None
        await unit.store.save(followed.saved(record.compacted(len(events), written, record.series)))
        await unit.commit()
    return session_id


async def test_a_created_session_reads_back_and_is_created_once(storage: Storage) -> None:
    session_id = _sid()
    async with storage.unit(TENANT, session_id) as unit:
        created = await unit.store.create()
        assert created is not None
        record = created.session
        assert (record.session_id, record.revision, record.next_seq) == (session_id, 0, 0)
        assert (created.system_nodes, created.open_calls, created.admission) == ((), (), None)
        assert await unit.store.create() is None
        await unit.commit()
    async with storage.unit(TENANT, session_id, snapshot=True) as unit:
        read = await unit.store.read()
        assert read is not None and read.revision == 0
    async with storage.unit("another tenant", session_id, snapshot=True) as unit:
        assert await unit.store.read() is None


async def test_leaving_a_unit_without_commit_writes_nothing(storage: Storage) -> None:
    session_id = _sid()
    async with storage.unit(TENANT, session_id) as unit:
        assert await unit.store.create() is not None
    with pytest.raises(RuntimeError):  # noqa: PT012 (the raise leaves the unit)
        async with storage.unit(TENANT, session_id) as unit:
            assert await unit.store.create() is not None
            raise RuntimeError("rolled back")
    async with storage.unit(TENANT, session_id, snapshot=True) as unit:
        assert await unit.store.read() is None


async def test_the_revision_saved_is_the_callers(storage: Storage) -> None:
    session_id = await new_session(storage, user(0, "a"))
    async with storage.unit(TENANT, session_id) as unit:
        locked = await unit.store.lock()
        assert locked is not None
        record = locked.session
        assert record.revision == 1 and record.next_seq == 1
        assert record.surface_nodes == 1 and record.log_bytes > 0
        assert record.surface_bytes == len(codec.frame(user(0, "a").message))  # type: ignore[arg-type]
        await unit.store.save(locked.saved(replace(record, revision=7, request_count=5)))
        await unit.commit()
    async with storage.unit(TENANT, session_id, snapshot=True) as unit:
        read = await unit.store.read()
        assert read is not None and (read.revision, read.request_count) == (7, 5)


async def test_the_session_saved_is_the_one_read_back(storage: Storage) -> None:
    """``save`` persists the state the domain's transition left: its counters, the previous
    request with its prefix (and how its Anthropic Messages body ended), the first shadowed
    position and the series generations."""
    session_id = await new_session(storage, user(0, "a"))
    key = RequestKey("openai", "gpt", "tools", 7)
    prefix = RequestPrefix(
        1, 3, 12, b"d" * 32, 1, MessagesEnd("anthropic", 2, "user", True, 1, "assistant")
    )
    async with storage.unit(TENANT, session_id) as unit:
        locked = await unit.store.lock()
        assert locked is not None
        before = locked.session
        after = replace(
            before.admitted(
                0,
                Written(before.next_position, None, 0),
                replace(before.series, replace_generation=2, last_request_generation=2),
                PreviousRequest(key, 1),
                prefix,
            ),
            shadowed=Shadowed(0, True),
        )
        await unit.store.save(locked.saved(after))
        await unit.commit()
    async with storage.unit(TENANT, session_id, snapshot=True) as unit:
        read = await unit.store.read()
    assert read is not None
    fields = ("revision", "next_seq", "next_position", "series", "last_request", "prefix")
    assert [getattr(read, f) for f in fields] == [getattr(after, f) for f in fields]
    assert (read.shadowed, read.request_count, read.surface_tokens) == (
        Shadowed(0, True),
        before.request_count + 1,
        before.surface_tokens,
    )


async def test_appended_nodes_are_the_tail_until_flushed(storage: Storage) -> None:
    session_id = await new_session(storage, user(0, "a"))
    async with storage.unit(TENANT, session_id) as unit:
        written = await unit.store.write_events(*at(1, [user(1, "b"), user(2, "c")]))
        assert written.next_position == 3 and written.shadowed is None
        assert written.tail.messages == 2 and written.tail.tokens == written.tokens
        before = await unit.store.frames(0, None)
        assert before.messages == 1  # the tail is not read back before the flush
        assert before.frames + written.tail.frames == b"".join(
            codec.frame(e.message)  # type: ignore[arg-type]
            for e in (user(0, "a"), user(1, "b"), user(2, "c"))
        )
        await unit.store.flush()
        after = await unit.store.frames(0, 2)
        assert (after.messages, after.before_messages) == (3, 2)
        assert after.frames == before.frames + written.tail.frames
        assert (await unit.store.frames(1, None)).messages == 2


async def test_a_replacement_shadows_a_run(storage: Storage) -> None:
    session_id = await new_session(
        storage,
        system_event(0, "be brief", Append(), turn=1, step=1),
        user(1, "a"),
        user(2, "b"),
        user(3, "c"),
    )
    async with storage.unit(TENANT, session_id) as unit:
        surface = await unit.store.surface()
        assert [node.seq for node in surface] == [0, 1, 2, 3]
        assert surface[1].decoded() == user(1, "a").message
        assert await unit.store.frames_as_of(3, 1) is not None
        shadowed_tokens = surface[1].tokens + surface[2].tokens
        written = await unit.store.write_events(*at(4, [user(4, "summary", Replace(1, 2))]))
        assert written.shadowed is not None and written.shadowed.position == 1
        assert not written.shadowed.system
        surface = await unit.store.surface()
        assert [(node.seq, node.position) for node in surface] == [(0, 0), (4, 1), (3, 3)]
        assert await unit.store.surface_positions(1, 5) == {4: 1, 3: 3}  # only survivors
        assert written.tokens == surface[1].tokens - shadowed_tokens
        assert await unit.store.frames_as_of(3, 0) is None  # a replace since: fold the log
        system, open_calls = await unit.store.system_nodes_and_open_calls()
        assert [(n.seq, n.text) for n in system] == [(0, "be brief")] and open_calls == ()
        assert (await unit.store.frames(0, None, after_writes=True)).messages == 3


async def test_frames_as_of_an_earlier_seq(storage: Storage) -> None:
    session_id = await new_session(storage, user(0, "a"), user(1, "b"), user(2, "c"))
    async with storage.unit(TENANT, session_id, snapshot=True) as unit:
        frames = await unit.store.frames_as_of(1, 1)
        assert frames == codec.frame(user(1, "b").message)  # type: ignore[arg-type]


async def test_an_answer_is_recorded_and_reports_whether_the_call_was_open(
    storage: Storage,
) -> None:
    session_id = await new_session(storage, calling(0, "x", "y"))
    async with storage.unit(TENANT, session_id) as unit:
        locked = await unit.store.lock(tool_call_ids=["x", "z"])
        assert locked is not None and locked.open_calls == ("x", "y")
        assert await unit.store.known_tool_calls(["x", "z"]) == {"x"}
        await unit.store.write_events(*at(1, [answer(1, "x"), answer(2, "x")]))
        assert await unit.store.mark_answered([("x", 1), ("nope", 2)]) == {"x": True}
        _, open_calls = await unit.store.system_nodes_and_open_calls()
        assert open_calls == ("y",)
        assert await unit.store.mark_answered([("x", 2)]) == {"x": False}


async def test_calls_known_open_are_closed_with_the_deferred_writes(storage: Storage) -> None:
    """``close_calls``: a call made before this transaction and one made in it (its row not
    written yet) answered without a read."""
    session_id = await new_session(storage, calling(0, "x"))
    async with storage.unit(TENANT, session_id) as unit:
        await unit.store.lock()
        await unit.store.write_events(*at(1, [calling(1, "w"), answer(2, "x"), answer(3, "w")]))
        await unit.store.close_calls([("x", 2), ("w", 3)])
        assert (await unit.store.system_nodes_and_open_calls())[1] == ()
        await unit.store.close_calls([])
        await unit.commit()
    async with storage.unit(TENANT, session_id) as unit:
        locked = await unit.store.lock()
        assert locked is not None and locked.open_calls == ()
        assert await unit.store.mark_answered([("x", 4)]) == {"x": False}


async def test_admissions_count_their_attempts(storage: Storage) -> None:
    session_id = await new_session(storage)
    async with storage.unit(TENANT, session_id) as unit:
        await unit.store.add_admission(AdmissionRecord("a1", 2, 3, "prompt", (), 1), [0])
        admitted = await unit.store.admission("a1")
        assert admitted is not None
        assert (admitted.turn, admitted.step, admitted.rendered_prompt) == (2, 3, "prompt")
        assert admitted.attempts == 1
        await unit.store.count_attempt("a1")
        assert (await unit.store.admission("a1")).attempts == 2  # type: ignore[union-attr]
        assert await unit.store.admission("a2") is None


async def test_the_ledger_and_observed_usage(storage: Storage) -> None:
    session_id = await new_session(storage)
    async with storage.unit(TENANT, session_id) as unit:
        await unit.store.add_admission(AdmissionRecord("a1", 1, 1, "p", (), 1), [])
        for index, attempt in enumerate((0, 1, 2)):
            await unit.store.add_request(index, "a1", attempt, {"n": index, "at": [index]})
        await unit.store.flush()  # one flushed statement does not see its own inserts
        await unit.store.observe_usage("a1", {"input_tokens": 7})
        ledger = await unit.store.ledger(2)
        assert [row.request_index for row in ledger] == [1, 2]
        assert [row.observed_json() for row in ledger] == [None, {"input_tokens": 7}]
        rows = await unit.store.requests_from(1, 5)
        assert [(row.request_index, row.attempt, row.forecast_json()) for row in rows] == [
            (1, 1, {"n": 1, "at": [1]}),
            (2, 2, {"n": 2, "at": [2]}),
        ]


async def test_a_stored_response_lives_as_long_as_its_session(storage: Storage) -> None:
    session_id = await new_session(storage)
    async with storage.unit(TENANT, session_id) as unit:
        await unit.store.store_response("r1", "Record", b"digest", b"response", b"recipe")
        stored = await unit.store.stored_response("r1")
        assert stored is not None
        assert (stored.method, stored.request_digest, stored.response) == (
            "Record",
            b"digest",
            b"response",
        )
        assert stored.derived_request == b"recipe"
        assert await unit.store.stored_response("r2") is None
        await unit.commit()
    async with storage.unit(TENANT, session_id) as unit:
        await unit.store.delete()
        assert await unit.store.lock() is None
        assert await unit.store.create() is not None  # a new lifetime of the id
        assert await unit.store.stored_response("r1") is None


async def test_event_reads(storage: Storage) -> None:
    session_id = await new_session(
        storage,
        system_event(0, "be brief", Append(), turn=1, step=1),
        user(1, "a" * 100),
        user(2, "b"),
        user(3, "c"),
    )
    async with storage.unit(TENANT, session_id, snapshot=True) as unit:
        rows = await unit.store.events_after(0, 2)
        assert [row.event() for row in rows] == [user(1, "a" * 100), user(2, "b")]
        page, more = await unit.store.events_page(-1, 10, 1)
        assert [row.seq for row in page] == [0] and more  # the first always comes
        page, more = await unit.store.events_page(-1, 2, 1 << 20)
        assert [row.seq for row in page] == [0, 1] and more
        page, more = await unit.store.events_page(1, 5, 1 << 20)
        assert [row.seq for row in page] == [2, 3] and not more
        page, more = await unit.store.events_before(4, 10, 1)
        assert [row.seq for row in page] == [3] and more  # the newest always comes
        page, more = await unit.store.events_before(4, 2, 1 << 20)
        assert [row.seq for row in page] == [2, 3] and more  # in log order
        page, more = await unit.store.events_before(2, 5, 1 << 20)
        assert [row.seq for row in page] == [0, 1] and not more
        assert page[1].event() == user(1, "a" * 100)
        assert await unit.store.surface_positions(1, 3) == {1: 1, 2: 2}
        prompt = await unit.store.prompt_events(4)
        assert [row.seq for row in prompt] == [0]
        details = await unit.store.system_node_details()
        assert [(row.seq, row.system_text) for row in details] == [(0, b"be brief")]
        assert details[0].tokens > 0 and not details[0].update
        assert [row.event() for row in prompt] == [
            system_event(0, "be brief", Append(), turn=1, step=1)
        ]


async def test_repricing(storage: Storage) -> None:
    session_id = await new_session(storage, user(0, "a"), user(1, "b"))
    async with storage.unit(TENANT, session_id) as unit:
        await unit.store.reprice([(0, 40), (1, 2)])
        assert [node.tokens for node in await unit.store.surface(with_empty=False)] == [40, 2]
        assert (await unit.store.frames(0, 1)).before_tokens == 40


async def test_sessions_are_listed_in_creation_order(storage: Storage) -> None:
    tenant = f"list-{uuid.uuid4().hex}"
    for session_id in ("b", "a", "c"):
        async with storage.unit(tenant, session_id) as unit:
            assert await unit.store.create() is not None
            await unit.commit()
    async with storage.unit(tenant, snapshot=True) as unit:
        records = await unit.list_sessions(None, 10)
        assert [r.session_id for r in records] == ["b", "a", "c"]
        last = records[0]
        after = await unit.list_sessions((last.create_time, last.session_id), 1)
        assert [r.session_id for r in after] == ["a"]
        newest = await unit.list_sessions(None, 10, newest_first=True)
        assert [r.session_id for r in newest] == ["c", "a", "b"]
        key = (newest[0].create_time, newest[0].session_id)
        older = await unit.list_sessions(key, 10, newest_first=True)
        assert [r.session_id for r in older] == ["a", "b"]
        assert [r.session_id for r in await unit.list_sessions(None, 10, id_prefix="a")] == ["a"]
        # The prefix is literal: LIKE's wildcards match only themselves.
        assert await unit.list_sessions(None, 10, id_prefix="_") == []
        assert await unit.usage.count_sessions() == 3
        assert await unit.usage.stored_bytes() == 0


async def test_a_node_is_stored_at_the_callers_price(storage: Storage) -> None:
    session_id = await new_session(storage)
    async with storage.unit(TENANT, session_id) as unit:
        written = await unit.store.write_events([user(0, "a"), user(1, "b")], 0, {0: 11, 1: 13})
        assert (written.tokens, written.tail.tokens) == (24, 24)
        assert [node.tokens for node in await unit.store.surface()] == [11, 13]


async def test_the_last_frames_before_a_position(storage: Storage) -> None:
    """What an Anthropic Messages DELTA reads again: the last derived messages before the
    previous request's end, in surface order; a node that derives to nothing is not one."""
    session_id = await new_session(
        storage,
        user(0, "a"),
        user(1, "b"),
        system_event(2, "", Append(), turn=1, step=1),
        user(3, "c"),
        user(4, "d"),
    )

    def frames(*texts: str) -> bytes:
        return b"".join(codec.frame(Message(Role.USER, (Text(text),))) for text in texts)

    async with storage.unit(TENANT, session_id, snapshot=True) as unit:
        assert await unit.store.frames_before(4, 2) == frames("b", "c")
        assert await unit.store.frames_before(5, 1) == frames("d")
        assert await unit.store.frames_before(2, 5) == frames("a", "b")
        assert await unit.store.frames_before(5, 0) == b""
