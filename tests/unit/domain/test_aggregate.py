"""The session aggregate's pure transitions (domain/aggregate.py). That what they leave is what
the database holds after the same writes is checked on PostgreSQL
(tests/integration/test_session_cache.py, ``…_the_one_a_fresh_read_finds``)."""

from __future__ import annotations

from dataclasses import replace

from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.events import Append, Event, EventKind, Replace
from admission_service.domain.messages import Message, Role, Text, ToolCall
from admission_service.domain.projection import SystemNode
from admission_service.domain.session import NO_FRAMES, Frames, Shadowed, Written
from admission_service.domain.stored import AdmissionRecord, Growth
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.domain.test_session import PREFIX, session

ADMISSION = AdmissionRecord("a1", 1, 1, "be brief", (), 1)


def aggregate(**changes: object) -> SessionAggregate:
    """Nothing appended since the previous request (it ended at position 5)."""
    return SessionAggregate.read(session(**changes), (SystemNode(0, "be brief"),), (), ADMISSION)


def user_event(seq: int) -> Event:
    return Event(
        seq, EventKind.USER_MESSAGE, op=Append(), message=Message(Role.USER, (Text("hi"),))
    )


def system_event(seq: int, text: str) -> Event:
    return Event(
        seq, EventKind.SYSTEM_MESSAGE, op=Append(), message=Message(Role.SYSTEM, (Text(text),))
    )


def calls(seq: int, *call_ids: str) -> Event:
    made = Message(Role.ASSISTANT, tuple(ToolCall(call_id, "read", "{}") for call_id in call_ids))
    return Event(seq, EventKind.ASSISTANT_MESSAGE, op=Append(), message=made)


def appended(frames: bytes, messages: int, tokens: int, next_position: int = 7) -> Written:
    return Written(next_position, None, tokens, Frames((frames,), messages, tokens, 0, 0))


def test_a_fresh_read_knows_the_frames_since_the_request_only_when_there_are_none() -> None:
    assert aggregate().pending == NO_FRAMES
    assert aggregate().pending_from == PREFIX.end_position
    assert aggregate(next_position=7).pending is None  # a Record appended since: not read
    assert aggregate(prefix=None, last_request=None, next_position=0).pending_from == 0


def test_the_frames_since_the_request_answer_only_the_read_they_are() -> None:
    known = aggregate()
    assert known.frames_since_request(PREFIX.end_position, None) == NO_FRAMES
    assert known.frames_since_request(0, None) is None  # a FULL read
    assert known.frames_since_request(PREFIX.end_position, 6) is None  # a split read
    assert aggregate(next_position=7).frames_since_request(PREFIX.end_position, None) is None


def test_appends_extend_the_frames_fold_the_system_nodes_and_open_the_calls_in_order() -> None:
    events = [
        system_event(9, "be thorough"),
        user_event(10),
        calls(11, "c2", "c1"),
        calls(12, "c0"),
    ]
    after = replace(aggregate(), open_calls=("c9",)).wrote(events, appended(b"ab", 2, 5))
    assert after is not None
    assert [node.text for node in after.system_nodes] == ["be brief", "be thorough"]
    assert after.open_calls == ("c9", "c1", "c2", "c0")  # by the seq that made them, then id
    assert after.pending == Frames((b"ab",), 2, 5, 0, 0)
    again = after.wrote([user_event(13)], appended(b"c", 1, 1, 8))
    assert again is not None and again.pending == Frames((b"abc",), 3, 6, 0, 0)


def test_unknown_frames_stay_unknown_after_appends() -> None:
    after = aggregate(next_position=7).wrote([user_event(9)], appended(b"a", 1, 1))
    assert after is not None and after.pending is None


def test_a_replacement_is_not_followed() -> None:
    replacing = Event(
        9,
        EventKind.COMPACTION_SUMMARY,
        op=Replace(2, 4),
        message=Message(Role.USER, (Text("summary"),)),
    )
    assert aggregate().wrote([replacing], appended(b"s", 1, 1)) is None
    shadowing = Written(6, Shadowed(2, False), -3, NO_FRAMES)
    assert aggregate().wrote([user_event(9)], shadowing) is None


def test_what_was_not_followed_is_read_again_and_the_frames_are_no_longer_known() -> None:
    again = aggregate().reread((SystemNode(9, "new"),), ["c1"])
    assert again.system_nodes == (SystemNode(9, "new"),) and again.open_calls == ("c1",)
    assert again.pending is None and again.session == aggregate().session
    assert aggregate().repriced().pending is None


def test_answers_close_open_calls_and_only_open_ones() -> None:
    known = replace(aggregate(), open_calls=("c1", "c2", "c3"))
    closed = known.answered(["c2"])
    assert closed is not None and closed.open_calls == ("c1", "c3")
    assert known.answered(["c2", "c9"]) is None  # c9 is not open: the database answers
    assert known.answered([]) == known


def test_an_attempt_counts_on_the_admission_it_retries() -> None:
    assert aggregate().attempted("a1").admission == replace(ADMISSION, attempts=2)
    assert aggregate().attempted("other").admission == ADMISSION
    second = replace(ADMISSION, admission_id="a2")
    assert aggregate().admitted(second).admission_named("a2") == second
    assert aggregate().admission_named("a2") is None


def test_a_commit_moves_the_saved_row_by_the_growth() -> None:
    known = aggregate()
    saved = replace(known.session, revision=6, next_position=7, surface_bytes=10)
    growth = Growth(surface_bytes=20, surface_nodes=2, log_bytes=30, events=2)
    after = known.wrote([user_event(9)], appended(b"ab", 2, 5))
    assert after is not None
    left = after.saved(saved).committed(growth)
    assert left.session.revision == 6
    assert (left.session.surface_bytes, left.session.surface_nodes) == (30, 2)
    assert left.session.log_bytes == 30
    # The row saved still has the request ending at 5: the two appended frames are pending.
    assert left.pending_from == 5 and left.pending == Frames((b"ab",), 2, 5, 0, 0)
    assert known.committed(None).session == known.session  # nothing saved


def test_a_new_request_leaves_no_frames_pending() -> None:
    known = aggregate().wrote([user_event(9)], appended(b"ab", 2, 5))
    assert known is not None
    moved = replace(PREFIX, end_position=7)
    left = known.saved(replace(known.session, next_position=7, prefix=moved)).committed(Growth())
    assert left.pending_from == 7 and left.pending == NO_FRAMES


@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=6, unique=True), st.data())
def test_answering_any_subset_of_the_open_calls_keeps_the_rest_in_order(
    open_calls: list[str], data: st.DataObject
) -> None:
    answered = data.draw(
        st.lists(st.sampled_from(open_calls), unique=True) if open_calls else st.just([])
    )
    known = replace(aggregate(), open_calls=tuple(open_calls))
    closed = known.answered(answered)
    assert closed is not None
    assert list(closed.open_calls) == [call for call in open_calls if call not in answered]
