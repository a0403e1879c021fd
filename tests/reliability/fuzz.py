"""Hypothesis strategies over the API's request messages, built from their descriptors.

Every field of every request gets hostile values of its wire type: strings with NUL,
astral-plane and combining characters, path and SQL and format-string fragments, and huge
strings (up to several MiB, around the documented limits); negative, zero and overflowing
integers; enum numbers the proto does not define; absurd page sizes; repeated fields empty,
short and over their limits; oneofs with none or one member set. Fields that name something
(session, admission, call ids, plan and page tokens) also draw from ``Pools`` of real values
taken from live sessions (including stale plans and tokens of other sessions), so requests
get past NOT_FOUND into deeper validation. Invalid UTF-8 (lone surrogates) cannot be put in
a protobuf string by a client library; ``test_hostile.py`` sends it as raw bytes instead.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from admission_service.app.page_tokens import PageTokens
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

PROTO = Path(__file__).resolve().parents[2] / "proto/promptadmission/v1/error_reason.proto"
INT64 = (-(2**63), 2**63 - 1)
INT32 = (-(2**31), 2**31 - 1)
MAX_DEPTH = 4

SPECIAL_STRINGS = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "\U0001f600",
    "\U0010ffff",
    "e\u0301",
    "\u202e",
    "../../etc/passwd",
    "'; DROP TABLE sessions; --",
    "%s%n%x",
    "{{model}}",
    "null",
    '{"type":"object"}',
    "{not json",
    "-",
    "a" * 128,
    "a" * 129,
)


def documented_reasons() -> dict[str, str]:
    """reason -> status code name, from the comments of the proto's ErrorReason values."""
    found = re.findall(r"^  // ([A-Z_]+) \(([A-Z_]+)\):", PROTO.read_text(), re.MULTILINE)
    return dict(found)


@dataclass
class Pools:
    """Real values to draw names from, by field name."""

    by_field: dict[str, list[str]] = field(default_factory=dict)

    def add(self, name: str, *values: str) -> None:
        self.by_field.setdefault(name, []).extend(v for v in values if v)


