"""The surface: the ordered surviving nodes of a session, folded from its event log.

``SessionLog`` is the whole log and surface of one session held in memory. It is the reference
model: storage keeps an indexed copy of the same state, and an audit re-derives the surface from
the log alone with this class and compares.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from admission_service.domain.errors import SurfaceViolation
from admission_service.domain.events import SURFACE_KINDS, Append, Event, EventKind, Replace
from admission_service.domain.messages import Message
from admission_service.domain.projection import SystemNode, effective_node, head_of


@dataclass(frozen=True, slots=True)
class EffectivePrompt:
    """The prompt in force: text, the node that supplies it, and where that node sits."""

    text: str
    seq: int | None
    location: str  # "none" | "head" | "in_history"


def effective_prompt(nodes: tuple[SystemNode, ...]) -> EffectivePrompt:
    node = effective_node(nodes)
    if node is None or not node.text:
        head = head_of(nodes)
        return EffectivePrompt("", head.seq if head else None, "none")
    location = "head" if node is nodes[0] else "in_history"
    return EffectivePrompt(node.text, node.seq, location)


def check_surface_op(nodes: list[int], event: Event, kind_of: dict[int, EventKind]) -> None:
    """Raise ``SurfaceViolation`` unless ``event``'s surface operation is valid on ``nodes``."""
    if event.kind not in SURFACE_KINDS:
        if event.op is not None or event.source_seqs:
            raise SurfaceViolation(f"{event.kind} event {event.seq} carries a surface operation")
        return
    if event.op is None:
        raise SurfaceViolation(f"{event.kind} event {event.seq} has no surface operation")
    if isinstance(event.op, Append):
        if event.source_seqs:
            raise SurfaceViolation(f"append {event.seq} cites source events")
        return
    if event.kind is EventKind.ASSISTANT_MESSAGE:
        raise SurfaceViolation("an assistant message cannot replace surface nodes")
    start, end = event.op.start_seq, event.op.end_seq
    if start >= event.seq or end >= event.seq:
        raise SurfaceViolation(f"replace {event.seq} covers a later event")
    try:
        start_idx, end_idx = nodes.index(start), nodes.index(end)
    except ValueError:
        raise SurfaceViolation(f"replace {event.seq} covers a node not on the surface") from None
    if start_idx > end_idx:
        raise SurfaceViolation(f"replace {event.seq} range is reversed in surface order")
    sources = event.source_seqs
    if not sources or len(set(sources)) != len(sources) or max(sources) >= event.seq:
        raise SurfaceViolation(f"replace {event.seq} has invalid source citations")
    shadowed = nodes[start_idx : end_idx + 1]
    if not set(shadowed) <= set(sources):
        raise SurfaceViolation(f"replace {event.seq} does not cite every node it shadows")
    # Head protection: only a single-node system replace may rewrite a system node 0.
    head_is_system = kind_of[nodes[0]] is EventKind.SYSTEM_MESSAGE
    if (
        start_idx == 0
        and head_is_system
        and (event.kind is not EventKind.SYSTEM_MESSAGE or end_idx != 0)
    ):
        raise SurfaceViolation(f"replace {event.seq} would shadow the system head")


def apply_surface_op(nodes: list[int], event: Event) -> None:
    """Apply an already-checked surface operation in place."""
    if isinstance(event.op, Append):
        nodes.append(event.seq)
    elif isinstance(event.op, Replace):
        start_idx = nodes.index(event.op.start_seq)
        end_idx = nodes.index(event.op.end_seq)
        nodes[start_idx : end_idx + 1] = [event.seq]


def fold_system_nodes(
    nodes: tuple[SystemNode, ...], new_events: Iterable[Event]
) -> tuple[SystemNode, ...]:
    """The surviving system nodes after ``new_events`` whose system events only append or
    replace system nodes (an attempt's system commits), folded without reading them again."""
    seqs = [node.seq for node in nodes]
    texts = {node.seq: node.text for node in nodes}
    for event in new_events:
        if event.is_system:
            apply_surface_op(seqs, event)
            texts[event.seq] = event.system_text
    return tuple(SystemNode(seq, texts[seq]) for seq in seqs)


class SessionLog:
    """One session's event log with its folded surface and replace generation."""

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self.events: list[Event] = []
        self.nodes: list[int] = []
        self.replace_generation = 0
        self._kinds: dict[int, EventKind] = {}
        self.extend(events)

    @property
    def next_seq(self) -> int:
        return len(self.events)

    def append(self, event: Event) -> None:
        if event.seq != self.next_seq:
            raise SurfaceViolation(f"event seq {event.seq} is not the next seq {self.next_seq}")
        check_surface_op(self.nodes, event, self._kinds)
        self.events.append(event)
        self._kinds[event.seq] = event.kind
        apply_surface_op(self.nodes, event)
        if isinstance(event.op, Replace):
            self.replace_generation += 1

    def extend(self, events: Iterable[Event]) -> None:
        for event in events:
            self.append(event)

    def node_events(self) -> list[Event]:
        return [self.events[seq] for seq in self.nodes]

    def system_nodes(self) -> tuple[SystemNode, ...]:
        return tuple(
            SystemNode(event.seq, event.system_text)
            for event in self.node_events()
            if event.is_system
        )

    def derived_messages(self) -> list[Message]:
        return [m for m in (event.derived_message() for event in self.node_events()) if m]

    def effective_prompt(self) -> EffectivePrompt:
        return effective_prompt(self.system_nodes())
