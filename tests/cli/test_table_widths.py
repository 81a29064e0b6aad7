"""No table splits or cuts an identifier (a node, a config ref ``name@rv``, a rollout or run name)
at any width: only prose (an error, a message) wraps, between words, and a terminal too narrow
for a table's identifiers shows its rows as records. Piped, `fleet status` keeps every name and
message whole."""

from __future__ import annotations

import os

import io
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from rollout_cli.console import _Console
from rollout_cli.main import app

runner = CliRunner()


def whole_in(screen: str, name: str) -> bool:
    """``name`` on one line, not part of a longer word."""
    return any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", line) for line in screen.splitlines())


REFS = ("kubelet-config-6tfbk6bmd9@1458", "kubelet-config-b2k8tkc7h5@1502")
NODES = ("ip-10-0-13-207.eu-west-1.compute.internal", "node-2", "worker-pool-b-3")


def on_terminal(renderable: Any, columns: int) -> str:
    """What the CLI's console prints on a terminal ``columns`` wide."""
    console = _Console(width=columns, force_terminal=True, color_system=None, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def status_data() -> dict[str, Any]:
    """A rollout as `rollout status -o json` gives it, mid-run, with long node names."""
    return {
        "name": "maxpods-150-eu-west", "state": "running", "batches": 3, "current_batch": 2,
        "created_at": "2026-11-29T02:27:09Z", "finished_at": None, "reason": "batch 2 is converging",
        "waiting": {"for": "nodes", "until": "2026-11-29T02:37:09Z", "command": ""},
        "nodes": [{"name": node, "batch": i + 1, "phase": "promoted" if i == 0 else "assigned",
                   "ready_condition": "True", "backend": "dkc", "active": REFS[i % 2],
                   "last_known_good": REFS[(i + 1) % 2], "error": "" if i else "kubelet restarted twice in 5m"}
                  for i, node in enumerate(NODES)],
        "decisions": [], "lock": None, "analysis": [],
    }


@pytest.mark.parametrize("compact", [False, True], ids=["status", "live display"])
@pytest.mark.parametrize("columns", [40, 60, 80, 100, 120, 160, 240])
def test_the_status_table_never_splits_an_identifier(columns: int, compact: bool) -> None:
    """Before: `kubelet-config-6tfbk6bmd9@1458` folded over 3-4 lines at 80 columns."""
    from rollout_cli.watch import status_renderable

    screen = on_terminal(status_renderable(status_data(), compact=compact), columns)
    for identifier in (*REFS, *NODES, "maxpods-150-eu-west"):
        assert whole_in(screen, identifier), f"{identifier} split at {columns} columns:\n{screen}"
    assert all(whole_in(screen, word) for word in "kubelet restarted twice in 5m".split())  # prose wraps


def test_a_wide_terminal_gets_the_table_and_a_narrow_one_records() -> None:
    from rollout_cli.watch import status_renderable

    def shown(columns: int) -> str:
        return on_terminal(status_renderable(status_data()), columns)

    assert "lastKnownGood" in shown(200) and "│" in shown(200)  # one row per node
    narrow = shown(80)
    assert "│" not in narrow and f"lastKnownGood {REFS[1]}" in narrow  # a record per node


@pytest.mark.parametrize("columns", [60, 80, 120, 240])
def test_a_rollouts_report_on_a_terminal_never_cuts_an_identifier(columns: int) -> None:
    """The report the demo and `rollout start` print at the end (markdown, rendered): at 80 columns
    rich's markdown table cut each config to `kube-system/…`."""
    from rollout.model import ConfigRef
    from rollout.report import BatchResult, NodeRow, final_report
    from rollout_cli.console import print_markdown

    before = f"kube-system/{REFS[0]}"
    rows = [NodeRow(node, "canary", "active", "True", before, before, before, "crash-looping: Ready=Unknown",
                    seconds=12.5, backend="agent", writes="drop-in") for node in NODES]
    report = final_report(rollout="maxpods-150-eu-west", outcome="reverted", message="the canary crash-looped",
                          target=ConfigRef("kube-system", REFS[1].split("@")[0]), policy="canary",
                          batches=[BatchResult(0, "canary", list(NODES), "failed, reverted", rows=rows)])
    console = _Console(width=columns, force_terminal=True, color_system=None, record=True, file=io.StringIO())
    print_markdown(console, report)
    screen = console.export_text()
    assert "…" not in screen, screen
    for identifier in (before, *NODES, "maxpods-150-eu-west", "agent/drop-in"):
        assert whole_in(screen, identifier), f"{identifier} cut at {columns} columns:\n{screen}"


def test_fleet_status_piped_keeps_names_and_its_message_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: each cluster's message was cut at 60 characters."""
    from rollout_cli import fleet

    monkeypatch.delenv("COLUMNS", raising=False)  # piped as a script pipes it: no width asked for

    message = ("dev-eu-west-1-canary-cluster: halted: batch 2 failed: node ip-10-0-13-207.eu-west-1.compute"
               ".internal crash-looping after kubelet-config-6tfbk6bmd9@1458")
    data = {"name": "maxpods-150-fleet", "state": "halted", "message": message, "clusters": [
        {"cluster": "dev-eu-west-1-canary-cluster", "stage_name": "canary", "work_pool": "pool-dev-eu-west-1",
         "phase": "halted", "batch": 2, "batches": 3, "nodes": 12, "done": 4, "failed": 1,
         "flow_run_name": "maxpods-150-fleet-dev-eu-west-1-canary-cluster", "message": message}]}
    monkeypatch.setattr("flows.fleet.status.fleet_status", lambda name: data)
    monkeypatch.setattr(fleet, "_needs_prefect_server", lambda: None)
    result = runner.invoke(app, ["fleet", "status", "maxpods-150-fleet"])
    assert result.exit_code == 0, result.output
    for name in ("dev-eu-west-1-canary-cluster", "pool-dev-eu-west-1", "maxpods-150-fleet-dev-eu-west-1-canary-cluster"):
        assert whole_in(result.stdout, name), result.stdout
    assert result.stdout.count(message) == 2, (result.stdout, {k: v for k, v in os.environ.items()
                                                                if k in ("COLUMNS", "LINES", "TERM")})


@pytest.mark.parametrize("columns", [40, 60, 80, 100, 120, 160])
def test_the_progress_bar_and_its_count_stay_together_at_any_width(columns: int) -> None:
    """Before: at 80 columns the header wrapped between words, so the bar stood on a line of its
    own and `1/3 nodes on target` on the next. Now the bar sits beside the header where it has
    room, else bar and count take a line of their own, and neither is cut."""
    from rollout_cli.watch import status_renderable

    data = {**status_data(), "finished_at": "2026-11-29T02:37:15Z"}  # a fixed elapsed time: a fixed header
    lines = on_terminal(status_renderable(data, compact=True), columns).splitlines()
    bar = [line for line in lines if "nodes on target" in line]
    assert len(bar) == 1 and re.search(r"[█░]{10,} 1/3 nodes on target", bar[0]), "\n".join(lines)
    assert any("rollout maxpods-150-eu-west" in line for line in lines), "\n".join(lines)
    if columns >= 120:  # room for both: one line
        assert bar[0].startswith("rollout maxpods-150-eu-west: running"), "\n".join(lines)
