"""`rollout plan` estimates the rollout as it will happen: waiting for the maintenance windows
included, with when the first batch can start (README: "Plan"). The real command, against kubesim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from rollout.timefmt import parse_rfc3339
from rollout_cli.contract import validator

ROOT = Path(__file__).resolve().parents[2]


def rollout(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "rollout_cli", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=120)


def test_plan_counts_the_wait_for_a_closed_window(kubesim_cluster: Any, tmp_path: Path) -> None:
    """Before: 4m49s for a rollout whose first batch could not start for 31 hours (only the
    batches' own time was counted)."""
    cluster = kubesim_cluster(nodes=4)
    opens = (datetime.now(timezone.utc) + timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    policy = tmp_path / "nightly.yaml"
    policy.write_text(yaml.safe_dump({
        "name": "nightly", "steps": [1, "100%"], "maxUnavailable": 2,
        "done": {"until": "active", "soak": "10m"},
        "maintenanceWindows": {"timezone": "UTC", "windows": [{"cron": f"0 {opens.hour} * * *", "duration": "1h"}]},
    }))
    common = ("--policy", str(policy), "--kubeconfig", str(cluster.kubeconfig), "--name", "nightly")
    planned = rollout("plan", *common, "-o", "json")
    assert planned.returncode == 0, planned.stderr
    data = json.loads(planned.stdout)
    assert data["estimate_seconds"] >= 4 * 3600, data["estimate"]  # the window opens in 4-5 hours
    validator("plan").validate(data)
    assert parse_rfc3339(data["starts_at"]) == opens
    assert data["estimate_seconds"] >= 4 * 3600 + data["work_seconds"] and data["work_seconds"] >= 20 * 60
    assert parse_rfc3339(data["ends_at"]) == opens + timedelta(seconds=data["work_seconds"])

    shown = rollout("plan", *common)
    assert shown.returncode == 0, shown.stderr
    header = shown.stdout.splitlines()[0]
    assert "h" in header.split("estimated ")[1].split()[0] and f"({data['work']} of batches" in header, header
    assert f"the first batch can start at {data['starts_at']}" in header, header
