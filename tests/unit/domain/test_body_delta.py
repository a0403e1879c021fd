"""DELTA bodies (issue 23, item 3): for every format whose body is a list, the held body rebuilt
with a DELTA's items is the FULL body, byte for byte.

An Anthropic Messages DELTA is not an append: user content after a held list that ends in a user
item merges into it (and moves the system items that trail it), an assistant message after an
assistant item merges into it. Its body carries the items from the first that differs and how
many held items they replace; the caller keeps the rest (``rebuilt`` below, what both kits do).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest
from admission_service.domain.errors import WireFormatError
from admission_service.domain.messages import (
    Image,
    Message,
    Reasoning,
    RedactedReasoning,
    Role,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    system_message,
)
from admission_service.domain.wire import (
    MessagesEnd,
    Rendered,
    WindowNeeded,
    WireFormat,
    continued,
    render_body,
)
from hypothesis import given
from hypothesis import strategies as st

ANTHROPIC = WireFormat.ANTHROPIC_MESSAGES
ITEMS = {
    WireFormat.ANTHROPIC_MESSAGES: "messages",
    WireFormat.OPENAI_CHAT: "messages",
    WireFormat.OPENAI_RESPONSES: "input",
}
Json = dict[str, Any]


def full(
    messages: Sequence[Message], wire: WireFormat = ANTHROPIC, provider: str = "anthropic"
) -> Rendered:
    return render_body(messages, wire, in_history=True, provider=provider)


def delta(
    messages: Sequence[Message],
    held: int,
    continues: MessagesEnd | None,
    wire: WireFormat = ANTHROPIC,
    provider: str = "anthropic",
) -> tuple[Rendered, bool]:
    """The DELTA after the first ``held`` messages, as the service makes it: the new messages
    alone, or again with the held window when they change the held list's end. Whether the
    window was needed."""
    new = messages[held:]
    try:
        rendered = render_body(
            new, wire, in_history=True, provider=provider, offset=held, continues=continues
        )
        return rendered, False
    except WindowNeeded as needed:
        first = needed.first
    assert continues is not None and first == continues.window
    rendered = render_body(
        new,
        wire,
        in_history=True,
        provider=provider,
        offset=held,
        continues=continues,
        window=messages[first:held],
    )
    return rendered, True


def rebuilt(held: Json, part: Json, replaced: int, key: str = "messages") -> Json:
    """The whole body from the held one and a DELTA's (the kits' rule): the held list without its
    last ``replaced`` items, then the DELTA's; the held ``system`` unless the DELTA carries one;
    the other keys the DELTA's."""
    items = held[key]
    assert 0 <= replaced <= len(items)
    whole: Json = {key: items[: len(items) - replaced] + part[key]}
    if "system" in part:
        whole["system"] = part["system"]
    elif "system" in held:
        whole["system"] = held["system"]
    whole.update((name, value) for name, value in part.items() if name not in whole)
    return whole


def dumps(body: Json) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def _index(field: str) -> int:
    match = re.match(r"messages\[(\d+)\]", field)
    assert match is not None
    return int(match.group(1))


# ---- the examples the issue names ---------------------------------------------------------------

A = system_message("A")
B = system_message("B")
CALL = Message(Role.ASSISTANT, (Text("let me look"), ToolCall("c1", "read", '{"p":"a"}')))
RESULT = Message(Role.TOOL, (ToolResult("c1", (Text("file body"),)),))
DONE = Message(Role.ASSISTANT, (Text("done"),))


def user(text: str) -> Message:
    return Message(Role.USER, (Text(text),))


def step(held: list[Message], new: list[Message]) -> tuple[Json, Rendered, bool]:
    """The whole body of ``held + new`` and the DELTA after ``held``, checked to rebuild it."""
    whole = full(held + new)
    first = full(held)
    part, windowed = delta(held + new, len(held), first.end)
    assert (
        dumps(rebuilt(json.loads(first.body_json), json.loads(part.body_json), part.replaced))
        == whole.body_json
    )
    assert part.end == whole.end
    return json.loads(part.body_json), part, windowed


