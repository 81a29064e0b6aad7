"""A gate's evidence is rendered on a terminal and is the markdown itself, whole, when piped."""

from __future__ import annotations

import pytest

EVIDENCE = """## Rollout `r7`: approve batch 2?

### Evidence
* caveat: enforceNodeAllocatable: [pods, system-reserved] needs the cgroup on every host
"""


@pytest.mark.parametrize("command", [["approve"], ["fleet", "approve"]])
def test_a_gate_listing_piped_is_its_markdown_whole(monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    """Before: piped, the evidence went through rich markup (`[pods, system-reserved]` vanished);
    `fleet approve` listed no evidence at all."""
    import contextlib
    import uuid

    from typer.testing import CliRunner

    from flows.approval import PendingGate
    from flows.fleet_shell import fleet_key
    from rollout_cli import fleet, prefect_home
    from rollout_cli.main import app

    gate = fleet_key("r7", "stage-2") if command[0] == "fleet" else "r7-batch-2"
    waiting = PendingGate(uuid.uuid4(), "r7", "r7", gate, EVIDENCE, {})
    monkeypatch.setattr("flows.approval.pending_gates", lambda rollout=None: [waiting])
    monkeypatch.setattr(prefect_home, "prefect_api", contextlib.nullcontext)  # no Prefect is asked
    monkeypatch.setattr(fleet, "_needs_prefect_server", lambda: None)
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert EVIDENCE.strip() in result.stdout, result.stdout
