"""The shared fixtures of the windowed prompt fold: ``tests/fixtures/prompt_fold/cases.json``.

Each case is a window of events (``promptadmission.v1.Event`` in protobuf JSON) and the fold's
state after each of them. The Python client (``tests/clients/test_prompt_fold.py``), the
TypeScript client (``clients/typescript/test/promptFold.test.ts``) and the service's own fold
(``tests/unit/domain/test_prompt_fold_fixtures.py``) are checked against the same file, so the
three cannot drift. The cases are the reference harness's (``inspectSystemPrompt`` spec) and
sessions driven through the domain's own transitions, each also cut into later windows.

The expected states are computed by the service's fold (``domain/prompt_fold.py``), whose
reference cases ``tests/unit/domain/test_prompt_fold.py`` pins by hand. Regenerate after a
deliberate change with ``.venv/bin/python -m tests.prompt_fold_fixtures``; a test fails while
the file differs from what this module produces.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from admission_service.api.convert import event_to_proto
from admission_service.app.commands import EventView
from admission_service.domain.errors import SummaryNotSmaller
from admission_service.domain.events import Append, Event, EventKind, Replace, system_event
from admission_service.domain.messages import Message, Role, Text, user_text
from admission_service.domain.prompt_fold import PromptFoldState, inspect_system_prompt
from google.protobuf import json_format

from tests.unit.domain.sim import CAPABLE, INCAPABLE, Sim, user

FIXTURE = Path(__file__).parent / "fixtures" / "prompt_fold" / "cases.json"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def time_of(seq: int) -> datetime:
    return EPOCH + timedelta(seconds=seq)


def node_json(node: Any) -> dict[str, Any] | None:
    """A node as the fixtures spell it; any fold's node (the service's or the Python
    client's: they have the same fields)."""
    if node is None:
        return None
    return {
        "seq": node.seq,
        "turn": node.turn,
        "step": node.step,
        "text": node.text,
        "update": node.update,
    }


def state_json(state: Any) -> dict[str, Any] | None:
    """A fold state as the fixtures spell it (times are left out: they are the events'); any
    fold's state (the service's or the Python client's)."""
    if state is None:
        return None
    return {
        "firstSeq": state.first_seq,
        "uncertain": state.uncertain,
        "nodes": [{"position": i.position, "node": node_json(i.node)} for i in state.nodes],
        "replacements": sorted([seq, position] for seq, position in state.replacements.items()),
        "effective": node_json(state.effective),
        "introduced": node_json(state.introduced),
    }


def event_json(event: Event) -> dict[str, Any]:
    proto = event_to_proto(EventView(event, time_of(event.seq)))
    return json_format.MessageToDict(proto)


def case(name: str, events: Sequence[Event]) -> dict[str, Any]:
    states = []
    state: PromptFoldState | None = None
    for event in events:
        state = inspect_system_prompt(state, event, time_of(event.seq))
        states.append(state_json(state))
    return {"name": name, "events": [event_json(e) for e in events], "states": states}


# ---- the reference harness's cases --------------------------------------------------------


def system(seq: int, text: str, replaces: int | None = None) -> Event:
    op = Append() if replaces is None else Replace(replaces, replaces)
    return system_event(seq, text, op, turn=1, step=seq)


def summary(seq: int, start: int, end: int) -> Event:
    return Event(
        seq,
        EventKind.COMPACTION_SUMMARY,
        1,
        seq,
        Replace(start, end),
        (start, end),
        user_text("summary"),
    )


def multi_block(seq: int) -> Event:
    message = Message(Role.SYSTEM, (Text("A"), Text("B")))
    return Event(seq, EventKind.SYSTEM_MESSAGE, 1, seq, Append(), (), message)