def test_an_assistant_after_a_user_turn_is_an_append_of_the_new_items_alone() -> None:
    body, part, windowed = step([A, user("hi")], [CALL, RESULT, user("go on")])
    assert not windowed and part.replaced == 0
    assert [m["role"] for m in body["messages"]] == ["assistant", "user"]
    assert "system" not in body  # the held body's


def test_user_content_after_a_user_turn_resends_the_merged_item() -> None:
    body, part, windowed = step([A, user("hi")], [user("and this")])
    assert windowed and part.replaced == 1
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "and this"}],
        }
    ]
    assert "system" not in body  # set once, by the head: the held body has it


def test_a_system_update_before_the_last_user_turn_moves_after_new_user_content() -> None:
    held = [A, user("hi"), DONE, B, user("plan")]  # B waits for the next assistant turn
    assert [m["role"] for m in json.loads(full(held).body_json)["messages"]] == [
        "user",
        "assistant",
        "user",
        "system",
    ]
    body, part, windowed = step(held, [user("more")])
    assert windowed and part.replaced == 2
    assert [m["role"] for m in body["messages"]] == ["user", "system"]
    assert body["messages"][1]["content"] == [{"type": "text", "text": "B"}]


def test_a_system_update_trailing_the_held_list_moves_after_new_user_content() -> None:
    held = [A, user("hi"), CALL, RESULT, B]  # B is sent after the tool results' turn
    assert [m["role"] for m in json.loads(full(held).body_json)["messages"]] == [
        "user",
        "assistant",
        "user",
        "system",
    ]
    body, part, windowed = step(held, [user("now plan")])
    assert windowed and part.replaced == 2  # the results' turn, now with the user, then B
    assert [m["role"] for m in body["messages"]] == ["user", "system"]
    # The model's answer then follows B: an append.
    body, part, windowed = step([*held, user("now plan")], [DONE])
    assert (
        not windowed
        and part.replaced == 0
        and body["messages"]
        == [{"role": "assistant", "content": [{"type": "text", "text": "done"}]}]
    )


def test_an_assistant_after_an_assistant_merges_into_it() -> None:
    body, part, windowed = step([A, user("hi"), DONE], [Message(Role.ASSISTANT, (Text("more"),))])
    assert windowed and part.replaced == 1
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "done"},
        {"type": "text", "text": "more"},
    ]


def test_the_new_items_follow_system_items_the_held_list_ends_with() -> None:
    held = [A, user("hi"), DONE, user("next"), B]
    body, part, windowed = step(held, [CALL])
    assert not windowed and part.replaced == 0
    assert [m["role"] for m in body["messages"]] == ["assistant"]


def test_a_held_list_with_no_item_is_rendered_again_with_its_head() -> None:
    # Only the head: nothing to follow, so the DELTA renders the held messages again; the
    # top-level system is the held body's.
    body, part, windowed = step([A], [user("hi")])
    assert windowed and part.replaced == 0 and "system" not in body
    # No head yet: a system message before any item becomes the top-level system.
    body, part, windowed = step([Message(Role.USER, (Text(""),))], [A, user("hi")])
    assert windowed and body["system"] == "A"


def test_a_refusal_is_the_full_requests() -> None:
    held = [A, user("hi"), DONE]
    new = [B, DONE]  # a system update with no user turn before the assistant
    with pytest.raises(WireFormatError) as whole:
        full(held + new)
    with pytest.raises(WireFormatError) as part:
        delta(held + new, len(held), full(held).end)
    assert str(part.value) == str(whole.value)


def test_a_delta_of_an_anthropic_body_needs_the_held_end() -> None:
    with pytest.raises(ValueError, match="continues"):
        render_body([user("x")], ANTHROPIC, in_history=True, offset=2)


# ---- random sessions -------------------------------------------------------------------------

