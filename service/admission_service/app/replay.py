"""Idempotency records that do not grow with the session (issue 13, finding 3).

A repeated ``request_id`` replays the first response's bytes. An Admit or Reconcile response
carries the derived request, which for a FULL view is the whole surface: storing it would make a
session's records grow with the square of its length. So the record keeps the response *head*
(everything but the derived request's messages and rendered body; the API edge encodes a
response as head + body, ``SplitEncoder``) and a ``Recipe``: the event seq as of which the
request was derived, the index of its first message, what rendering the body needs, and which
of the two the response carried (``RequestContent``).

The surface as of an event seq is reproducible byte for byte: every surface node's stored frame
is ``storage.codec.frame`` of its event's derived message, the event log is append-only, and a node
leaves the surface only by a later ``replace`` event. With no ``replace`` since, the nodes at or
before that seq still stored are exactly that surface (one aggregate in the database, like a
FULL request); otherwise the surface is folded again from the log (``SessionLog``). Either way
the rebuilt response is checked against the original's digest before it is sent
(``response_check``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import xxhash

from admission_service.app.commands import (
    AttemptResult,
    EncodedMessages,
    RequestContent,
    Spliced,
)
from admission_service.app.ports import SessionRepository
from admission_service.domain.errors import DomainError, WireFormatError
from admission_service.domain.messages import Message, Tool
from admission_service.domain.stored import StoredResponse
from admission_service.domain.surface import SessionLog
from admission_service.domain.wire import MessagesEnd, WindowNeeded, WireFormat, render_body
from admission_service.storage import codec


@runtime_checkable
class SplitEncoder(Protocol):
    """Encodes an attempt's response as ``splice(head(result), Spliced.of(result))``."""

    def __call__(self, result: AttemptResult) -> bytes: ...

    def head(self, result: AttemptResult) -> bytes:
        """The response without what ``Spliced`` holds: the effective prompt's text when it is
        the admission's, the derived request's tools, rendered body and message frames."""
        ...

    def splice(self, head: bytes, parts: Spliced) -> bytes:
        """``head`` followed by the spliced ``parts``: the whole response, the frames copied
        once."""
        ...


class ReplayMismatch(DomainError):
    """A rebuilt response differs from the stored digest: a bug, never sent (INTERNAL)."""


# How a recipe checks that a rebuilt response is the one first sent. XXH3's 128 bits: the check
# is computed before the commit, under the session's lock, and takes 0.08 ms for a 4.6 MB
# response where SHA-256 took 2.7 (S7). A checksum is enough: it catches a rebuild that differs
# by a bug or a changed row, and nobody chooses both sides of the comparison (the original and
# its rebuild derive from the same stored log), so no collision can be planted. Recipes stored
# before it hold SHA-256 and are checked with it. What a caller verifies, a stream's SHA-256,
# is computed by the edge (api/streaming.py).
CHECK_ALGORITHM = "xxh3_128"
_CHECKS: dict[str, Callable[[bytes], bytes]] = {
    "xxh3_128": xxhash.xxh3_128_digest,
    "sha256": lambda payload: hashlib.sha256(payload).digest(),
}


def response_check(payload: bytes, algorithm: str = CHECK_ALGORITHM) -> bytes:
    """The digest a recipe keeps of ``payload``, the whole response."""
    return _CHECKS[algorithm](payload)


