"""The session's row as the rules see it, and its pure transitions; the aggregate a step works
on holds it with what the step reads beside it (``aggregate.py``).

``Session`` is the session row as the rules see it — revision, next seq and position, the
series state (replace generation, last header and context), the previous request (its cache
key and the prefix the next one extends), the first position shadowed since, the running
price and sizes. Each transition takes what a step decided and returns the new ``Session``;
nothing here reads or writes anything. Storage loads it inside a ``SessionAggregate`` and
saves the one a use case leaves (``app/ports.py``: ``SessionRepository.lock``, ``save``).

The derived request's rules live here too: which stored frames a request reads
(``FramesQuery.plan``: the previous request still a prefix? the caller holding exactly it, so
a DELTA? for an Anthropic Messages body, also the body the previous request rendered, which the
DELTA's body continues), and what it is (``derive``: its totals for the cache forecast, its
digest, chained from the previous request's over the frames appended since, and the prefix the
next request extends).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from admission_service.domain.accounting import PreviousRequest, RequestTotals
from admission_service.domain.events import revision_after
from admission_service.domain.series import SeriesState
from admission_service.domain.wire_anthropic import MessagesEnd
from admission_service.domain.wire_common import WireFormat

# The digest of a derived request computed from scratch starts from this seed; one extended
# from the previous request's digest chains over the frames appended since (``derive``).
DIGEST_SEED = b"promptadmission.v1/derived-request"


@dataclass(frozen=True, slots=True)
class Shadowed:
    """The first surface position shadowed since the last request, and whether it held a
    system node (what the cache forecast needs to find the divergence)."""

    position: int
    system: bool

    def earliest(self, other: Shadowed | None) -> Shadowed:
        return self if other is None or self.position <= other.position else other


@dataclass(frozen=True, slots=True)
class RequestPrefix:
    """The previous derived request as the next one needs it: its message count, price,
    encoded size (bytes of its concatenated frames) and digest, and ``end_position``, the next
    append position when it was derived. Nodes at or after ``end_position`` were appended
    since; as long as nothing before it was shadowed, the previous request is an exact prefix
    of the next, which is then the stored prefix plus the frames from ``end_position`` on.
    ``body_end``: how the list of its Anthropic Messages body ends, when it rendered one (what
    a DELTA's body continues); None otherwise."""

    messages: int
    tokens: int
    size: int
    digest: bytes
    end_position: int
    body_end: MessagesEnd | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Frames:
    """Derived messages as stored frames: their concatenation in ``parts`` (as read or written:
    a FULL read's chunks, the nodes a step appended), how many messages, their price; and the
    count and price of those before a split position. The parts are joined only where one
    value is needed (``frames``): a FULL request of a long session is tens of megabytes, and
    each copy of it into fresh memory cost ~10 ms (S3 at 100 000 nodes). Two values with the
    same frames in other parts are equal."""

    parts: tuple[bytes, ...]
    messages: int
    tokens: int
    before_messages: int
    before_tokens: int

    @property
    def frames(self) -> bytes:
        return b"".join(self.parts)  # one part: that very object, not a copy

    @property
    def size(self) -> int:
        return sum(map(len, self.parts))

    def _key(self) -> tuple[bytes, int, int, int, int]:
        return (self.frames, self.messages, self.tokens, self.before_messages, self.before_tokens)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Frames) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


NO_FRAMES = Frames((), 0, 0, 0, 0)


def _skipping(parts: tuple[bytes, ...], offset: int) -> tuple[memoryview, ...]:
    """``parts`` without their first ``offset`` bytes, as views (nothing copied)."""
    kept = []
    for part in parts:
        if offset >= len(part):
            offset -= len(part)
            continue
        kept.append(memoryview(part)[offset:])
        offset = 0
    return tuple(kept)


@dataclass(frozen=True, slots=True)
class Written:
    """What writing a transition's events did to the surface: the next append position, the
    earliest position it shadowed, the change in the surface's summed price, and ``tail``: the
    appended nodes after the last replacement, which end the surface."""

    next_position: int
    shadowed: Shadowed | None
    tokens: int
    tail: Frames = NO_FRAMES


class RequestView(StrEnum):
    """How much of the derived request a response carries (FULL is the default)."""

    FULL = "full"
    DELTA = "delta"