def reference_cases() -> Iterable[dict[str, Any]]:
    prefix = [system(1, "A"), system(3, "B"), system(5, "A2", 1)]
    tail = [system(6, "C", 3), system(7, "D", 5)]
    yield case("unknown replacement order: the tail window alone", tail)
    yield case("unknown replacement order: resolved by replaying the prefix", prefix + tail)
    yield case(
        "compaction shadows B and restores A",
        [system(1, "A"), system(4, "B"), summary(7, 3, 5), summary(8, 7, 7)],
    )
    yield case(
        "surface order across chained replacements with reversed endpoints",
        [
            system(1, "A"),
            system(4, "B"),
            system(6, "C"),
            system(8, "new A", 1),
            summary(9, 3, 5),
            summary(10, 9, 6),
        ],
    )
    yield case(
        "later non-empty nodes win over head rewrites; empty tails are ignored",
        [system(1, "A"), system(3, "B"), system(5, "head", 1), system(6, "", 3), system(7, "", 5)],
    )
    yield case(
        "no unloaded head after a cross-window replacement", [system(8, "B"), summary(12, 5, 9)]
    )
    yield case("a replacement alone in its window", [summary(12, 5, 9)])
    yield case(
        "shadowed replacement endpoints are dropped",
        [system(1, "A"), *(system(seq, "C" if seq > 2 else "B", seq - 1) for seq in range(2, 12))],
    )
    yield case("text blocks are joined", [multi_block(1)])
    yield case("an empty initial node is no prompt", [system(2, "")])
    yield case(
        "ordinary appends are not folded",
        [
            Event(0, EventKind.USER_MESSAGE, 1, 0, Append(), (), user_text("hi")),
            system(1, "A"),
            Event(2, EventKind.USER_MESSAGE, 1, 2, Append(), (), user_text("hi")),
            system(3, "B"),
        ],
    )
    yield case(
        "an update after an empty head is an initial prompt, then updates follow",
        [system(1, ""), system(2, "A"), system(3, "B"), system(4, "C", 1)],
    )


# ---- sessions driven through the domain's transitions ---------------------------------------


def session(steps: Callable[[Sim], None]) -> list[Event]:
    sim = Sim()
    steps(sim)
    return list(sim.log.events)


def in_history_updates(sim: Sim) -> None:
    for prompt in ("A", "B", "C"):
        sim.admit(prompt, users=(user("u"),))
        sim.assistant("reply")


def series_and_compaction(sim: Sim) -> None:
    sim.admit("A", users=(user("read main.py"),))
    sim.assistant("main.py starts the server and waits for SIGTERM, then drains the queue.")
    sim.admit("A plan", users=(user("plan the refactor"),))
    sim.assistant("1. extract config 2. add tests 3. split the module into three parts.")
    sim.admit("A plan", users=(user("go ahead"),), starts=True)
    sim.assistant("done with the refactor of the whole module and all of its tests")
    sim.admit("B", users=(user("and now?"),))
    with contextlib.suppress(SummaryNotSmaller):
        sim.compact(0, summary="s")
    sim.admit("B", users=(user("what is left?"),))


def route_changes_and_clear(sim: Sim) -> None:
    sim.admit("A", users=(user("u1"),))
    sim.admit("B", users=(user("u2"),))
    sim.admit("C", INCAPABLE, users=(user("u3"),))
    sim.admit("D", users=(user("u4"),))
    sim.admit("", users=(user("u5"),))
    sim.admit("E", users=(user("u6"),))


SESSIONS: dict[str, Callable[[Sim], None]] = {
    "session: in-history updates A, B, C": in_history_updates,
    "session: a series start, an update and a compaction": series_and_compaction,
    "session: route changes, a clear and a restore": route_changes_and_clear,
}


def session_cases() -> Iterable[dict[str, Any]]:
    for name, steps in SESSIONS.items():
        events = session(steps)
        assert events[0].kind is EventKind.SYSTEM_MESSAGE and CAPABLE.in_history
        yield case(name, events)
        for start in range(3, len(events), 4):
            yield case(f"{name}, window from seq {start}", events[start:])


def cases() -> list[dict[str, Any]]:
    return [*reference_cases(), *session_cases()]


def render() -> str:
    """One case per line, so a change reads as a diff of the cases it touches."""
    lines = ",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases())
    return '{"cases":[\n' + lines + "\n]}\n"


if __name__ == "__main__":
    FIXTURE.write_text(render(), encoding="utf-8")
