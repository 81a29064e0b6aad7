"""The command line: flags are checked before anything touches a node or a host."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kubelet_rollout_agent import names
from kubelet_rollout_agent.agent import Timing
from kubelet_rollout_agent.cli import _fleet_nodes, _wall_clock, app, duration
from kubelet_rollout_agent.decide import Settings

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


def test_a_time_scale_is_refused_on_a_real_node_before_anything_runs() -> None:
    """A real node's clock runs at x1: a faster one would give its kubelet less time than it gets."""
    result = runner.invoke(app, ["run", "--node", "n1", "--time-scale", "20"], env={"KUBECONFIG": ""})
    assert result.exit_code == 2 and "--time-scale" in result.output, result.output
    assert "a real node's clock (x1)" in " ".join(result.output.split()) and "Traceback" not in result.output


def test_the_flags_pass_on_the_hosts_clock_and_the_node_is_told_their_wall_clock_length() -> None:
    """Issue 36, item 3: on kubesim at x20 the agent waited its 30 s health wait in wall-clock
    time, 10 simulated minutes, while the rehearsal's policy gave the node 9 s."""
    given = Settings(trial=timedelta(minutes=10), health_deadline=timedelta(minutes=2),
                     health_wait=timedelta(seconds=30), crash_threshold=3)
    settings, timing = _wall_clock(given, Timing(), 20, config_dir=names.DEFAULT_CONFIG_DIR)
    assert (settings.trial, settings.health_deadline, settings.health_wait) == (
        timedelta(seconds=30), timedelta(seconds=6), timedelta(seconds=1.5))
    assert settings.crash_threshold == 3  # a count, not a duration
    assert (timing.tick, timing.resync) == (timedelta(seconds=0.25), timedelta(seconds=15))
    assert timing.retry == Timing().retry  # an API server or host that failed a request is a real process
    advertised = json.loads(settings.agent_annotation)
    assert advertised["seconds"] == {"healthWait": 1.5, "trial": 30.0, "tick": 0.25} and advertised["timeScale"] == 20
    assert advertised["backend"] == "drop-in" and advertised["configDir"] == names.DEFAULT_CONFIG_DIR
    real, _ = _wall_clock(given, Timing(), 1, config_dir=names.DEFAULT_CONFIG_DIR)
    assert real.health_wait == timedelta(seconds=30) and json.loads(real.agent_annotation)["timeScale"] == 1
