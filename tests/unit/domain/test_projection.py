"""The projection rule, row by row of the design note's decision table (SPEC §2)."""

from __future__ import annotations

import pytest
from admission_service.domain.projection import (
    CommitOp,
    SystemCommit,
    SystemNode,
    effective_node,
    effective_text,
    project,
)

APPEND, REPLACE = CommitOp.APPEND, CommitOp.REPLACE


def nodes(*texts: str) -> tuple[SystemNode, ...]:
    """System nodes at seqs 0, 10, 20, … in surface order."""
    return tuple(SystemNode(10 * i, text) for i, text in enumerate(texts))


def ops(commits: tuple[SystemCommit, ...]) -> list[tuple[str, int | None, str]]:
    return [(c.op.value, c.replaced_seq, c.text) for c in commits]


# Each row: surviving system nodes, rendered, in_history, starts_series, expected commits.
DECISION_TABLE = [
    # No surviving system node: reserve the head, even for an empty rendering.
    pytest.param((), "A", True, False, [("append", None, "A")], id="reserve-head"),
    pytest.param((), "", False, False, [("append", None, "")], id="reserve-empty-head"),
    pytest.param((), "A", False, True, [("append", None, "A")], id="reserve-head-series"),
    # Route without the capability: consolidate, whatever the prefix state.
    pytest.param(nodes("A"), "A", False, False, [], id="none-unchanged"),
    pytest.param(nodes("A"), "B", False, False, [("replace", 0, "B")], id="none-changed"),
    pytest.param(
        nodes("A", "B"),
        "B",
        False,
        False,
        [("replace", 10, ""), ("replace", 0, "B")],
        id="none-fold-update-into-head",
    ),
    pytest.param(
        nodes("A", "B", "", "C"),
        "A",
        False,
        False,
        [("replace", 10, ""), ("replace", 30, "")],
        id="none-head-already-right",
    ),
    # In-history, the series continues: append a changed prompt, nothing for an unchanged one.
    pytest.param(nodes("A"), "B", True, False, [("append", None, "B")], id="capable-append"),
    pytest.param(nodes("A"), "A", True, False, [], id="capable-unchanged"),
    pytest.param(nodes("A", "B"), "B", True, False, [], id="capable-latest-matches"),
    pytest.param(
        nodes("A", "B"), "A", True, False, [("append", None, "A")], id="capable-back-to-head"
    ),
    pytest.param(nodes("A", "B", ""), "B", True, False, [], id="capable-dormant-tail-ignored"),
    pytest.param(nodes("", ""), "A", True, False, [("append", None, "A")], id="capable-refill"),
    # In-history, a new series starts: consolidate even when the effective text is unchanged.
    pytest.param(nodes("A"), "A", True, True, [], id="series-head-only-unchanged"),
    pytest.param(nodes("A"), "B", True, True, [("replace", 0, "B")], id="series-head-changed"),
    pytest.param(
        nodes("A", "B"),
        "B",
        True,
        True,
        [("replace", 10, ""), ("replace", 0, "B")],
        id="series-unchanged-effective-with-tail",
    ),
    pytest.param(
        nodes("A", "B"),
        "C",
        True,
        True,
        [("replace", 10, ""), ("replace", 0, "C")],
        id="series-changed-with-tail",
    ),
    # Any route, empty rendering: clear every active version, empty the head if needed.
    pytest.param(
        nodes("A", "B", "C"),
        "",
        True,
        False,
        [("replace", 10, ""), ("replace", 20, ""), ("replace", 0, "")],
        id="clear-three-versions-capable",
    ),
    pytest.param(
        nodes("A", "B", "C"),
        "",
        False,
        False,
        [("replace", 10, ""), ("replace", 20, ""), ("replace", 0, "")],
        id="clear-three-versions-incapable",
    ),
    pytest.param(nodes("", ""), "", True, False, [], id="clear-already-clear"),
    pytest.param(nodes("", "", "B"), "", True, True, [("replace", 20, "")], id="clear-dormant"),
]


@pytest.mark.parametrize(("system", "rendered", "in_history", "starts", "expected"), DECISION_TABLE)
def test_decision_table(
    system: tuple[SystemNode, ...],
    rendered: str,
    in_history: bool,
    starts: bool,
    expected: list[tuple[str, int | None, str]],
) -> None:
    commits = project(system, rendered, in_history=in_history, starts_series=starts)
    assert ops(commits) == expected


def apply(
    system: tuple[SystemNode, ...], commits: tuple[SystemCommit, ...]
) -> tuple[SystemNode, ...]:
    """Fold commits into the system-node list the way the surface would."""
    result = list(system)
    next_seq = max((n.seq for n in system), default=-1) + 1
    for commit in commits:
        if commit.op is APPEND:
            result.append(SystemNode(next_seq, commit.text))
        else:
            index = next(i for i, n in enumerate(result) if n.seq == commit.replaced_seq)
            result[index] = SystemNode(next_seq, commit.text)
        next_seq += 1
    return tuple(result)


@pytest.mark.parametrize(("system", "rendered", "in_history", "starts", "expected"), DECISION_TABLE)
def test_every_row_leaves_the_rendering_in_force(
    system: tuple[SystemNode, ...],
    rendered: str,
    in_history: bool,
    starts: bool,
    expected: object,
) -> None:
    after = apply(system, project(system, rendered, in_history=in_history, starts_series=starts))
    assert effective_text(after) == rendered
    # Projecting the same rendering again on a continuing series commits nothing.
    assert project(after, rendered, in_history=in_history, starts_series=False) == ()


def test_consolidation_empties_tails_before_rewriting_the_head() -> None:
    commits = project(nodes("A", "B", "C"), "D", in_history=False, starts_series=False)
    assert [c.replaced_seq for c in commits] == [10, 20, 0]
    assert commits[-1].text == "D"


def test_head_is_the_first_surviving_system_node_not_node_zero() -> None:
    # A head appended after a user message (seq 5) is still the head.
    system = (SystemNode(5, "A"), SystemNode(9, "B"))
    commits = project(system, "C", in_history=False, starts_series=False)
    assert ops(commits) == [("replace", 9, ""), ("replace", 5, "C")]


def test_update_flag_marks_an_append_after_an_active_prompt() -> None:
    (update,) = project(nodes("A"), "B", in_history=True, starts_series=False)
    assert update.update is True
    (refill,) = project(nodes("", ""), "B", in_history=True, starts_series=False)
    assert refill.update is False
    (head,) = project((), "A", in_history=True, starts_series=False)
    assert head.update is False


def test_effective_node_falls_back_to_the_head() -> None:
    system = nodes("", "", "")
    assert effective_node(system) == system[0]
    assert effective_node(()) is None
    assert effective_text(()) == ""
    assert effective_node(nodes("A", "B", "")) == SystemNode(10, "B")


def test_dormant_tails_are_never_resurrected_by_repeated_clearing() -> None:
    system = nodes("A", "B", "C")
    for in_history in (True, False, True):
        system = apply(system, project(system, "", in_history=in_history, starts_series=False))
        assert effective_text(system) == ""
        assert all(node.text == "" for node in system)
    # Once clear, clearing again commits nothing on any route.
    assert project(system, "", in_history=True, starts_series=True) == ()
    # Restoring text refills only the new text, never an old version.
    restored = apply(system, project(system, "N", in_history=True, starts_series=False))
    assert [n.text for n in restored if n.text] == ["N"]