texts = st.sampled_from(["", "a", "b", "long text"])
calls = st.sampled_from(["c1", "c2"])
user_messages = st.builds(
    lambda parts: Message(Role.USER, tuple(parts)),
    st.lists(
        st.one_of(st.builds(Text, texts), st.just(Image("https://x/y.png", "image/png"))),
        max_size=2,
    ),
)
assistant_blocks = st.one_of(
    st.builds(Text, texts),
    st.builds(Reasoning, st.just("think"), st.sampled_from(["", "sig"])),
    st.builds(RedactedReasoning, st.sampled_from(["anthropic", "other"]), st.just("opaque")),
    st.builds(ToolCall, calls, st.just("read"), st.just('{"p":"a"}')),
)
assistant_messages = st.builds(
    lambda parts: Message(Role.ASSISTANT, tuple(parts)), st.lists(assistant_blocks, max_size=3)
)
tool_messages = st.builds(
    lambda results: Message(Role.TOOL, tuple(results)),
    st.lists(
        st.builds(
            ToolResult,
            calls,
            st.lists(st.builds(Text, texts), max_size=1).map(tuple),
            st.booleans(),
        ),
        min_size=1,
        max_size=2,
    ),
)
system_messages = st.builds(system_message, st.sampled_from(["A", "B", "C"]))
any_message = st.one_of(user_messages, assistant_messages, tool_messages, system_messages)
sessions = st.lists(any_message, max_size=14)
# Request boundaries: a few, or (half the time) one after every message.
cuts = st.one_of(st.lists(st.integers(0, 14), max_size=5), st.just(list(range(15))))


def _requests(messages: list[Message], points: list[int]) -> list[int]:
    """The request boundaries: each request is the messages before one, the last the whole."""
    ends = sorted({min(point, len(messages)) for point in points} | {len(messages)})
    return [end for end in ends if end > 0]


def _outcome(render: Any, *args: Any) -> Rendered | str:
    try:
        result = render(*args)
    except WireFormatError as error:
        return str(error)
    return result if isinstance(result, Rendered) else result[0]


@given(sessions, cuts)
def test_a_rebuilt_anthropic_body_is_the_full_body(
    messages: list[Message], points: list[int]
) -> None:
    """Request after request of a random session (user, assistant, tool and in-history system
    messages, some of them empty, some merged by the format): each DELTA on the previous
    request's body rebuilds the FULL body byte for byte, ends the list as the FULL body does,
    reports the FULL body's omissions of the new messages, and refuses what the FULL body
    refuses, with the same error."""
    held: Rendered | None = None
    held_count = 0
    for end in _requests(messages, points):
        whole = _outcome(full, messages[:end])
        if held is None:
            held, held_count = (whole, end) if isinstance(whole, Rendered) else (None, 0)
            continue
        part = _outcome(delta, messages[:end], held_count, held.end)
        if isinstance(whole, str):
            assert part == whole
            continue  # the request is refused; the caller still holds the previous one
        assert isinstance(part, Rendered), part
        body = rebuilt(json.loads(held.body_json), json.loads(part.body_json), part.replaced)
        assert dumps(body) == whole.body_json
        assert part.end == whole.end
        assert part.omitted == tuple(o for o in whole.omitted if _index(o.field) >= held_count)
        held, held_count = whole, end


tool_results_text = st.builds(
    lambda results: Message(Role.TOOL, tuple(results)),
    st.lists(
        st.builds(ToolResult, calls, st.lists(st.builds(Text, texts), max_size=1).map(tuple)),
        min_size=1,
        max_size=2,
    ),
)
openai_sessions = st.lists(
    st.one_of(user_messages, assistant_messages, tool_results_text, system_messages), max_size=14
)


