"""One clock for a rehearsal (issue 36): agents and rollout on kubesim's clock, or a refusal.

kubesim 1.31 at x20, the node agents as their own process (`kubelet-rollout-agent run
--kubesim-fleet`), the rollout through the CLI. Agents started with wall-clock timers
(`--time-scale 1`: a 30 s health wait) cannot report a node active within the rehearsal's
deadline (`fast`: 3m / 20 = 9s): `plan` and `start` refuse that before anything is written,
naming the nodes, the agent's flag and the deadline; an agent faster than kubesim is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rollout_cli.main import EXIT_INVALID, app

pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, "-m", "kubelet_rollout_agent", "run", "--guard-python", sys.executable]
runner = CliRunner()


@pytest.fixture
def modern(tmp_path: Path) -> Iterator[Any]:
    from kubesim.cluster import Cluster

    with Cluster(nodes=3, state_dir=tmp_path / "sim", time_scale=20, kubernetes_version="1.31") as cluster:
        yield cluster


def _agents(cluster: Any, *flags: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([*AGENT, "--kubeconfig", str(cluster.kubeconfig), "--kubesim-fleet", str(cluster.state_dir),
                             *flags], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _advertised(cluster: Any) -> dict[str, Any]:
    """Each node's kubelet-rollout.io/agent, read (JSON) once every node has one."""
    from rollout.gateway import open_gateway

    gateway = open_gateway(str(cluster.kubeconfig))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            nodes = gateway.list_nodes()[0]
            found = {o.name: o.annotations.get("kubelet-rollout.io/agent") for o in nodes}
            if all(found.values()):
                return {name: json.loads(value or "{}") for name, value in found.items()}
            time.sleep(0.5)
        raise AssertionError(f"the agents never advertised themselves: {found}")
    finally:
        gateway.close()


def _stop(agents: subprocess.Popen[str]) -> str:
    agents.terminate()
    return agents.communicate(timeout=60)[0]


def test_agents_on_wall_clock_time_under_a_rehearsal_are_refused_before_anything_is_written(
        modern: Any, tmp_path: Path) -> None:
    faster = subprocess.run([*AGENT, "--kubeconfig", str(modern.kubeconfig), "--kubesim-fleet", str(modern.state_dir),
                             "--time-scale", "40"], capture_output=True, text=True, timeout=120, check=False)
    said = " ".join((faster.stdout + faster.stderr).split())
    assert faster.returncode == 2 and "faster than kubesim's clock (x20)" in said and "Traceback" not in said, said

    agents = _agents(modern, "--time-scale", "1")
    try:
        advertised = _advertised(modern)
        assert {a["timeScale"] for a in advertised.values()} == {1} and advertised["node-1"]["seconds"]["healthWait"] == 30
        dropin = tmp_path / "dropin.yaml"
        dropin.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 150\n")
        common = ["-c", str(dropin), "-p", "fast", "--time-scale", "20", "--kubeconfig", str(modern.kubeconfig)]
        for command in (["plan", *common], ["start", *common, "--name", "maxpods-150"]):
            result = runner.invoke(app, command, env={"COLUMNS": "400"})
            said = " ".join(result.output.split())
            assert result.exit_code == EXIT_INVALID, said
            assert "progressDeadline: 9s (3m / --time-scale 20)" in said and "node-1, node-2, node-3" in said, said
            assert "--health-wait 30s" in said and "nothing was written" in said and "Traceback" not in said, said
        from rollout.gateway import open_gateway

        gateway = open_gateway(str(modern.kubeconfig))
        try:
            assert not any("kubelet-rollout.io/desired-config" in o.annotations for o in gateway.list_nodes()[0])
            configmaps = gateway.core.list_namespaced_config_map("kube-system").items
            assert not [cm.metadata.name for cm in configmaps if cm.metadata.name.startswith("kubelet-config-")]
        finally:
            gateway.close()
    finally:
        _stop(agents)


def test_agents_on_kubesim_take_their_flags_on_its_clock(modern: Any) -> None:
    agents = _agents(modern, "--trial", "30s")  # docs/agent.md's flag before issue 36
    try:
        advertised = _advertised(modern)
    finally:
        output = _stop(agents)
    assert {a["timeScale"] for a in advertised.values()} == {20}
    assert advertised["node-1"]["seconds"] == {"healthWait": 1.5, "trial": 1.5, "tick": 0.25}
    assert "on the hosts' clock, x20: --trial 1.5s, --health-deadline 6s, --health-wait 1.5s" in output, output
