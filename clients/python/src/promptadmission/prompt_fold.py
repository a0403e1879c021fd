"""The windowed prompt fold, for readers that load a session's events in windows.

A UI paging through ``ListEvents`` needs to know which system prompt was in force at each event
it shows. ``inspect_system_prompt(state, event) -> state`` folds one ``Event`` into the previous
state (``None`` before the first); it is pure, and every state stays valid, so a historical card
keeps its own prefix state. The semantics are the service's (``ListTrajectory`` and
``Inspect``) and the reference harness's ``inspectSystemPrompt``:

* only system messages and surface replacements change the state; any other event returns the
  previous state itself;
* the state keeps the surviving system nodes ordered by *surface position*: a replacement takes
  the position of its start endpoint, whatever its seq;
* ``replacements`` maps each surviving replacement's seq to that position; every replacement
  copies the map and drops the entries it shadows;
* an empty node stays addressable but never overrides a non-empty prompt;
* a replacement whose endpoint is older than the first loaded relevant event (and is not a
  known replacement) has an unknown position: the state becomes *uncertain* and shows no prompt
  until the earlier window is replayed (fold again from the earlier window's first event);
* ``update`` is true for an appended system message that follows an earlier non-empty system
  node in the loaded window (without that node, it is presented as an initial prompt).

``tests/fixtures/prompt_fold/*.json`` holds the event sequences and expected states that this
module, the TypeScript client's ``inspectSystemPrompt`` and the service all satisfy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType

from promptadmission.v1 import session_pb2 as pb

_NO_REPLACEMENTS: Mapping[int, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True, eq=False)
class PromptNode:
    """A system node, or the effective prompt anchored at the event that established it.

    ``text`` '' means "no prompt". Compared by identity: the fold asks whether the surviving
    node is the same node as before, not an equal one.
    """

    seq: int
    time: datetime | None
    turn: int
    step: int
    text: str
    update: bool


@dataclass(frozen=True, slots=True)
class PositionedNode:
    position: int
    node: PromptNode


@dataclass(frozen=True, slots=True)
class PromptFoldState:
    """The prompt facts at one prefix of the loaded window.

    ``effective`` is None while the prompt is unknown (``uncertain``, or nothing non-empty was
    loaded yet); ``introduced`` is the system node the last folded event introduced, if any.
    """

    first_seq: int
    uncertain: bool
    nodes: tuple[PositionedNode, ...]
    replacements: Mapping[int, int]
    effective: PromptNode | None
    introduced: PromptNode | None


def _replace_range(event: pb.Event) -> tuple[int, int] | None:
    if event.HasField("surface_op") and event.surface_op.WhichOneof("op") == "replace":
        return event.surface_op.replace.start_seq, event.surface_op.replace.end_seq
    return None


def _is_append(event: pb.Event) -> bool:
    return event.HasField("surface_op") and event.surface_op.WhichOneof("op") == "append"


def _text(message: pb.Message) -> str:
    return "".join(block.text.text for block in message.content if block.HasField("text"))


def _time(event: pb.Event) -> datetime | None:
    return event.commit_time.ToDatetime(tzinfo=UTC) if event.HasField("commit_time") else None


def _last_nonempty(nodes: tuple[PositionedNode, ...]) -> PromptNode | None:
    for item in reversed(nodes):
        if item.node.text != "":
            return item.node
    return None


def is_prompt_relevant(event: pb.Event) -> bool:
    """Whether ``event`` can change the prompt: a system message or a surface replacement."""
    return event.kind == pb.EVENT_KIND_SYSTEM_MESSAGE or _replace_range(event) is not None


def inspect_system_prompt(
    previous: PromptFoldState | None, event: pb.Event
) -> PromptFoldState | None:
    """Fold one event into ``previous``; an event that cannot change the prompt returns
    ``previous`` itself."""
    if not is_prompt_relevant(event):
        return previous
    replaced = _replace_range(event)
    time = _time(event)
    first_seq = previous.first_seq if previous is not None else event.seq
    nodes = previous.nodes if previous is not None else ()
    replacements = previous.replacements if previous is not None else _NO_REPLACEMENTS

    def unknown(seq: int) -> bool:
        return seq < first_seq and seq not in replacements

    uncertain = (previous is not None and previous.uncertain) or (
        replaced is not None and (unknown(replaced[0]) or unknown(replaced[1]))
    )
    if uncertain:
        return PromptFoldState(first_seq, True, (), _NO_REPLACEMENTS, None, None)

    position = event.seq
    if replaced is not None:
        position = replacements.get(replaced[0], replaced[0])
        end = replacements.get(replaced[1], replaced[1])
        nodes = tuple(item for item in nodes if item.position < position or item.position > end)
        retained = {
            seq: inherited
            for seq, inherited in replacements.items()
            if inherited < position or inherited > end
        }
        retained[event.seq] = position
        replacements = MappingProxyType(retained)

    introduced = None
    if event.kind == pb.EVENT_KIND_SYSTEM_MESSAGE:
        introduced = PromptNode(
            event.seq,
            time,
            event.turn,
            event.step,
            _text(event.message),
            update=_is_append(event)
            and previous is not None
            and any(item.node.text != "" for item in previous.nodes),
        )
        nodes = tuple(
            sorted((*nodes, PositionedNode(position, introduced)), key=lambda i: i.position)
        )

    surviving = _last_nonempty(nodes)
    before = _last_nonempty(previous.nodes) if previous is not None else None
    effective: PromptNode | None
    if surviving is before:
        effective = previous.effective if previous is not None else None
    elif introduced is not None and surviving is introduced:
        effective = introduced
    else:
        effective = PromptNode(
            event.seq,
            time,
            surviving.turn if surviving is not None else 0,
            surviving.step if surviving is not None else 0,
            surviving.text if surviving is not None else "",
            update=False,
        )
    return PromptFoldState(first_seq, False, nodes, replacements, effective, introduced)


def fold_system_prompt(
    events: Iterable[pb.Event], state: PromptFoldState | None = None
) -> PromptFoldState | None:
    """Fold a window of events (in seq order) into ``state``."""
    for event in events:
        state = inspect_system_prompt(state, event)
    return state
