"""What the first hour's commands show, end to end on kubesim through the CLI (issue 19): a plan
that names its gates and windows and is divided for a rehearsal, a policy file known by its name
everywhere, a rollback that keeps the rollout's policy and reports its own run's duration, and a
status table that names each node's backend."""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout_cli.main import EXIT_OK, app  # noqa: E402

pytestmark = pytest.mark.usefixtures("prefect_api")
runner = CliRunner()


def cli(*args: str, code: int = EXIT_OK) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == code, result.output
    return result.stdout


def test_plan_names_its_gates_and_windows_and_a_rehearsal_divides_its_estimate(tmp_path: Path) -> None:
    """Before: `plan` showed neither approval gates nor windows, and `plan -p cautious` estimated
    1 h 20 min on a 5-node simulation."""
    with sc.cluster(tmp_path, general=5) as c:
        kc = str(c.kubeconfig)
        config = tmp_path / "k.yaml"
        config.write_text(sc.config_text(sc.gateway(c), maxPods=61))
        windowed = tmp_path / "windowed.yaml"
        windowed.write_text(yaml.safe_dump({"steps": [1, "100%"], "approval": {"after": [0]},
                                            "maintenanceWindows": {"timezone": "UTC", "windows": [
                                                {"days": ["sat", "sun"], "start": "01:00", "end": "05:00"}]}}))
        plan = json.loads(cli("plan", "--config", str(config), "-p", str(windowed), "--kubeconfig", kc, "-o", "json"))
        assert plan["gates"]["after_batches"] == [1]
        assert plan["windows"]["timezone"] == "UTC" and plan["windows"]["windows"]
        shown = cli("plan", "--config", str(config), "-p", str(windowed), "--kubeconfig", kc)
        assert "approval" in shown.lower() and "01:00" in shown
        real = json.loads(cli("plan", "--config", str(config), "-p", "cautious", "--kubeconfig", kc, "-o", "json"))
        rehearsal = json.loads(cli("plan", "--config", str(config), "-p", "cautious", "--kubeconfig", kc,
                                   "--time-scale", "20", "-o", "json"))
        assert rehearsal["time_scale"] == 20
        # the batches' own time (the estimate adds waiting for cautious's wall-clock windows, not scaled)
        assert rehearsal["work_seconds"] < real["work_seconds"] / 10, (rehearsal["work"], real["work"])


def test_a_policy_file_is_known_by_its_name_and_a_rollback_keeps_it_and_reports_its_own_run(tmp_path: Path) -> None:
    """Before: a policy file showed as `<inline policy>` in the report, `list` and the Prefect tag;
    `rollback` defaulted to `--policy canary` and rewrote the rollout's policy in `list`; the
    rollback report's duration was the rollout's lifetime; `status` showed no backend."""
    from prefect.client.orchestration import get_client

    with sc.cluster(tmp_path, general=2) as c:
        kc = str(c.kubeconfig)
        config = tmp_path / "k.yaml"
        config.write_text(sc.config_text(sc.gateway(c), maxPods=62))
        weekend = tmp_path / "weekend.yaml"
        weekend.write_text(sc.policy(name="weekend", steps=[1, "100%"]))
        started = json.loads(cli("start", "--config", str(config), "-p", str(weekend), "--name", "fh1",
                                 "--kubeconfig", kc, "-o", "json"))
        assert started["outcome"] == "completed", started["message"]
        assert "policy: `weekend`" in started["report"] and "<inline policy>" not in started["report"]
        with get_client(sync_client=True) as client:
            assert "policy:weekend" in client.read_flow_run(started["flow_run_id"]).tags

        status = cli("status", "fh1", "--kubeconfig", kc)
        assert "backend" in status and "dkc" in status  # each node's backend, as the README says

        time.sleep(2)  # the rollback runs later than the rollout: its report must not count that
        rollback_began = datetime.now(timezone.utc).replace(microsecond=0)
        rolled_back = json.loads(cli("rollback", "fh1", "--policy", "fast", "--kubeconfig", kc, "-o", "json"))
        assert rolled_back["outcome"] == "rolled-back", rolled_back["message"]
        report = rolled_back["report"]
        began = re.search(r"from (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC to", report)
        assert began and datetime.strptime(began.group(1), "%Y-%m-%d %H:%M:%S").replace(
            tzinfo=timezone.utc) >= rollback_began, report
        listed = {r["name"]: r for r in json.loads(cli("list", "--kubeconfig", kc, "-o", "json"))}
        assert listed["fh1"]["policy"] == "weekend"  # the rollback's --policy did not rewrite it