@given(
    openai_sessions, cuts, st.sampled_from([WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES])
)
def test_openai_deltas_still_append(
    messages: list[Message], points: list[int], wire: WireFormat
) -> None:
    """Chat and Responses bodies extend by appending: a DELTA replaces nothing, and the held
    body's items followed by its items are the FULL body's."""
    messages = [m for m in messages if m.role is not Role.SYSTEM or m.text]
    held: Json | None = None
    held_count = 0
    for end in _requests(messages, points):
        whole = full(messages[:end], wire, "deepseek")
        if held is not None:
            part = render_body(
                messages[held_count:end],
                wire,
                in_history=True,
                provider="deepseek",
                offset=held_count,
            )
            assert part.replaced == 0 and part.end is None
            body = rebuilt(held, json.loads(part.body_json), 0, ITEMS[wire])
            assert dumps(body) == whole.body_json
        held, held_count = json.loads(whole.body_json), end


# ---- a body continued from the held one (what a worker that holds a session's body sends) ----

TOOLS = (Tool("read", "reads a file", '{"type":"object","properties":{"p":{"type":"string"}}}'),)


def _continued_chain(
    messages: list[Message], points: list[int], wire: WireFormat, provider: str, tools: bool
) -> int:
    """Request after request, each body made from the previous *made* body (not a fresh one)
    and the DELTA after it: byte for byte the FULL body, with its end, omissions and layout.
    How many bodies were continued."""
    tool_set = TOOLS if tools else ()
    held: Rendered | None = None
    held_count, made = 0, 0
    for end in _requests(messages, points):
        whole = _outcome(
            lambda m: render_body(m, wire, in_history=True, provider=provider, tools=tool_set),
            messages[:end],
        )
        if held is None:
            held, held_count = (whole, end) if isinstance(whole, Rendered) else (None, 0)
            continue
        if wire is ANTHROPIC:
            part = _outcome(delta, messages[:end], held_count, held.end)
        else:
            part = _outcome(
                lambda m, at: render_body(m, wire, in_history=True, provider=provider, offset=at),
                messages[held_count:end],
                held_count,
            )
        if isinstance(whole, str):
            assert part == whole
            continue
        assert isinstance(part, Rendered), part
        body = continued(held, part, wire, tool_set)
        assert body.body == whole.body
        assert (body.end, body.omitted, body.layout) == (whole.end, whole.omitted, whole.layout)
        held, held_count = body, end
        made += 1
    return made


@given(sessions, cuts, st.booleans())
def test_an_anthropic_body_continued_from_the_held_one_is_the_full_body(
    messages: list[Message], points: list[int], tools: bool
) -> None:
    """The held body (itself continued, request after request) without the items the DELTA
    replaces, then the DELTA's items, the held ``system`` unless the DELTA carries one, then
    the tools: the FULL body byte for byte, and where its items lie is where the FULL body's
    do (so the next request continues it in turn)."""
    _continued_chain(messages, points, ANTHROPIC, "anthropic", tools)


@given(
    openai_sessions,
    cuts,
    st.sampled_from([WireFormat.OPENAI_CHAT, WireFormat.OPENAI_RESPONSES]),
    st.booleans(),
)
def test_an_openai_body_continued_from_the_held_one_is_the_full_body(
    messages: list[Message], points: list[int], wire: WireFormat, tools: bool
) -> None:
    messages = [m for m in messages if m.role is not Role.SYSTEM or m.text]
    _continued_chain(messages, points, wire, "deepseek", tools)


def test_the_examples_continue_from_their_held_bodies() -> None:
    """The named cases (a merge into the held user item, trailing system items moved, an
    assistant merged into an assistant, a held list with no item) continue too."""
    cases = [
        ([user("q"), CALL, RESULT], [DONE]),
        ([user("q")], [user("more")]),
        ([user("q"), A, user("r")], [user("s"), DONE]),
        ([user("q"), DONE, user("r"), A, B], [user("s")]),
        ([user("q"), Message(Role.ASSISTANT, (Text("a"),))], [DONE]),
        ([A], [user("q"), DONE]),
    ]
    for held, new in cases:
        messages = held + new
        assert _continued_chain(messages, [len(held)], ANTHROPIC, "anthropic", True) == 1
