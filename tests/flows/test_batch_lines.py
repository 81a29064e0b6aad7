"""A batch's end in its task run's log: a line per node for a small batch; for a large one, the
nodes that did not land one by one and the rest summed up per phase (each node is in the batch's
table artifact), so a 500-node batch does not ship 500 log lines after its last node is done."""

from __future__ import annotations

from flows.batch_runs import node_lines
from rollout.report import SHOWN_NODES as NODE_LINES
from rollout.report import NodeRow


def row(node: str, phase: str = "promoted", seconds: float | None = 1.0, error: str = "") -> NodeRow:
    return NodeRow(node=node, batch="2", phase=phase, ready="True", assigned="a", active="a",
                   last_known_good="a", error=error, seconds=seconds)


def test_a_small_batch_logs_each_node() -> None:
    rows = [row(f"n{i}", seconds=float(i)) for i in range(NODE_LINES)]
    assert node_lines(rows) == [f"n{i}: promoted in {float(i)}s" for i in range(NODE_LINES)]


def test_a_large_batch_logs_each_node_in_trouble_and_sums_up_the_rest() -> None:
    rows = [row(f"n{i}", seconds=float(i)) for i in range(1, 500)]
    rows += [row("late", phase="active", seconds=4.0), row("bad", phase="reverted", seconds=None, error="crash loop"),
             row("odd", phase="promoted", seconds=2.0, error="sync error")]
    lines = node_lines(rows)
    assert lines == [
        "bad: reverted: crash loop",
        "odd: promoted in 2.0s: sync error",
        "1 node(s) active in 4.0s to 4.0s (median 4.0s; slowest: late 4.0s)",
        "499 node(s) promoted in 1.0s to 499.0s (median 250.0s; slowest: n499 499.0s, n498 498.0s, n497 497.0s)",
    ]


def test_a_reverted_batch_names_its_first_nodes_and_counts_the_rest() -> None:
    """A 9,999-node batch reverted at a 20,000-node scale logged 9,957 `reverting` lines."""
    rows = [row(f"n{i}", phase="reverting", seconds=None) for i in range(9_999)]
    lines = node_lines(rows)
    assert lines[:NODE_LINES] == [f"n{i}: reverting" for i in range(NODE_LINES)]
    assert lines[NODE_LINES:] == [f"... and {9_999 - NODE_LINES} more node(s) reverting"]
