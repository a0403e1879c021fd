"""The projection rule: how a rendered system prompt enters the surface (SPEC §2).

A pure function of the surviving system nodes (in surface order), the step's rendered prompt,
the route's declared capability and whether a request series starts. It returns the ordered
per-node commits; the caller turns them into events before the step's user messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class SystemNode:
    """A surviving system-prompt node: its seq and text ('' for an empty node)."""

    seq: int
    text: str


class CommitOp(StrEnum):
    APPEND = "append"
    REPLACE = "replace"


@dataclass(frozen=True, slots=True)
class SystemCommit:
    """One per-node commit. A replace covers exactly the node ``replaced_seq`` and cites it.

    ``update`` marks an in-history append that follows an earlier non-empty system node (how
    Inspect and trajectory views tell a prompt update from an initial prompt).
    """

    op: CommitOp
    text: str
    replaced_seq: int | None = None
    update: bool = False


def head_of(nodes: tuple[SystemNode, ...]) -> SystemNode | None:
    return nodes[0] if nodes else None


def effective_node(nodes: tuple[SystemNode, ...]) -> SystemNode | None:
    """The last non-empty surviving system node, else the head (whose text may be empty)."""
    for node in reversed(nodes):
        if node.text:
            return node
    return head_of(nodes)


def effective_text(nodes: tuple[SystemNode, ...]) -> str:
    node = effective_node(nodes)
    return node.text if node is not None else ""


def project(
    nodes: tuple[SystemNode, ...], rendered: str, *, in_history: bool, starts_series: bool
) -> tuple[SystemCommit, ...]:
    """Apply the rule of SPEC §2 and return the commits, in the order they must be logged."""
    head = head_of(nodes)
    if head is None:
        # Reserve the head, even for an empty rendering; it goes to the surface end.
        return (SystemCommit(CommitOp.APPEND, rendered),)
    if not in_history or starts_series or rendered == "":
        return consolidate(nodes, rendered)
    if effective_text(nodes) == rendered:
        return ()
    has_active_prompt = any(node.text for node in nodes)
    return (SystemCommit(CommitOp.APPEND, rendered, update=has_active_prompt),)


def consolidate(nodes: tuple[SystemNode, ...], rendered: str) -> tuple[SystemCommit, ...]:
    """Empty every active node after the head (surface order), then rewrite the head if needed.

    Dormant (already empty) tails are never emptied again. The head goes last so that a reader
    of the log never sees the new head text alongside a stale later prompt.
    """
    head, *tails = nodes
    commits = [SystemCommit(CommitOp.REPLACE, "", node.seq) for node in tails if node.text]
    if head.text != rendered:
        commits.append(SystemCommit(CommitOp.REPLACE, rendered, head.seq))
    return tuple(commits)