@dataclass(frozen=True, slots=True)
class HeldPrefix:
    """The leading messages of the derived request a caller holds (a previous response's
    total_messages and digest), for a DELTA request; ``body_items``: how many items the list of
    the body it holds has (0: not said), which an Anthropic Messages DELTA body needs."""

    message_count: int
    digest: bytes
    body_items: int = 0


@dataclass(frozen=True, slots=True)
class RequestSelection:
    """The view a caller asks for, with its held prefix for DELTA."""

    view: RequestView = RequestView.FULL
    held: HeldPrefix | None = None


FULL_VIEW = RequestSelection()


@dataclass(frozen=True, slots=True)
class Session:
    """The session row (see the module docstring)."""

    session_id: str
    revision: int
    next_seq: int
    next_position: int
    series: SeriesState
    last_request: PreviousRequest | None
    prefix: RequestPrefix | None
    shadowed: Shadowed | None
    request_count: int
    surface_tokens: int
    create_time: datetime
    update_time: datetime
    # Running sizes: the surviving nodes' frame bytes and count, and the event log's payload
    # bytes. The session bounds and the stored-bytes quota read these.
    surface_bytes: int = 0
    surface_nodes: int = 0
    log_bytes: int = 0

    def shadowed_with(self, written: Written) -> Shadowed | None:
        """The first position shadowed since the last request, this write's included (what
        the next cache forecast starts from)."""
        if written.shadowed is None:
            return self.shadowed
        return written.shadowed.earliest(self.shadowed)

    def recorded(self, next_seq: int, written: Written) -> Session:
        """After a Record that logged up to ``next_seq``: it appends only, so the session keeps
        its shadowed position and its previous request."""
        return self._wrote(next_seq - self.next_seq, written)

    def admitted(
        self,
        logged: int,
        written: Written,
        series: SeriesState,
        request: PreviousRequest,
        prefix: RequestPrefix,
    ) -> Session:
        """After an attempt (Admit or Reconcile) that logged ``logged`` events and derived a
        request: the next forecast compares with this request, so nothing is shadowed since."""
        return self._wrote(
            logged,
            written,
            series=series,
            last_request=request,
            prefix=prefix,
            shadowed=None,
            request_count=self.request_count + 1,
        )

    def compacted(self, logged: int, written: Written, series: SeriesState) -> Session:
        """After a Compact that logged ``logged`` events: its replacement is shadowed since the
        last request."""
        return self._wrote(logged, written, series=series, shadowed=self.shadowed_with(written))

    def _wrote(self, logged: int, written: Written, **changes: Any) -> Session:
        """After a write that logged ``logged`` events (the revision moves only then) and
        changed the surface as ``written`` says, with ``changes``."""
        return replace(
            self,
            revision=revision_after(self.revision, logged),
            next_seq=self.next_seq + logged,
            next_position=written.next_position,
            surface_tokens=self.surface_tokens + written.tokens,
            **changes,
        )

    def repriced(self, surface_tokens: int, prefix_tokens: int) -> Session:
        """After a change of tokenizer priced every surviving node again: the new running
        price, and the previous request's price (the nodes before its end)."""
        prefix = self.prefix
        return replace(
            self,
            surface_tokens=surface_tokens,
            prefix=replace(prefix, tokens=prefix_tokens) if prefix is not None else None,
        )


