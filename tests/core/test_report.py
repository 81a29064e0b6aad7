"""The reports read well where people read them: the Prefect UI (which clips a wide table and shows
an emoji as a missing glyph) and the terminal. Pure."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from rollout.model import ConfigRef
from dataclasses import replace

from rollout.report import (SHOWN_NODES as REPORT_ROWS, BatchResult, NodeRow, errors_markdown, final_report, rows_markdown,
                            table_artifact_rows)

TARGET = ConfigRef("kube-system", "kubelet-config-7f3a9c2e", "kubelet")
CRASH = 'kubelet cgroup driver: "systemd" is different from docker cgroup driver: "cgroupfs"' + " (restarts: 5)" * 10
ROW = NodeRow(node="n1", batch="1", phase="crash-looping", ready="False", assigned=TARGET.name,
              active="kubelet-config-7f3a9c2e@123", last_known_good="kubelet-config-old", error=CRASH,
              assigned_at="2026-11-25T20:01:02Z", seconds=3.5, backend="agent", writes="main-file")


def test_a_batch_table_artifact_is_narrow_and_keeps_the_error_whole() -> None:
    """Before: wide tables clipped in the UI; and an error was cut mid-word at its key part."""
    (row,) = table_artifact_rows([ROW], TARGET)
    assert row["active"] == "target" and row["lastKnownGood"] == "kubelet-config-old"
    assert row["assigned"] == "20:01:02" and row["error"] == "kubelet cgroup driver"  # a narrow cell
    assert row["backend"] == "agent/main-file"  # how config reaches the node: the report's table says it too
    assert "| 3.5 | agent/main-file |" in rows_markdown([ROW], TARGET)
    assert errors_markdown([ROW]) == f"* `n1`: {CRASH}"  # in full, with the table (its description)
    assert errors_markdown([ROW]) in rows_markdown([ROW], TARGET)  # and below the report's table


def test_the_report_heading_is_plain_text_and_counts_the_time_paused() -> None:
    """Before: the heading's emoji was a missing glyph; the run's duration left out paused time."""
    start = datetime(2026, 11, 25, 20, 0, tzinfo=timezone.utc)
    report = final_report(rollout="r1", outcome="completed", message="done", target=TARGET, policy="canary",
                          batches=[], started=start, finished=start + timedelta(minutes=1, seconds=50),
                          waited=timedelta(minutes=1, seconds=43))
    heading = report.splitlines()[0]
    assert heading.isascii(), heading
    assert "duration: 1m50s (1m43s of it waiting at approval gates" in report, report


def test_a_large_batch_reports_the_nodes_that_did_not_land_and_counts_the_rest() -> None:
    """A 10,000-node batch made a 10,000-row report, drawn on the terminal after the last node
    was done; a small batch still shows every node."""
    landed = [replace(ROW, node=f"n{i}", phase="promoted", error="", ready="True") for i in range(10_000)]
    big = BatchResult(index=0, label="1", nodes=[r.node for r in landed] + ["n-bad"], outcome="failed",
                      rows=[*landed, replace(ROW, node="n-bad")])
    small = BatchResult(index=1, label="2", nodes=["s1", "s2"], outcome="succeeded",
                        rows=[replace(ROW, node="s1", phase="active", error=""), replace(ROW, node="s2", error="")])
    report = final_report(rollout="r1", outcome="reverted", message="m", target=TARGET, policy="canary",
                          batches=[big, small])
    assert "10000 of 10001 node(s) active or promoted" in report
    assert "| n-bad | crash-looping |" in report and "| n17 |" not in report  # only what did not land
    assert f"n{REPORT_ROWS - 1} and {10_001 - REPORT_ROWS} more" in report  # the batches table names a few
    assert "| s1 | active |" in report and "| s2 | crash-looping |" in report  # a small batch: every node
    assert len(report) < 20_000
