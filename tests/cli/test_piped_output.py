"""Output piped to another program never cuts an identifier: full names at any length, and
folding (never an ellipsis) only on a terminal too narrow for them."""

from __future__ import annotations

import io
from typing import Any

import pytest

from rollout.errors import RolloutNotFoundError
from rollout_cli import watch
from rollout_cli.base import Output
from rollout_cli.console import _Console
from rollout_cli.console import table

CONFIG = "kube-system/kubelet-config-7f3a9c2e1b5d4f6a8c0e2b4d6f8a0c2e"
NAMESPACE = "kube-system-with-a-long-namespace-name"


def _printed(console: _Console) -> str:
    t = table("node", "namespace", "active", "lastKnownGood")
    t.add_row("node-1", NAMESPACE, CONFIG, CONFIG.replace("7f3a", "0000"))
    console.print(t)
    return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]


def test_piped_tables_keep_every_identifier_whole() -> None:
    """Before: piped at 80 columns, `kubelet-confi...` hid which config was old and which new."""
    shown = _printed(_Console(file=io.StringIO(), _environ={}))
    assert CONFIG in shown and CONFIG.replace("7f3a", "0000") in shown and NAMESPACE in shown
    assert "…" not in shown


def test_a_narrow_terminal_folds_and_never_cuts() -> None:
    shown = _printed(_Console(file=io.StringIO(), width=60, _environ={}))
    assert "…" not in shown  # folded onto more lines, never cut


def test_piped_section_rules_and_the_demos_outcome_boxes_are_a_terminals_width_not_the_lines() -> None:
    """Before: `make demo | tee demo.log` drew each section rule and outcome box 4,096 characters
    wide (the width that keeps a piped identifier whole)."""
    from rich.panel import Panel

    console = _Console(file=io.StringIO(), _environ={})
    console.rule("[bold]kubelet-rollout demo")
    console.print(Panel(f"demo-good: completed - {CONFIG}", title="demo-good", expand=False))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert len(lines[0]) == 80 and "kubelet-rollout demo" in lines[0]
    assert all(len(line) <= len(CONFIG) + 40 for line in lines[1:]) and CONFIG in lines[2]


@pytest.mark.parametrize("width", [None, 40, 80], ids=["piped", "40 columns", "80 columns"])
def test_a_section_rule_never_cuts_its_title(width: int | None) -> None:
    """Before: at 80 columns the demo's rule read `... kubelet-rollout-agent on every n…`."""
    title = "today's clusters: Kubernetes 1.31, no DKC, kubelet-rollout-agent on every node"
    console = _Console(file=io.StringIO(), width=width, _environ={})
    console.rule(title)
    console.rule("summary")
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in shown and " ".join(shown.split()).count(title) == 1, shown
    if width is None:
        assert title in shown.splitlines()[0]  # piped: on one line
    assert " summary " in shown.splitlines()[-1]  # a title that fits stays in its rule


def test_a_piped_watch_prints_a_line_per_change(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: piped, `status --watch` printed only the last frame (and said "no rollout named"
    for the seconds before the run wrote its journal)."""
    looks: list[dict[str, Any] | None] = [
        None,  # not started yet: waited for, not an error
        _rollout("running", "soak"), _rollout("running", "soak"), _rollout("running", "nodes"),
        _rollout("completed", None),
    ]

    def read() -> dict[str, Any]:
        look = looks.pop(0)
        if look is None:
            raise RolloutNotFoundError("no rollout named r1")
        return look

    monkeypatch.setattr(watch, "WATCH_EVERY_S", 0)
    watch._watch(read, "r1", Output.table)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "completed" in lines[-1], lines
    assert "waiting for soak" in lines[0]


def _rollout(state: str, waits: str | None) -> dict[str, Any]:
    return {"name": "r1", "state": state, "batches": 2, "current_batch": 1, "nodes": [], "reason": "why",
            "finished_at": "2026-11-25T20:00:00Z" if state == "completed" else None,
            "waiting": {"for": waits, "until": None, "reason": "why", "command": None} if waits else None}
