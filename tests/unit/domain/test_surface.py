"""Surface operations and their invariants (SPEC §1; reference §1.3)."""

from __future__ import annotations

import pytest
from admission_service.domain.errors import SurfaceViolation
from admission_service.domain.events import Append, Event, EventKind, Replace, system_event
from admission_service.domain.messages import Message, Role, Text
from admission_service.domain.projection import SystemNode
from admission_service.domain.series import ContextLog, RequestContext
from admission_service.domain.surface import SessionLog, effective_prompt, fold_system_nodes

from .sim import user


def u(
    seq: int, text: str = "x", op: Append | Replace | None = None, sources: tuple[int, ...] = ()
) -> Event:
    return Event(seq, EventKind.USER_MESSAGE, 0, 0, op or Append(), sources, user(text))


def base() -> SessionLog:
    return SessionLog([system_event(0, "A", Append(), turn=0, step=0), u(1), u(2), u(3)])


def test_replace_puts_the_new_node_in_place_and_bumps_the_generation() -> None:
    log = base()
    log.append(Event(4, EventKind.COMPACTION_SUMMARY, 0, 0, Replace(1, 2), (1, 2), user("sum")))
    assert log.nodes == [0, 4, 3]
    assert log.replace_generation == 1
    # Surface order is not seq order: a head rewrite has a larger seq than later nodes.
    log.append(system_event(5, "B", Replace(0, 0), turn=0, step=0))
    assert log.nodes == [5, 4, 3]
    assert [m.text for m in log.derived_messages()] == ["B", "sum", "x"]


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (u(5), "not the next seq"),
        (u(6, op=Replace(1, 5), sources=(1,)), "not the next seq"),
        (u(4, op=Replace(1, 0), sources=(1,)), "reversed"),
        (u(4, op=Replace(2, 1), sources=(1, 2)), "reversed"),
        (u(4, op=Replace(1, 2), sources=(1,)), "does not cite"),
        (u(4, op=Replace(1, 2), sources=()), "invalid source"),
        (u(4, op=Replace(1, 2), sources=(1, 1, 2)), "invalid source"),
        (u(4, op=Replace(1, 2), sources=(1, 2, 7)), "invalid source"),
        (u(4, op=Replace(0, 1), sources=(0, 1)), "system head"),
        (u(4, op=Replace(0, 0), sources=(0,)), "system head"),
        (u(4, sources=(1,)), "cites source"),
        (Event(4, EventKind.USER_MESSAGE, message=user("x")), "no surface operation"),
        (
            Event(
                4,
                EventKind.REQUEST_CONTEXT,
                op=Append(),
                context=ContextLog(4, RequestContext("p", "m", 1, False)),
            ),
            "carries a surface operation",
        ),
        (
            Event(
                4,
                EventKind.ASSISTANT_MESSAGE,
                0,
                0,
                Replace(1, 1),
                (1,),
                Message(Role.ASSISTANT, (Text("x"),)),
            ),
            "assistant",
        ),
        (u(4, op=Replace(1, 5), sources=(1, 2, 3)), "later event"),
    ],
)
def test_invalid_operations_are_refused(event: Event, message: str) -> None:
    log = base()
    with pytest.raises(SurfaceViolation, match=message):
        log.append(event)
    assert log.nodes == [0, 1, 2, 3] and log.next_seq == 4


def test_replace_of_a_shadowed_node_is_refused() -> None:
    log = base()
    log.append(Event(4, EventKind.COMPACTION_SUMMARY, 0, 0, Replace(1, 2), (1, 2), user("s")))
    with pytest.raises(SurfaceViolation, match="not on the surface"):
        log.append(u(5, op=Replace(1, 1), sources=(1,)))


def test_head_protection_allows_a_single_node_system_replace() -> None:
    log = base()
    log.append(system_event(4, "B", Replace(0, 0), turn=0, step=0))
    with pytest.raises(SurfaceViolation, match="system head"):
        log.append(
            Event(
                5,
                EventKind.SYSTEM_MESSAGE,
                0,
                0,
                Replace(4, 1),
                (4, 1),
                Message(Role.SYSTEM, (Text("C"),)),
            )
        )


def test_extra_citations_are_allowed() -> None:
    log = base()
    log.append(Event(4, EventKind.COMPACTION_SUMMARY, 0, 0, Replace(1, 1), (0, 1), user("s")))
    assert log.nodes == [0, 4, 2, 3]


def test_empty_system_and_assistant_nodes_derive_to_nothing() -> None:
    log = SessionLog(
        [
            system_event(0, "", Append(), turn=0, step=0),
            u(1),
            Event(2, EventKind.ASSISTANT_MESSAGE, 0, 0, Append(), (), Message(Role.ASSISTANT, ())),
        ]
    )
    assert [m.text for m in log.derived_messages()] == ["x"]
    assert log.effective_prompt().location == "none"


def test_effective_prompt_location() -> None:
    log = SessionLog([system_event(0, "A", Append(), turn=0, step=0), u(1)])
    assert log.effective_prompt().location == "head"
    log.append(system_event(2, "B", Append(), turn=0, step=0))
    assert (log.effective_prompt().text, log.effective_prompt().seq) == ("B", 2)
    assert log.effective_prompt().location == "in_history"
    assert effective_prompt(()).seq is None


def test_an_attempts_system_commits_fold_onto_the_system_nodes() -> None:
    nodes = (SystemNode(0, "A"), SystemNode(3, "B"))
    events = [
        system_event(5, "B2", Replace(3, 3), turn=1, step=1),
        system_event(6, "C", Append(), turn=1, step=1),
    ]
    folded = fold_system_nodes(nodes, events)
    assert folded == (SystemNode(0, "A"), SystemNode(5, "B2"), SystemNode(6, "C"))
    log = SessionLog(
        [
            system_event(0, "A", Append(), turn=1, step=1),
            system_event(1, "B", Append(), turn=1, step=1),
            system_event(2, "B2", Replace(1, 1), turn=1, step=1),
        ]
    )
    assert fold_system_nodes(log.system_nodes()[:1], log.events[1:]) == log.system_nodes()
