"""A worker's rendered provider bodies of its sessions' last large requests, so the next FULL
body of a long session is made from the held one and only the messages after it.

A harness on a provider format posts the whole body every step, and a session that reaches a
million tokens has a body of megabytes. Rendering it again every step (decoding every stored
frame, building the provider's JSON, writing it) was most of what a streamed FULL Admit of a
body cost beyond its transport (S7). But the previous request's messages are the first ones of
this request whenever nothing before its end was shadowed since, and its body is then this
body's beginning: ``wire.continued`` makes the whole body from the held one and the DELTA after
it, byte for byte the body rendered from scratch (``tests/unit/domain/test_body_delta.py``), and
the read fetches only the frames after the held request (``FramesQuery.body_held``).

What keeps a held body honest is what it is the body *of*: the digest of the derived request it
was rendered for (``RequestPrefix.digest``, SHA-256 over every frame, in order), its route's
provider and whether the route is in-history (the only inputs of a rendering besides the
messages; the tools are spliced in each time). The domain continues it only when the session's
previous request has exactly that digest and is intact (``FramesQuery.plan``), so another
worker's writes, a replacement, a delete and a new session with the same id are all a miss,
never a wrong body. A call leaves its body only once it commits (``SessionBodies.committed``): a
validate-only or rolled-back call's body is of a request the session never made.

Bounded in bytes, least recently used session first out; a body smaller than ``HELD_BODY_MIN``
renders in less time than holding it saves, and one larger than the bound is not held.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from admission_service.domain.series import Route
from admission_service.domain.wire import Rendered, WireFormat

# The smallest body worth holding: a body of 64 KiB renders in tens of microseconds.
HELD_BODY_MIN = 64 * 1024

Key = tuple[str, str, WireFormat]  # tenant, session id, wire format


@dataclass(frozen=True, slots=True)
class HeldBody:
    """The body of the derived request whose digest is ``digest``, rendered on a route of
    ``provider`` that is ``in_history`` or not."""

    digest: bytes
    provider: str
    in_history: bool
    rendered: Rendered


class HeldBodies:
    """A worker's ``HeldBody`` per session and wire format, bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.used = 0  # bodies continued instead of rendered again (pas_held_bodies_used_total)
        self._bodies: OrderedDict[Key, HeldBody] = OrderedDict()

    def __len__(self) -> int:
        return len(self._bodies)

    def of(self, tenant: str, session_id: str) -> SessionBodies:
        return SessionBodies(self, tenant, session_id)

    def get(self, key: Key, route: Route) -> HeldBody | None:
        body = self._bodies.get(key)
        if body is None or (body.provider, body.in_history) != (route.provider, route.in_history):
            return None
        self._bodies.move_to_end(key)
        return body

    def peek(self, key: Key) -> HeldBody | None:
        return self._bodies.get(key)

    def put(self, key: Key, body: HeldBody) -> None:
        self.drop(key)
        size = len(body.rendered.body)
        if size < HELD_BODY_MIN or size > self.max_bytes:
            return
        self._bodies[key] = body
        self.bytes += size
        while self.bytes > self.max_bytes:
            self.drop(next(iter(self._bodies)))

    def drop(self, key: Key) -> None:
        body = self._bodies.pop(key, None)
        if body is not None:
            self.bytes -= len(body.rendered.body)


class SessionBodies:
    """One call's view of the held bodies of its session: the one it may continue, and the one
    it leaves for the next call, kept only once the call commits."""

    def __init__(self, bodies: HeldBodies, tenant: str, session_id: str) -> None:
        self._bodies = bodies
        self._tenant, self._session_id = tenant, session_id
        self._left: dict[WireFormat, HeldBody] = {}

    def held(self, wire: WireFormat, route: Route) -> HeldBody | None:
        """The body this worker holds of the session's last request in ``wire`` on a route like
        ``route`` (its digest says which request: ``FramesQuery.plan`` checks it)."""
        return self._bodies.get((self._tenant, self._session_id, wire), route)

    def leave(self, wire: WireFormat, route: Route, digest: bytes, rendered: Rendered) -> None:
        """Hold ``rendered``, the body of the request ``digest`` on ``route``, once the call
        commits (if it is worth holding and fits: ``HeldBodies.put``)."""
        self._left[wire] = HeldBody(digest, route.provider, route.in_history, rendered)

    def continued(self) -> None:
        """Count a body made from a held one."""
        self._bodies.used += 1

    def committed(self) -> None:
        """The call committed: the bodies it left are of the session's last request, and those
        of an earlier request (in another format) will never be continued again."""
        for body in self._left.values():
            for wire in WireFormat:
                key = (self._tenant, self._session_id, wire)
                if (other := self._bodies.peek(key)) is not None and other.digest != body.digest:
                    self._bodies.drop(key)
        for wire, body in self._left.items():
            self._bodies.put((self._tenant, self._session_id, wire), body)
        self._left.clear()
