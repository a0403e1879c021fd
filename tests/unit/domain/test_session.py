"""The session aggregate (``domain/session.py``): its transitions and the derived request's
rules — which frames a request reads, its totals, its digest and the prefix the next extends."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime

from admission_service.domain.accounting import PreviousRequest, RequestKey
from admission_service.domain.series import SeriesState
from admission_service.domain.session import (
    DIGEST_SEED,
    FULL_VIEW,
    NO_FRAMES,
    Frames,
    FramesQuery,
    HeldPrefix,
    RequestPrefix,
    RequestSelection,
    RequestView,
    Session,
    Shadowed,
    Written,
    derive,
)
from admission_service.domain.wire_anthropic import MessagesEnd
from admission_service.domain.wire_common import WireFormat
from hypothesis import given
from hypothesis import strategies as st

NOW = datetime(2026, 12, 1, tzinfo=UTC)
KEY = RequestKey("openai", "gpt", "tools", 0)
PREFIX = RequestPrefix(messages=3, tokens=30, size=12, digest=b"d" * 32, end_position=5)


def session(**changes: object) -> Session:
    values: dict[str, object] = {
        "session_id": "s",
        "revision": 4,
        "next_seq": 9,
        "next_position": 5,
        "series": SeriesState(),
        "last_request": PreviousRequest(KEY, 3),
        "prefix": PREFIX,
        "shadowed": None,
        "request_count": 2,
        "surface_tokens": 30,
        "create_time": NOW,
        "update_time": NOW,
    }
    values.update(changes)
    return Session(**values)  # type: ignore[arg-type]


HELD = HeldPrefix(3, b"d" * 32)  # exactly PREFIX


def delta(held: HeldPrefix | None = HELD) -> RequestSelection:
    return RequestSelection(RequestView.DELTA, held)


# ---- which frames a request reads ------------------------------------------------------------


def test_a_first_request_reads_every_frame() -> None:
    query = FramesQuery.plan(session(prefix=None), None, delta(), WireFormat.NEUTRAL)
    assert query == FramesQuery(0, None, intact=False, delta=False)


def test_a_shadow_before_the_previous_end_breaks_the_prefix() -> None:
    query = FramesQuery.plan(session(), Shadowed(2, True), delta(), WireFormat.NEUTRAL)
    assert query == FramesQuery(0, 2, intact=False, delta=False)


def test_a_shadow_after_the_previous_end_keeps_it() -> None:
    query = FramesQuery.plan(session(), Shadowed(5, False), delta(), WireFormat.NEUTRAL)
    assert query == FramesQuery(5, None, intact=True, delta=True)


def test_a_delta_needs_the_caller_to_hold_exactly_the_previous_request() -> None:
    plan = FramesQuery.plan
    assert plan(session(), None, delta(), WireFormat.NEUTRAL).delta
    assert not plan(session(), None, delta(HeldPrefix(2, b"d" * 32)), WireFormat.NEUTRAL).delta
    assert not plan(session(), None, delta(HeldPrefix(3, b"x" * 32)), WireFormat.NEUTRAL).delta
    assert not plan(session(), None, delta(None), WireFormat.NEUTRAL).delta
    assert not plan(session(), None, FULL_VIEW, WireFormat.NEUTRAL).delta
    # An Anthropic Messages body without the held body's length: the whole request.
    assert plan(session(), None, delta(), WireFormat.ANTHROPIC_MESSAGES) == FramesQuery(
        0, 5, intact=True, delta=False
    )


END = MessagesEnd("anthropic", 4, "user", True, 3, "assistant")  # how the held list ends


def test_an_anthropic_body_delta_continues_the_body_the_previous_request_rendered() -> None:
    """Its body is not an append: it continues the held list as the previous request rendered
    it, so that request must have rendered one on the same provider, and the caller must hold
    it (the length it says its list has is the rendered list's)."""
    plan = FramesQuery.plan
    anthropic = WireFormat.ANTHROPIC_MESSAGES
    rendered = session(prefix=replace(PREFIX, body_end=END))
    holding = delta(replace(HELD, body_items=4))
    query = plan(rendered, None, holding, anthropic, provider="anthropic")
    assert query == FramesQuery(5, None, intact=True, delta=True, continues=END)
    full = FramesQuery(0, 5, intact=True, delta=False)
    assert plan(rendered, None, delta(), anthropic, provider="anthropic") == full  # length untold
    wrong = delta(replace(HELD, body_items=3))
    assert plan(rendered, None, wrong, anthropic, provider="anthropic") == full
    assert plan(rendered, None, holding, anthropic, provider="deepseek") == full
    assert plan(session(), None, holding, anthropic, provider="anthropic") == full  # none rendered
    # Without a body the typed messages extend by appending, as in every format; the OpenAI
    # formats' bodies too, whatever the held length.
    messages = plan(session(), None, delta(), anthropic, provider="anthropic", body=False)
    assert messages == FramesQuery(5, None, intact=True, delta=True)
    chat = plan(session(), None, delta(), WireFormat.OPENAI_CHAT, provider="openai")
    assert chat.delta and chat.continues is None


def test_an_openai_body_delta_needs_the_previous_request_on_the_same_provider() -> None:
    """An OpenAI body appends, but renders a message by its provider (DeepSeek's chat takes
    reasoning back as reasoning_content, Responses keeps only its own provider's opaque
    reasoning): after a change of provider the held body is not this request's prefix."""
    plan = FramesQuery.plan
    for wire in (WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES):
        assert plan(session(), None, delta(), wire, provider="openai").delta
        moved = plan(session(), None, delta(), wire, provider="deepseek")
        assert moved == FramesQuery(0, 5, intact=True, delta=False)
        assert not plan(session(last_request=None), None, delta(), wire, provider="openai").delta
        # The typed messages alone still append.
        assert plan(session(), None, delta(), wire, provider="deepseek", body=False).delta


def test_a_held_body_is_continued_only_when_it_is_the_previous_requests_alone() -> None:
    """A FULL body reads only what follows the previous request when the worker holds that
    request's body (its digest), the response carries the body alone, and nothing before the
    previous request's end was shadowed since."""
    plan = FramesQuery.plan
    for wire in (WireFormat.OPENAI_CHAT, WireFormat.ANTHROPIC_MESSAGES):
        held = plan(
            session(),
            None,
            FULL_VIEW,
            wire,
            held_body=PREFIX.digest,
            messages=False,
            provider="openai",
        )
        assert held == FramesQuery(5, None, intact=True, delta=False, body_held=True)
        full = FramesQuery(0, 5, intact=True, delta=False)
        assert (
            plan(
                session(),
                None,
                FULL_VIEW,
                wire,
                held_body=b"e" * 32,
                messages=False,
                provider="openai",
            )
            == full
        )
        assert plan(session(), None, FULL_VIEW, wire, held_body=PREFIX.digest) == full
        broken = plan(session(), Shadowed(2, True), FULL_VIEW, wire, held_body=PREFIX.digest)
        assert not broken.intact and not broken.body_held
        assert plan(session(), None, FULL_VIEW, wire, messages=False, provider="openai") == full


# ---- what a request is -----------------------------------------------------------------------

frames = st.lists(st.binary(min_size=1, max_size=8), max_size=6)


def _frames(parts: list[bytes], before: int = 0) -> Frames:
    """``parts`` as read, each priced at its length; ``before``: how many lead (the split)."""
    return Frames(
        tuple(parts), len(parts), sum(map(len, parts)), before, sum(map(len, parts[:before]))
    )


@given(previous=frames, stored=frames, tail=frames)
def test_full_and_delta_of_one_request_agree(
    previous: list[bytes], stored: list[bytes], tail: list[bytes]
) -> None:
    """A caller holding the previous request gets the frames since (DELTA) and the same
    digest, totals and next prefix as the whole request (FULL) — whichever of the new frames
    are stored and which are this transaction's tail; a first request's digest is the seed's
    over every frame."""
    first_query = FramesQuery.plan(session(prefix=None), None, FULL_VIEW, WireFormat.NEUTRAL)
    first = derive(None, first_query, None, _frames(previous), NO_FRAMES, 7)
    assert first.digest == hashlib.sha256(DIGEST_SEED + b"".join(previous)).digest()
    assert first.first_index == 0 and first.totals.messages == len(previous)
    before = session(prefix=first.prefix, next_position=7)
    held = RequestSelection(RequestView.DELTA, HeldPrefix(first.prefix.messages, first.digest))
    full_query = FramesQuery.plan(before, None, FULL_VIEW, WireFormat.NEUTRAL)
    delta_query = FramesQuery.plan(before, None, held, WireFormat.NEUTRAL)
    full = derive(
        first.prefix, full_query, None, _frames(previous + stored, len(previous)), _frames(tail), 9
    )
    part = derive(first.prefix, delta_query, None, _frames(stored), _frames(tail), 9)
    assert (full.digest, full.totals, full.prefix) == (part.digest, part.totals, part.prefix)
    # A FULL body continued from the previous request's held body reads what the DELTA reads
    # and is the FULL request.
    held_query = FramesQuery.plan(
        before, None, FULL_VIEW, WireFormat.OPENAI_CHAT, messages=False, held_body=first.digest
    )
    assert held_query == FramesQuery(7, None, intact=True, delta=False, body_held=True)
    continued = derive(first.prefix, held_query, None, _frames(stored), _frames(tail), 9)
    assert continued == full
    assert (full.first_index, part.first_index) == (0, len(previous))
    assert part.totals.messages == len(previous) + len(stored) + len(tail)
    # Every previous message is unchanged; only what follows is new.
    assert part.totals.unchanged_messages == len(previous)
    new = b"".join(stored + tail)
    expected = hashlib.sha256(first.digest + new).digest() if new else first.digest
    assert part.digest == expected
    assert part.prefix.size == len(b"".join(previous)) + len(new)
    assert part.prefix.end_position == 9


@given(stored=frames, cut=st.integers(0, PREFIX.end_position - 1), system=st.booleans())
def test_a_broken_prefix_starts_over_with_what_leads_unchanged(
    stored: list[bytes], cut: int, system: bool
) -> None:
    """After a shadow before the previous end: the digest from the seed, and the messages
    before the shadowed position are those the cache can reuse."""
    cut = min(cut, len(stored))
    shadowed = Shadowed(cut, system)
    query = FramesQuery.plan(session(), shadowed, FULL_VIEW, WireFormat.NEUTRAL)
    assert not query.intact
    derived = derive(PREFIX, query, shadowed, _frames(stored, cut), NO_FRAMES, 8)
    assert derived.digest == hashlib.sha256(DIGEST_SEED + b"".join(stored)).digest()
    totals = derived.totals
    assert (totals.messages, totals.unchanged_messages, totals.at_system) == (
        len(stored),
        cut,
        system,
    )


# ---- transitions -----------------------------------------------------------------------------


@given(logged=st.integers(0, 5))
def test_the_revision_moves_once_when_events_are_logged(logged: int) -> None:
    written = Written(5 + logged, None, logged)
    before = session()
    for after in (
        before.recorded(before.next_seq + logged, written),
        before.admitted(logged, written, SeriesState(), PreviousRequest(KEY, 4), PREFIX),
        before.compacted(logged, written, SeriesState()),
    ):
        assert after.revision == before.revision + (1 if logged else 0)
        assert after.next_seq == before.next_seq + logged
        assert after.next_position == written.next_position
        assert after.surface_tokens == before.surface_tokens + logged


def test_a_record_keeps_the_previous_request_and_the_shadow() -> None:
    before = session(shadowed=Shadowed(1, True))
    after = before.recorded(11, Written(7, None, 4))
    assert (after.last_request, after.prefix, after.shadowed) == (
        before.last_request,
        before.prefix,
        before.shadowed,
    )
    assert after.request_count == before.request_count


def test_an_attempt_is_the_request_the_next_compares_with() -> None:
    prefix = RequestPrefix(5, 50, 20, b"e" * 32, 7)
    after = session(shadowed=Shadowed(1, True)).admitted(
        2, Written(7, Shadowed(3, False), 5), SeriesState(), PreviousRequest(KEY, 5), prefix
    )
    assert (after.shadowed, after.prefix, after.request_count) == (None, prefix, 3)


def test_a_compaction_keeps_the_earliest_shadow_since_the_last_request() -> None:
    written = Written(6, Shadowed(3, False), -10)
    assert session().compacted(1, written, SeriesState()).shadowed == Shadowed(3, False)
    earlier = session(shadowed=Shadowed(1, True))
    assert earlier.compacted(1, written, SeriesState()).shadowed == Shadowed(1, True)
    assert earlier.compacted(1, written, SeriesState()).prefix == PREFIX


def test_repricing_moves_the_running_price_and_the_prefix_price() -> None:
    after = session().repriced(surface_tokens=44, prefix_tokens=33)
    assert (after.surface_tokens, after.prefix) == (44, RequestPrefix(3, 33, 12, b"d" * 32, 5))
    assert session(prefix=None).repriced(surface_tokens=44, prefix_tokens=0).prefix is None