@dataclass(frozen=True, slots=True)
class Recipe:
    """Where a stored response's derived request comes from."""

    through_seq: int  # the last event seq the request was derived after (-1: none)
    first_message_index: int
    wire_format: str
    in_history: bool
    provider: str
    admission_id: str  # whose stored tool set the rendered body lists
    response_check: bytes  # response_check(the whole response, check_algorithm)
    # What the response carried: the messages (its frames), the rendered body or both.
    # Recipes stored before the choice existed carried both.
    content: RequestContent = RequestContent.BOTH
    # An Anthropic Messages DELTA body: how the held body's list ended (its rendering goes on
    # from there, with the held messages from ``continues.window`` if it needed them).
    continues: MessagesEnd | None = None
    # The response carried typed tools: the admission's, spliced after the head. Recipes
    # stored before kept them in the head.
    tools: bool = False
    # The effective prompt's text is the admission's rendered prompt, spliced after the head.
    prompt: bool = False
    # Recipes stored before XXH3 (CHECK_ALGORITHM) hold the response's SHA-256.
    check_algorithm: str = "sha256"

    def to_json(self) -> bytes:
        return codec.dumps(
            {
                "through_seq": self.through_seq,
                "first_message_index": self.first_message_index,
                "wire_format": self.wire_format,
                "in_history": self.in_history,
                "provider": self.provider,
                "admission_id": self.admission_id,
                f"response_{self.check_algorithm}": self.response_check.hex(),
                "content": self.content.value,
                **(
                    {"continues": codec.messages_end_to_json(self.continues)}
                    if self.continues
                    else {}
                ),
                **({"tools": True} if self.tools else {}),
                **({"prompt": True} if self.prompt else {}),
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> Recipe:
        value = codec.loads(data)
        algorithm = next(name for name in _CHECKS if f"response_{name}" in value)
        return cls(
            value["through_seq"],
            value["first_message_index"],
            value["wire_format"],
            value["in_history"],
            value["provider"],
            value["admission_id"],
            bytes.fromhex(value[f"response_{algorithm}"]),
            RequestContent(value.get("content", RequestContent.BOTH.value)),
            codec.messages_end_from_json(value["continues"]) if "continues" in value else None,
            value.get("tools", False),
            value.get("prompt", False),
            algorithm,
        )


@dataclass(frozen=True, slots=True)
class StoredForm:
    """What a response is stored as: the whole ``response``, or its head and the ``recipe``
    that rebuilds the rest."""

    response: bytes
    recipe: bytes | None = None


def encoding_size(result: object) -> int:
    """The bytes encoding ``result`` copies and hashes: a derived request's stored frames and
    rendered body (0 for a result that holds none)."""
    if not isinstance(result, AttemptResult):
        return 0
    request = result.request
    messages = request.messages
    return len(request.body) + (messages.size if isinstance(messages, EncodedMessages) else 0)


def stored_form(result: object, payload: bytes, encode: object, through_seq: int) -> StoredForm:
    """What to store for ``payload`` (the encoded ``result``): the head and its recipe when the
    response carries a derived request made of stored frames, else the payload itself."""
    if not (
        isinstance(result, AttemptResult)
        and isinstance(encode, SplitEncoder)
        and isinstance(result.request.messages, EncodedMessages)
    ):
        return StoredForm(payload)
    request = result.request
    recipe = Recipe(
        through_seq,
        request.first_message_index,
        request.wire_format.value,
        result.route.in_history,
        result.route.provider,
        result.admission_id,
        response_check(payload),
        request.content,
        request.continues,
        bool(request.tools),
        result.prompt_is_admitted,
        CHECK_ALGORITHM,
    )
    return StoredForm(encode.head(result), recipe.to_json())


async def replayed(store: SessionRepository, stored: StoredResponse, encode: object) -> bytes:
    """The bytes of the stored response, its derived request rebuilt from the surface."""
    if stored.derived_request is None:
        return stored.response
    assert isinstance(encode, SplitEncoder), "a split record is replayed by a split encoder"
    recipe = Recipe.from_json(stored.derived_request)
    frames = await _frames_as_of(store, recipe, recipe.first_message_index)
    content = recipe.content
    rendering = content.body and WireFormat(recipe.wire_format) is not WireFormat.NEUTRAL
    admitted = (
        await store.admission(recipe.admission_id)
        if rendering or recipe.tools or recipe.prompt
        else None
    )
    tools = admitted.tools if admitted is not None else ()
    body = await _rendered(store, recipe, frames, tools) if rendering else b""
    # An older record's head holds the prompt's text and the tools.
    parts = Spliced(
        admitted.rendered_prompt if admitted is not None and recipe.prompt else "",
        tools if recipe.tools else (),
        body,
        (frames,) if content.messages else (),
    )
    payload = encode.splice(stored.response, parts)  # the frames' one copy
    if response_check(payload, recipe.check_algorithm) != recipe.response_check:
        raise ReplayMismatch("a replayed response differs from the one first sent")
    return payload


async def _frames_as_of(store: SessionRepository, recipe: Recipe, first: int) -> bytes:
    """The frames of the request's messages from index ``first`` on, as it was derived."""
    frames = await store.frames_as_of(recipe.through_seq, first)
    if frames is None:  # a node was shadowed since: fold the log up to the recipe's seq
        rows = await store.events_after(-1, recipe.through_seq + 1)
        log = SessionLog(row.event() for row in rows)
        messages = log.derived_messages()[first:]
        frames = b"".join(codec.frame(message) for message in messages)
    return frames


async def _rendered(
    store: SessionRepository, recipe: Recipe, frames: bytes, tools: Sequence[Tool]
) -> bytes:
    """The provider body as the derivation rendered it (empty where it could not: the stored head
    carries that error), with the admission's ``tools``; an Anthropic Messages DELTA again with
    the held messages it needed."""
    wire = WireFormat(recipe.wire_format)
    first = recipe.first_message_index

    def rendered(window: Sequence[Message] | None = None) -> bytes:
        return render_body(
            EncodedMessages(frames),
            wire,
            in_history=recipe.in_history,
            provider=recipe.provider,
            tools=tools,
            offset=first,
            continues=recipe.continues,
            window=window,
        ).body

    try:
        try:
            return rendered()
        except WindowNeeded as needed:
            held = EncodedMessages(await _frames_as_of(store, recipe, needed.first))
            return rendered(held[: first - needed.first])
    except WireFormatError:
        return b""