def huge_strings() -> st.SearchStrategy[str]:
    sizes = st.sampled_from([1023, 1024, 65537, 1 << 20, (1 << 20) + 1, 3 << 20])
    units = st.sampled_from(["x", "\x00", "\U0001f600", "\u00e9"])
    return st.builds(lambda unit, size: unit * (size // len(unit.encode())), units, sizes)


def strings(name: str, pools: Pools) -> st.SearchStrategy[str]:
    options = [
        st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40),
        st.sampled_from(SPECIAL_STRINGS),
    ]
    pool = pools.by_field.get(name)
    if pool:
        options.insert(0, st.sampled_from(pool))
    weighted = st.one_of(*options)
    return st.one_of(weighted, weighted, weighted, huge_strings())


def integers(bounds: tuple[int, int]) -> st.SearchStrategy[int]:
    low, high = bounds
    edges = [0, 1, -1, 2, 50, 1000, 1001, 2**31 - 1, -(2**31), 2**53, low, high]
    return st.one_of(
        st.integers(-3, 60),
        st.sampled_from([e for e in edges if low <= e <= high]),
        st.integers(low, high),
    )


def scalar(f: FieldDescriptor, pools: Pools) -> st.SearchStrategy[Any]:
    kind = f.type
    if kind == FieldDescriptor.TYPE_STRING:
        return strings(f.name, pools)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        known = [v.number for v in f.enum_type.values]
        return st.one_of(st.sampled_from(known), integers(INT32))
    if kind in (
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
    ):
        return integers(INT64)
    if kind in (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SFIXED32,
    ):
        return integers(INT32)
    if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return integers((0, 2**64 - 1))
    if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return integers((0, 2**32 - 1))
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    raise AssertionError(f"no strategy for {f.full_name}")


def value(f: FieldDescriptor, pools: Pools, depth: int) -> st.SearchStrategy[Any]:
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        return messages(f.message_type, pools, depth + 1)
    return scalar(f, pools)


def repeated(f: FieldDescriptor, pools: Pools, depth: int) -> st.SearchStrategy[list[Any]]:
    element = value(f, pools, depth)
    if depth >= MAX_DEPTH - 1:
        return st.lists(element, max_size=1)
    # Mostly a few elements; sometimes more than any default limit allows (64 users, 128
    # tools, 256 blocks), of the smallest kind of element so the request stays buildable.
    many = (
        st.integers(60, 300).map(lambda n: [GetMessageClass(f.message_type)()] * n)
        if (f.type == FieldDescriptor.TYPE_MESSAGE)
        else st.lists(scalar(f, pools), min_size=60, max_size=70)
    )
    return st.one_of(st.lists(element, max_size=3), st.lists(element, max_size=3), many)


def _is_map(f: FieldDescriptor) -> bool:
    return f.type == FieldDescriptor.TYPE_MESSAGE and bool(f.message_type.GetOptions().map_entry)


def messages(
    descriptor: Descriptor, pools: Pools, depth: int = 0, templates: tuple[Message, ...] = ()
) -> st.SearchStrategy[Message]:
    """Messages of ``descriptor``: from scratch, or (half the time, when ``templates`` are
    given) a valid request with some of its fields replaced by hostile values."""
    cls = GetMessageClass(descriptor)
    if depth >= MAX_DEPTH:
        return st.just(cls())
    groups = [o for o in descriptor.oneofs if len(o.fields) > 1]
    grouped = {f.name for o in groups for f in o.fields}
    singles = [f for f in descriptor.fields if f.name not in grouped]

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = cls()
        chosen = list(singles)
        for group in groups:
            member = draw(st.sampled_from([None, *group.fields]))
            if member is not None:
                chosen.append(member)
        start_valid = bool(templates) and draw(st.booleans())
        if start_valid:
            # A valid request with one or two fields made hostile: it gets past validation
            # often enough to reach the database with odd but legal values.
            message.CopyFrom(draw(st.sampled_from(templates)))
            chosen = draw(st.lists(st.sampled_from(chosen), min_size=1, max_size=2, unique=True))
        for f in chosen:
            if _is_map(f):
                if draw(st.booleans()):
                    entries = draw(
                        st.dictionaries(strings("key", pools), strings("value", pools), max_size=3)
                    )
                    target = getattr(message, f.name)
                    target.clear()
                    target.update(entries)
                continue
            if f.is_repeated:
                if not draw(st.booleans()):
                    continue
                values = draw(st.one_of(st.just([]), repeated(f, pools, depth)))
                target = getattr(message, f.name)
                del target[:]
                if f.type == FieldDescriptor.TYPE_MESSAGE:
                    for v in values:
                        target.add().CopyFrom(v)
                else:
                    target.extend(values)
            elif draw(st.booleans()):
                v = draw(value(f, pools, depth))
                if f.type == FieldDescriptor.TYPE_MESSAGE:
                    getattr(message, f.name).CopyFrom(v)
                else:
                    setattr(message, f.name, v)
        return message

    return build()


# ---- metadata and bytes (issue 13) ----------------------------------------------------------

PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
HOSTILE_AUTHORIZATIONS = (
    "",
    "Bearer",
    "Bearer ",
    "bearer x",
    "Basic dXNlcjpwYXNz",
    "Bearer sha256:" + "0" * 64,
    "Bearer " + "A" * 4000,
    "Bearer a b c",
    "Token abc",
)


def other_metadata() -> st.SearchStrategy[list[tuple[str, str]]]:
    """Metadata besides authorization: request ids, trace context, and made-up keys, each
    plausible or not."""
    keys = st.sampled_from(["x-request-id", "traceparent", "tracestate", "x-fuzz", "grpc-foo"])
    values = st.one_of(
        st.text(PRINTABLE, max_size=64),
        st.sampled_from(
            [
                "00-" + "0" * 32 + "-" + "0" * 16 + "-01",
                "00-" + "f" * 32 + "-" + "f" * 16 + "-ff",
                "ff-xyz",
                "x" * 2000,
            ]
        ),
    )
    return st.lists(st.tuples(keys, values), max_size=3).map(
        lambda pairs: [(k, v) for k, v in pairs if not k.startswith("grpc-")]
    )


def call_metadata(token: str | None) -> st.SearchStrategy[tuple[tuple[str, str], ...]]:
    """A call's metadata: with ``token``, always the valid ``authorization`` (so the call gets
    past authentication); without, none or a hostile one (never valid)."""
    if token is not None:
        authorization = st.just([("authorization", f"Bearer {token}")])
    else:
        hostile = st.one_of(
            st.sampled_from(HOSTILE_AUTHORIZATIONS), st.text(PRINTABLE, max_size=80)
        )
        authorization = st.one_of(
            st.just([]),
            hostile.map(lambda value: [("authorization", value)]),
            st.tuples(hostile, hostile).map(lambda v: [("authorization", x) for x in v]),
        )
    return st.builds(lambda a, b: tuple(a + b), authorization, other_metadata())


def _inflate_varint(data: bytearray, at: int) -> None:
    data[at : at + 1] = b"\xff\xff\xff\xff\x0f"  # a huge length or value


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid request's bytes, damaged the ways a broken client or an attacker damages them:
    bits flipped, bytes replaced, inserted, deleted, duplicated, lengths inflated, the end cut
    off or padded with garbage."""
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        operation = draw(
            st.sampled_from(
                ["flip", "set", "insert", "delete", "duplicate", "inflate", "cut", "pad"]
            )
        )
        if not data and operation not in ("insert", "pad"):
            operation = "pad"
        if operation == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif operation == "set":
            data[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0xC3, 0xED]))
        elif operation == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif operation == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        elif operation == "duplicate":
            end = at + draw(st.integers(1, 64))
            data[at:at] = data[at:end] * draw(st.integers(1, 50))
        elif operation == "inflate":
            _inflate_varint(data, at)
        elif operation == "cut":
            del data[at:]
        else:
            data += draw(st.binary(min_size=1, max_size=64))
    return bytes(data)


# ---- the inspector's HTTP surface (issue 21) --------------------------------------------------

INSPECTOR_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH", "get")
INSPECTOR_SEGMENTS = ("sessions", "chat", "trajectory", "tokens", "", ".", "..", "%2e%2e")
INSPECTOR_QUERY_KEYS = ("page", "view", "before", "after", "q", "page[]", "")
RAW_PATH_FRAGMENTS = ("%00", "%ff", "%ZZ", "%", "%c0%af", "//", "/./", ";x", "#frag", "\\")


def _percent(text: str) -> str:
    # Past a few kilobytes every request line is refused alike (aiohttp's 8 190-byte limit):
    # longer ones only cost the run time.
    return quote(text[:4096], safe="")


def inspector_segments(pools: Pools) -> st.SearchStrategy[str]:
    """One path segment: a known one, a real session id, hostile text percent-encoded, or a
    raw fragment no encoder would make."""
    options = [
        st.sampled_from(INSPECTOR_SEGMENTS),
        strings("session_id", pools).map(_percent),
        st.sampled_from(RAW_PATH_FRAGMENTS),
    ]
    if pools.by_field.get("session_id"):
        options.insert(0, st.sampled_from(pools.by_field["session_id"]).map(_percent))
    return st.one_of(*options)


def inspector_targets(pools: Pools) -> st.SearchStrategy[str]:
    """A request target: ``/``, ``/sessions/<id>[/<view>]`` and whatever lies near them, with
    a query of ``page`` tokens (real ones of other lists and sessions, forged, huge) and
    other keys, repeated or not."""
    tokens = st.one_of(
        strings("page_token", pools),
        st.sampled_from(pools.by_field.get("page_token") or ["AAAA"]),
    ).map(_percent)
    pairs = st.lists(st.tuples(st.sampled_from(INSPECTOR_QUERY_KEYS), tokens), max_size=3)
    query = pairs.map(lambda items: "&".join(f"{key}={value}" for key, value in items))
    path = st.lists(inspector_segments(pools), max_size=4).map(lambda parts: "/" + "/".join(parts))
    absolute = path.map(lambda p: "http://localhost" + p)
    return st.builds(
        lambda p, q, with_query: f"{p}?{q}" if with_query else p,
        st.one_of(path, path, path, absolute),
        query,
        st.booleans(),
    )


def inspector_headers(token: str, port: int) -> st.SearchStrategy[list[tuple[str, str]]]:
    """Headers: a Host that is served or not, the valid token, a hostile Authorization or none,
    bodies announced, and made-up fields of any printable value."""
    hosts = st.sampled_from(
        [
            f"localhost:{port}",
            "127.0.0.1",
            "evil.example",
            "",
            "[::1]",
            "localhost:99999",
            "a" * 300,
        ]
    )
    authorizations = st.one_of(
        st.just(f"Bearer {token}"),
        st.just(f"Bearer {token}"),
        st.sampled_from(HOSTILE_AUTHORIZATIONS),
        st.text(PRINTABLE, max_size=80),
    )
    other = st.tuples(
        st.sampled_from(
            ["Content-Length", "Transfer-Encoding", "Connection", "Expect", "Accept", "X-Fuzz"]
        ),
        st.one_of(
            st.sampled_from(["0", "5", "-1", "chunked", "close", "100-continue", "99999999999"]),
            st.text(PRINTABLE, max_size=40),
        ),
    )
    served = st.just(f"localhost:{port}")
    return st.builds(
        lambda host, authorization, extra: [
            *([("Host", host)] if host is not None else []),
            *([("Authorization", authorization)] if authorization is not None else []),
            *extra,
        ],
        # Mostly a request that gets past the checks to the pages, sometimes one that does not.
        st.one_of(served, served, served, hosts, st.none()),
        st.one_of(authorizations, authorizations, st.none()),
        st.one_of(st.just([]), st.just([]), st.lists(other, max_size=3)),
    )


def inspector_requests(pools: Pools, token: str, port: int) -> st.SearchStrategy[bytes]:
    """Whole HTTP/1.1 requests to the inspector, each on a connection of its own."""

    def render(method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
        head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
        return head.encode("utf-8", "surrogateescape") + b"\r\n" + body

    get = st.just("GET")
    return st.builds(
        render,
        st.one_of(get, get, get, st.sampled_from(INSPECTOR_METHODS)),
        inspector_targets(pools),
        inspector_headers(token, port),
        st.one_of(st.just(b""), st.just(b""), st.binary(max_size=64)),
    )


# ---- page tokens and StepOutput (issue 21) -------------------------------------------------

# Cursors of every shape a paged RPC must refuse when well signed (and the right ones, for
# tokens of one call replayed on another).
WRONG_CURSORS: tuple[dict[str, int | str], ...] = (
    {},
    {"after": "abc"},
    {"after": -(2**63)},
    {"after": 2**63 - 1},
    {"t": "garbage", "i": "a"},
    {"t": 5, "i": "a"},
    {"t": "2026-12-01T00:00:00+00:00", "i": "a\x00b"},
    {"t": "2026-12-01T00:00:00+00:00"},
    {"generation": "0", "next_seq": 1, "start": 0, "end": 1},
    {"generation": 0, "next_seq": 1, "start": 0, "end": 1, "x": 1},
)


def structural_token_mutations(genuine: str) -> list[str]:
    """A genuine token truncated, extended and with one byte flipped in each of its parts
    (version, key id, cursor, tag), re-encoded as a client would."""
    data = base64.urlsafe_b64decode(genuine + "=" * (-len(genuine) % 4))
    variants = [data[:cut] for cut in (1, 5, len(data) // 2, len(data) - 1)] + [data + b"\x00"]
    for at in {0, 1, 5, len(data) // 2, len(data) - 1}:
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        variants.append(bytes(flipped))
    return [base64.urlsafe_b64encode(v).decode().rstrip("=") for v in variants] + [genuine[:-1]]


def forged_page_tokens(secret: bytes, scopes: Sequence[str], genuine: Sequence[str]) -> list[str]:
    """Structure-aware page and plan tokens for every paged RPC: each genuine token mutated,
    and tokens signed with the service's own key (read from its database, as a leaked key
    would give) for each scope with every wrong cursor shape."""
    signed = PageTokens([secret])
    tokens = [t for token in genuine if token for t in structural_token_mutations(token)]
    tokens += [signed.encode(scope, cursor) for scope in scopes for cursor in WRONG_CURSORS]
    return tokens


def step_outputs(pools: Pools, depth: int = 1) -> st.SearchStrategy[api.StepOutput]:
    """AdmitRequest.previous_output: the live admissions and tool call ids (a call id at and
    past its bound), around a fuzzed StepOutput."""
    call_ids = st.one_of(
        st.sampled_from(pools.by_field.get("call_id") or ["c"]),
        st.sampled_from(["", "\x00", "c" * 256, "c" * 257, "\U0001f600" * 256, "c" * 3000]),
        strings("call_id", pools),
    )

    @st.composite
    def build(draw: st.DrawFn) -> api.StepOutput:
        output = api.StepOutput()
        output.MergeFromString(
            draw(messages(api.StepOutput.DESCRIPTOR, pools, depth)).SerializeToString()
        )
        if draw(st.booleans()):
            output.admission_id = draw(strings("admission_id", pools))
        if draw(st.booleans()):
            call = pb.ToolCallBlock(call_id=draw(call_ids), name="search", arguments_json="{}")
            output.assistant.role = pb.MESSAGE_ROLE_ASSISTANT
            output.assistant.content.add().tool_call.CopyFrom(call)
        if draw(st.booleans()):
            result = output.tool_results.add()
            result.call_id = draw(call_ids)
            result.content.add().text.text = "r"
        return output

    return build()