@dataclass(frozen=True, slots=True)
class FramesQuery:
    """Which stored frames a derived request reads: from ``from_position`` on, counting those
    before ``split_position``; ``intact`` when the previous request is still a prefix, ``delta``
    when the caller holds exactly that prefix and gets only what follows it. ``continues``: for
    an Anthropic Messages DELTA body, how the held body's list ends (its rendering goes on from
    there, ``wire_anthropic.anthropic_messages``)."""

    from_position: int
    split_position: int | None
    intact: bool
    delta: bool
    continues: MessagesEnd | None = None
    # A FULL body continued from the previous request's, which the worker holds rendered:
    # only the frames after it are read (``derive``, ``wire.continued``).
    body_held: bool = False

    @classmethod
    def plan(
        cls,
        session: Session,
        shadowed: Shadowed | None,
        selection: RequestSelection,
        wire: WireFormat,
        *,
        provider: str = "",
        body: bool = True,
        messages: bool = True,
        held_body: bytes | None = None,
    ) -> FramesQuery:
        """The previous request is an exact prefix of this one unless a node before its end
        was shadowed since; a DELTA needs the caller to hold exactly that prefix, and reads
        only what follows it.

        The typed messages extend by appending; so do the OpenAI formats' bodies, on the
        provider the previous request was on (their blocks depend on it). An Anthropic
        Messages body (``body``: the response carries one) does not: its DELTA continues the
        body the previous request rendered, so that request must have rendered one, on this
        route's ``provider`` (its blocks depend on it), and the caller must hold it: the
        ``body_items`` it says its body's list has are the rendered list's. Otherwise FULL;
        and when the response carries the body alone (not ``messages``) and the worker holds
        the body of the previous request's messages on this route (``held_body``: the digest
        of the request it rendered), a FULL that reads only what follows them."""
        prefix = session.prefix
        if prefix is None or (shadowed is not None and shadowed.position < prefix.end_position):
            return cls(0, shadowed.position if shadowed is not None else None, False, False)
        held = selection.held
        delta = (
            selection.view is RequestView.DELTA
            and held is not None
            and (held.message_count, held.digest) == (prefix.messages, prefix.digest)
        )
        continues = None
        if delta and body and wire is WireFormat.ANTHROPIC_MESSAGES:
            assert held is not None
            continues = prefix.body_end
            delta = (
                continues is not None
                and continues.provider == provider
                and held.body_items == continues.items > 0
            )
        elif delta and body and wire is not WireFormat.NEUTRAL:
            # The OpenAI formats' bodies append, but how they render a message depends on the
            # provider (DeepSeek's chat takes reasoning back, Responses keeps only its own
            # provider's opaque reasoning): the held body is this one's prefix only when the
            # previous request was on this route's provider.
            previous = session.last_request
            delta = previous is not None and previous.key.provider == provider
        if delta:
            return cls(prefix.end_position, None, True, True, continues)
        if body and not messages and held_body == prefix.digest:
            return cls(prefix.end_position, None, True, False, body_held=True)
        return cls(0, prefix.end_position, True, False)


@dataclass(frozen=True, slots=True)
class DerivedRequest:
    """What a derived request is, without its bytes: the index of its first message in the
    response (``first_index``: 0 for FULL, the held prefix's count for DELTA), its totals for
    the cache forecast, its digest and the prefix the next request extends."""

    first_index: int
    totals: RequestTotals
    digest: bytes
    prefix: RequestPrefix


def derive(
    previous: RequestPrefix | None,
    query: FramesQuery,
    shadowed: Shadowed | None,
    read: Frames,
    tail: Frames,
    end_position: int,
) -> DerivedRequest:
    """The derived request made of ``read`` (the stored frames ``query`` read) then ``tail``
    (this transaction's appended nodes, which end the surface).

    While the previous request is intact only the frames appended since are new: the digest
    chains from the previous one over them (so FULL and DELTA of one request have one digest,
    and a caller can check the prefix it holds), and every previous message is unchanged.
    Otherwise the digest starts from the seed over every frame, and the messages before the
    first shadowed position are the unchanged ones."""
    if previous is not None and query.intact:
        new: tuple[bytes | memoryview, ...]
        if query.delta or query.body_held:  # read from the previous request's end
            new = (*read.parts, *tail.parts)
        else:
            new = (*_skipping(read.parts, previous.size), *tail.parts)
        first_index = previous.messages if query.delta else 0
        messages = previous.messages + (read.messages - read.before_messages) + tail.messages
        tokens = previous.tokens + (read.tokens - read.before_tokens) + tail.tokens
        new_size = sum(map(len, new))
        digest = chained(previous.digest, new) if new_size else previous.digest
        totals = RequestTotals(messages, tokens, previous.messages, previous.tokens, False)
        size = previous.size + new_size
    else:
        first_index = 0
        messages, tokens = read.messages + tail.messages, read.tokens + tail.tokens
        digest = chained(DIGEST_SEED, (*read.parts, *tail.parts))
        size = read.size + tail.size
        if shadowed is not None:
            # Every node before the first shadowed position was in the previous request.
            totals = RequestTotals(
                messages, tokens, read.before_messages, read.before_tokens, shadowed.system
            )
        else:
            totals = RequestTotals(messages, tokens, messages, tokens, False)
    prefix = RequestPrefix(messages, tokens, size, digest, end_position)
    return DerivedRequest(first_index, totals, digest, prefix)


def chained(seed: bytes, parts: Iterable[bytes | memoryview]) -> bytes:
    """SHA-256 of ``seed`` followed by ``parts``: the digest of their concatenation, without
    making it."""
    digest = hashlib.sha256(seed)
    for part in parts:
        digest.update(part)
    return digest.digest()
