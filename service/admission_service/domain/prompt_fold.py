"""The windowed prompt fold: which system prompt was in force at each point of a loaded log.

A reader that loads a session's events in windows (a UI paging through ListEvents, or the
trajectory over the whole log) folds only the events that can change the prompt: system
messages and surface replacements. ``inspect_system_prompt`` is the fold's step, a pure function
of the previous state and one event, with the semantics of the reference harness's
``uiConversation.inspectSystemPrompt`` (design note, "Presentation and accounting"):

* every state is immutable, so a historical card keeps its own prefix state;
* the state holds only the surviving system nodes, ordered by *surface position* (a replacement
  inherits the position of its start endpoint; event order says nothing about surface order);
* ``replacements`` maps each surviving replacement's seq to the position it inherited; every
  replacement copies the map and drops the entries it shadows;
* an empty node stays addressable but never overrides a non-empty prompt;
* a replacement whose endpoint is older than the first loaded relevant event, and not a known
  replacement, has an unknown surface position: the state becomes *uncertain* (no prompt text)
  for every later event until the earlier window is replayed.

``inspect_request_prompt`` classifies a request header against the previous prompt (the
reference's ``inspectRequestPrompt``). The client libraries carry the same two functions
(``promptadmission.prompt_fold``, ``promptFold.ts``); ``tests/fixtures/prompt_fold/`` pins all
three to the same expected states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType

from admission_service.domain.events import Append, Event, EventKind, Replace
from admission_service.domain.messages import Tool
from admission_service.domain.series import HeaderReason, RequestHeader

_NO_REPLACEMENTS: Mapping[int, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True, eq=False)
class PromptNode:
    """A system node as a reader sees it, or an effective prompt anchored at the event that
    established it. ``text`` '' means "no prompt"; ``update`` marks an appended node that
    follows an earlier non-empty loaded system node (an in-history update).

    Identity matters (``eq=False``): the fold asks whether the surviving node is *the same*
    node as before, not an equal one."""

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

    ``effective`` is None when the prompt is unknown (uncertain, or nothing non-empty was ever
    loaded); ``introduced`` is the system node this step's event introduced, if any.
    """

    first_seq: int
    uncertain: bool
    nodes: tuple[PositionedNode, ...]
    replacements: Mapping[int, int]
    effective: PromptNode | None
    introduced: PromptNode | None


def is_prompt_relevant(event: Event) -> bool:
    """System messages and surface replacements; ordinary appends need no prompt fold."""
    return event.kind is EventKind.SYSTEM_MESSAGE or isinstance(event.op, Replace)


def _last_nonempty(nodes: tuple[PositionedNode, ...]) -> PromptNode | None:
    for item in reversed(nodes):
        if item.node.text != "":
            return item.node
    return None


def inspect_system_prompt(
    previous: PromptFoldState | None, event: Event, time: datetime | None = None
) -> PromptFoldState | None:
    """Fold one event (committed at ``time``) into ``previous``; an event that cannot change
    the prompt returns ``previous`` itself."""
    if not is_prompt_relevant(event):
        return previous
    op = event.op
    first_seq = previous.first_seq if previous is not None else event.seq
    nodes = previous.nodes if previous is not None else ()
    replacements = previous.replacements if previous is not None else _NO_REPLACEMENTS

    def unknown(seq: int) -> bool:
        return seq < first_seq and seq not in replacements

    uncertain = (previous is not None and previous.uncertain) or (
        isinstance(op, Replace) and (unknown(op.start_seq) or unknown(op.end_seq))
    )
    if uncertain:
        return PromptFoldState(first_seq, True, (), _NO_REPLACEMENTS, None, None)

    position = event.seq
    if isinstance(op, Replace):
        position = replacements.get(op.start_seq, op.start_seq)
        end = replacements.get(op.end_seq, op.end_seq)
        nodes = tuple(item for item in nodes if item.position < position or item.position > end)
        retained = {
            seq: inherited
            for seq, inherited in replacements.items()
            if inherited < position or inherited > end
        }
        retained[event.seq] = position
        replacements = MappingProxyType(retained)

    introduced = None
    if event.kind is EventKind.SYSTEM_MESSAGE:
        assert event.message is not None
        introduced = PromptNode(
            event.seq,
            time,
            event.turn,
            event.step,
            event.message.text,
            update=isinstance(op, Append)
            and previous is not None
            and any(item.node.text != "" for item in previous.nodes),
        )
        nodes = tuple(sorted((*nodes, PositionedNode(position, introduced)), key=_position))

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


def _position(item: PositionedNode) -> int:
    return item.position


class ChangeKind(StrEnum):
    INITIAL = "initial"
    SYSTEM = "system"
    TOOLS = "tools"
    SYSTEM_AND_TOOLS = "system_and_tools"


@dataclass(frozen=True, slots=True)
class PromptSnapshot:
    """The complete model-visible prompt state in force for a request: the header's route,
    configuration and tools, and the effective system prompt."""

    provider: str
    model: str
    config: tuple[tuple[str, str], ...]
    system: str
    tools: tuple[Tool, ...]


@dataclass(frozen=True, slots=True)
class PromptChange:
    """How the prompt differs from the previous recorded state, anchored at the event that
    introduced it (the system node for an initial or system change, else the header)."""

    seq: int
    time: datetime | None
    kind: ChangeKind
    previous: PromptSnapshot | None


@dataclass(frozen=True, slots=True)
class RequestPromptInspection:
    prompt: PromptSnapshot
    change: PromptChange | None


def inspect_request_prompt(
    previous: PromptSnapshot | None,
    header: RequestHeader,
    reason: HeaderReason,
    anchor: tuple[int, datetime | None],
    system: PromptNode | None,
) -> RequestPromptInspection:
    """Canonicalise a logged header (at ``anchor``: its seq and time) against the system node
    in force and classify the change. An in-history update was already presented at its own
    position, so a header that follows it reports no system change for it."""
    prompt = PromptSnapshot(
        header.provider, header.model, header.config, system.text if system else "", header.tools
    )
    if previous is None and reason is not HeaderReason.INITIAL:
        return RequestPromptInspection(prompt, None)
    system_changed = (
        previous is not None
        and previous.system != prompt.system
        and not (system is not None and system.update)
    )
    tools_changed = previous is not None and previous.tools != prompt.tools
    if previous is not None and not system_changed and not tools_changed:
        return RequestPromptInspection(prompt, None)
    origin = anchor
    if system is not None and (previous is None or system_changed):
        origin = (system.seq, system.time)
    if previous is None:
        kind = ChangeKind.INITIAL
    elif system_changed and tools_changed:
        kind = ChangeKind.SYSTEM_AND_TOOLS
    else:
        kind = ChangeKind.SYSTEM if system_changed else ChangeKind.TOOLS
    return RequestPromptInspection(prompt, PromptChange(origin[0], origin[1], kind, previous))
