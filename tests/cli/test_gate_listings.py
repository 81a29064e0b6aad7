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
    from flows.fleet.shell import fleet_key
    from rollout_cli import fleet
    from rollout_cli.local import prefect_home
    from rollout_cli.main import app

    gate = fleet_key("r7", "stage-2") if command[0] == "fleet" else "r7-batch-2"
    waiting = PendingGate(uuid.uuid4(), "r7", "r7", gate, EVIDENCE, {})
    monkeypatch.setattr("flows.approval.pending_gates", lambda rollout=None: [waiting])
    monkeypatch.setattr(prefect_home, "prefect_api", contextlib.nullcontext)  # no Prefect is asked
    monkeypatch.setattr(fleet, "_needs_prefect_server", lambda: None)
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert EVIDENCE.strip() in result.stdout, result.stdout


def test_with_no_prefect_api_to_ask_approve_says_so(tmp_path) -> None:
    """Before: a traceback ending in Prefect's "No Prefect API URL provided"."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PREFECT_HOME": str(tmp_path), "PREFECT_SERVER_EPHEMERAL_ENABLED": "false",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("PREFECT_API_URL", None)
    result = subprocess.run([sys.executable, "-m", "rollout_cli", "approve"], env=env, text=True,
                            capture_output=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "error: no Prefect API" in result.stderr and "hint: set PREFECT_API_URL" in result.stderr
