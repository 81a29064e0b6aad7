"""The command line: flags are checked before anything touches a node or a host."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kubelet_rollout_agent.cli import _fleet_nodes, app, duration

runner = CliRunner()


def test_durations_are_go_durations() -> None:
    assert duration("1m30s") == timedelta(seconds=90) and duration("500ms") == timedelta(milliseconds=500)
    with pytest.raises(typer.BadParameter):
        duration("ten minutes")


def test_run_without_a_node_is_an_input_error(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                          "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                          "current-context: x\n")
    result = runner.invoke(app, ["run", "--kubeconfig", str(kubeconfig)], env={"NODE_NAME": ""})
    assert result.exit_code == 2 and "--node" in result.output


def test_missing_credentials_are_named(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--node", "n1"], env={"KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""})
    assert result.exit_code == 3 and "in-cluster service account" in result.output


def test_a_kubesim_fleet_is_found_by_its_host_roots(tmp_path: Path) -> None:
    for node in ("node-2", "node-1"):
        (tmp_path / "nodes" / node / "host").mkdir(parents=True)
    (tmp_path / "nodes" / "stray").mkdir()
    assert list(_fleet_nodes(tmp_path)) == ["node-1", "node-2"]


def test_a_health_wait_of_zero_is_refused_before_anything_runs() -> None:
    result = runner.invoke(app, ["run", "--node", "n1", "--health-wait", "0s"], env={"KUBECONFIG": ""})
    assert result.exit_code == 2 and "--health-wait" in result.output and "Traceback" not in result.output
