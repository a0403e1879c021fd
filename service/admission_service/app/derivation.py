"""The derived request: every message node in surface order, spliced from stored frames, with
the totals its cache forecast needs and the prefix the next request extends."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from admission_service.app import bounds
from admission_service.app.commands import (
    DerivedRequestView,
    EncodedMessages,
    RequestSelection,
    RequestView,
)
from admission_service.app.machinery import Machinery
from admission_service.app.ports import SessionRepository
from admission_service.domain.accounting import (
    RequestKey,
    RequestTotals,
    TokenCounter,
    message_digest,
    tools_json,
    tools_tokens,
)
from admission_service.domain.errors import WireFormatError
from admission_service.domain.messages import Tool
from admission_service.domain.series import Route
from admission_service.domain.wire import WireFormat, render
from admission_service.storage.repository import (
    NO_FRAMES,
    Frames,
    RequestPrefix,
    SessionRecord,
    Shadowed,
)

# The digest of a derived request computed from scratch starts from this seed; one extended
# from the previous request's digest chains over the frames appended since (see _derive).
DIGEST_SEED = b"promptadmission.v1/derived-request"


class Derivation(Machinery):
    """Builds the derived request (Admit, Reconcile, Inspect)."""

    async def _derive(
        self,
        store: SessionRepository,
        record: SessionRecord,
        route: Route,
        tools: tuple[Tool, ...],
        wire: WireFormat,
        shadowed: Shadowed | None,
        selection: RequestSelection,
        *,
        end_position: int,
        tail: Frames = NO_FRAMES,
        read: Frames | None = None,
        degrade: bool = False,
    ) -> Derived:
        """The derived request (every message node in surface order), the totals its cache
        forecast needs, and the prefix the next request extends.

        The previous request is an exact prefix of this one unless a node before its end was
        shadowed since. Then only the frames appended since are new: a DELTA request whose held
        prefix is the previous request reads just those (an index range scan from
        ``end_position``), and the digest chains over them. Otherwise the database concatenates
        every stored frame. Either way no stored message is decoded or re-encoded, except to
        render a provider body (non-NEUTRAL wire formats), which reads the returned messages.
        ``tail`` holds this transaction's appended nodes, whose rows are not written yet: they
        end the surface, after everything the database returns. ``read`` is the frames already
        read for exactly this query (``FramesQuery.plan``), if any. With ``degrade`` (Inspect)
        a body the wire format cannot express is reported in the view instead of raised.
        """
        prefix = record.prefix
        query = FramesQuery.plan(record, shadowed, selection, wire)
        intact, delta = query.intact, query.delta
        if read is None:
            read = await store.frames(query.from_position, query.split_position)
        # The body stays in its two parts (what was read, this transaction's tail) until the
        # edge's one join; the digest hashes them where they lie. A long surface's frames are
        # never copied here.
        body = EncodedMessages(read.frames, tail.frames)
        if prefix is not None and intact:
            if delta:
                new: tuple[bytes | memoryview, ...] = body.parts
                first_index = prefix.messages
            else:
                new = (memoryview(read.frames)[prefix.size :], tail.frames)
                first_index = 0
            messages = prefix.messages + (read.messages - read.before_messages) + tail.messages
            tokens = prefix.tokens + (read.tokens - read.before_tokens) + tail.tokens
            new_size = sum(map(len, new))
            digest = _chained(prefix.digest, new) if new_size else prefix.digest
            totals = RequestTotals(messages, tokens, prefix.messages, prefix.tokens, False)
            size = prefix.size + new_size
        else:
            first_index = 0
            messages, tokens = read.messages + tail.messages, read.tokens + tail.tokens
            digest = _chained(DIGEST_SEED, body.parts)
            size = body.size
            if shadowed is not None:
                # Every node before the first shadowed position was in the previous request.
                totals = RequestTotals(
                    messages, tokens, read.before_messages, read.before_tokens, shadowed.system
                )
            else:
                totals = RequestTotals(messages, tokens, messages, tokens, False)
        rendered = ""
        render_error = None
        try:
            rendered = render(
                body,
                wire,
                in_history=route.in_history,
                provider=route.provider,
                tools=tools,
                offset=first_index,
            )
        except WireFormatError as error:
            if not degrade:
                raise
            render_error = error
        bounds.check_derived_request_size(body.size + len(rendered), self.limits)
        view = DerivedRequestView(
            wire,
            body,
            rendered,
            tools,
            view=RequestView.DELTA if first_index else RequestView.FULL,
            first_message_index=first_index,
            total_messages=messages,
            digest=digest,
            render_error=render_error,
        )
        prefix_now = RequestPrefix(messages, tokens, size, digest, end_position)
        return Derived(view, totals, prefix_now)


@dataclass(frozen=True, slots=True)
class FramesQuery:
    """Which stored frames a derived request reads: from ``from_position`` on, counting those
    before ``split_position``; ``intact`` when the previous request is still a prefix, ``delta``
    when the caller holds exactly that prefix and gets only what follows it."""

    from_position: int
    split_position: int | None
    intact: bool
    delta: bool

    @classmethod
    def plan(
        cls,
        record: SessionRecord,
        shadowed: Shadowed | None,
        selection: RequestSelection,
        wire: WireFormat,
    ) -> FramesQuery:
        prefix = record.prefix
        if prefix is None or (shadowed is not None and shadowed.position < prefix.end_position):
            return cls(0, shadowed.position if shadowed is not None else None, False, False)
        held = selection.held
        delta = (
            selection.view is RequestView.DELTA
            and wire is not WireFormat.ANTHROPIC_MESSAGES
            and held is not None
            and (held.message_count, held.digest) == (prefix.messages, prefix.digest)
        )
        if delta:
            return cls(prefix.end_position, None, True, True)
        return cls(0, prefix.end_position, True, False)


def _chained(seed: bytes, parts: Iterable[bytes | memoryview]) -> bytes:
    """SHA-256 of ``seed`` followed by ``parts``: the digest of their concatenation, without
    making it."""
    digest = hashlib.sha256(seed)
    for part in parts:
        digest.update(part)
    return digest.digest()


@dataclass(frozen=True, slots=True)
class Derived:
    view: DerivedRequestView
    totals: RequestTotals
    prefix: RequestPrefix


def request_key(route: Route, tools: tuple[Tool, ...], counter: TokenCounter) -> RequestKey:
    return RequestKey(
        route.provider,
        route.model,
        message_digest(tools_json(tools).encode()),
        tools_tokens(tools, counter),
    )
