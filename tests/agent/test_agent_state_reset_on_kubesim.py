"""The state reset on kubesim's modern mode: a 1.31 kubelet refuses to start on the static CPU
policy over a ``cpu_manager_state`` written under ``none`` (as a real one does), unless the agent
deletes that file between stopping and starting it.

The test plays the orchestrator's part of the seam (docs/agent.md, "State reset"): it cordons the
node (``spec.unschedulable`` and ``kubelet-rollout.io/cordoned-by``) and writes ``state-reset`` in
the same PATCH as ``desired-config``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

kubesim = pytest.importorskip("kubesim")

from agent_fleet import AgentFleet, fleet_on_kubesim  # noqa: E402
from test_agent_on_kubesim import wait_for  # noqa: E402
from kubelet_rollout_agent import failpoint, names  # noqa: E402
from kubelet_rollout_agent.agent import Timing  # noqa: E402
from kubelet_rollout_agent.decide import Settings, agent_annotation  # noqa: E402
from kubelet_rollout_agent.install import Layout  # noqa: E402

pytestmark = pytest.mark.slow

SETTINGS = Settings(trial=timedelta(seconds=4), health_deadline=timedelta(seconds=40),
                    health_wait=timedelta(seconds=3), crash_threshold=3,
                    agent_annotation=agent_annotation(version="test", config_dir=names.DEFAULT_CONFIG_DIR))
TIMING = Timing(tick=timedelta(seconds=0.5), resync=timedelta(seconds=2), retry=timedelta(seconds=1))
LAYOUT = Layout(python=sys.executable)
ROOT = Path(__file__).resolve().parents[2]
CPU_STATE = "/var/lib/kubelet/cpu_manager_state"
ROLLOUT = "cpu-static"
STATIC = yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                         "cpuManagerPolicy": "static", "reservedSystemCPUs": "0"})
CLUSTER_FILE = {
    "apiVersion": "kubesim.kubelet-rollout.io/v1", "kind": "Cluster", "kubernetesVersion": "1.31",
    "pools": [
        {"name": "cp", "count": 1, "controlPlane": True},
        {"name": "general", "count": 6, "host": {"cgroupDriver": "systemd", "swap": False},
         "kubelet": {"config": {"cgroupDriver": "systemd"}, "unit": {"restart": "always", "restartSec": "10s"}}},
    ],
}


class Fleet(AgentFleet):
    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster, settings=SETTINGS, timing=TIMING, layout=LAYOUT, configmap_prefix="kubelet-static")
        self.nodes = iter(sorted(n for n in cluster.node_names if n.startswith("general-")))

    def patch(self, node: str, *, annotations: dict[str, str | None], unschedulable: bool | None = None) -> None:
        body: dict[str, Any] = {"metadata": {"annotations": annotations}}
        if unschedulable is not None:
            body["spec"] = {"unschedulable": unschedulable}
        self.admin.request("PATCH", f"/api/v1/nodes/{node}", body=body, content_type="application/merge-patch+json")

    def cordon(self, node: str) -> None:
        """The orchestrator's cordon (its drain has nothing to evict on a simulated node)."""
        self.patch(node, annotations={names.ANN_CORDONED_BY: ROLLOUT}, unschedulable=True)

    def assign(self, node: str, desired: dict[str, str] | None, *, reset: bool) -> None:
        """desired-config and, when ``reset``, state-reset for it, in one PATCH."""
        annotations: dict[str, str | None] = {names.ANN_DESIRED: json.dumps(desired) if desired else None}
        if reset:
            annotations[names.ANN_STATE_RESET] = json.dumps({"rollout": ROLLOUT, "files": [CPU_STATE],
                                                            "desired": desired})
        self.patch(node, annotations=annotations)

    def cpu_policy(self, node: str) -> str:
        return str(self.configz(node).get("cpuManagerPolicy") or "")

    def checkpoint(self, node: str) -> str | None:
        """The policy the host's cpu_manager_state was written under; None while it is absent."""
        path = self.root(node) / CPU_STATE.lstrip("/")
        try:
            return str(json.loads(path.read_text())["policyName"])
        except FileNotFoundError:
            return None

    def events(self, node: str, reason: str) -> list[str]:
        items = self.admin.request("GET", f"/api/v1/namespaces/{names.EVENT_NAMESPACE}/events")["items"]
        return [e["message"] for e in items if e["reason"] == reason and e["involvedObject"]["name"] == node]

    def process(self, node: str, kill_at: str | None) -> subprocess.Popen[bytes]:
        """``kubelet-rollout-agent run`` for one host as its own process (a failpoint kills it)."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        env.pop(failpoint.ENV, None)
        if kill_at:
            env[failpoint.ENV] = kill_at
        flags = ["--trial", "4s", "--health-deadline", "40s", "--health-wait", "3s", "--crash-threshold", "3",
                 "--tick", "0.5s", "--resync", "2s", "--guard-python", LAYOUT.python, "--time-scale", "1"]
        return subprocess.Popen([sys.executable, "-m", "kubelet_rollout_agent", "run", "--kubeconfig",
                                 str(self.cluster.kubeconfig), "--node", node, "--host-root", str(self.root(node)),
                                 "--host-control", "kubesim", *flags],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.fixture(scope="module")
def fleet(kubesim_cluster_module: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with fleet_on_kubesim(kubesim_cluster_module, tmp_path_factory, CLUSTER_FILE, Fleet) as running:
        yield running


def _ready(fleet: Fleet) -> str:
    """A node whose kubelet runs the base config and has written its checkpoint under ``none``."""
    node = next(fleet.nodes)
    wait_for("the base kubelet's checkpoint", lambda: fleet.checkpoint(node) == "none")
    return node


def test_a_state_reset_brings_the_kubelet_up_on_static_and_back(fleet: Fleet) -> None:
    node = _ready(fleet)
    fleet.start(node)
    desired = fleet.publish(STATIC)
    fleet.cordon(node)
    fleet.assign(node, desired, reset=True)
    wait_for("active", lambda: fleet.status(node, names.ANN_ACTIVE) == desired)
    assert fleet.cpu_policy(node) == "static"
    assert fleet.checkpoint(node) == "static"  # written by the kubelet after the delete
    [message] = fleet.events(node, names.EVENT_STATE_RESET)
    assert CPU_STATE in message and ROLLOUT in message
    assert fleet.status(node, names.ANN_ERROR) is None
    # withdrawal, the way back to the base config: desired null
    fleet.assign(node, None, reset=True)
    wait_for("back on the base config", lambda: fleet.status(node, names.ANN_ASSIGNED) is None
             and fleet.cpu_policy(node) == "none", timeout=120)
    wait_for("the base kubelet's checkpoint", lambda: fleet.checkpoint(node) == "none")
    assert len(fleet.events(node, names.EVENT_STATE_RESET)) == 2
    assert fleet.status(node, names.ANN_ERROR) is None


def test_without_a_state_reset_the_kubelet_refuses_its_checkpoint_and_is_rolled_back(fleet: Fleet) -> None:
    node = _ready(fleet)
    fleet.start(node)
    fleet.cordon(node)
    fleet.assign(node, fleet.publish(STATIC), reset=False)
    error = wait_for("error", lambda: fleet.status(node, names.ANN_ERROR), timeout=120)
    assert "cpu_manager_state" in error  # the kubelet's own last error line
    wait_for("kubelet back on none", lambda: fleet.cpu_policy(node) == "none")
    assert fleet.checkpoint(node) == "none" and fleet.events(node, names.EVENT_STATE_RESET) == []


def test_a_state_reset_on_a_node_not_cordoned_deletes_nothing(fleet: Fleet) -> None:
    node = _ready(fleet)
    fleet.start(node)
    fleet.assign(node, fleet.publish(STATIC), reset=True)
    [refusal] = wait_for("the refusal", lambda: fleet.events(node, names.EVENT_STATE_RESET_REFUSED))
    assert "not cordoned" in refusal
    # applied with a plain restart: the kubelet refuses the file it still finds, and is rolled back
    # (by the agent or by the host guard, whichever counts the crash loop first)
    wait_for("rolled back", lambda: "cpu_manager_state" in (fleet.status(node, names.ANN_ERROR) or ""), timeout=120)
    wait_for("kubelet back on none", lambda: fleet.cpu_policy(node) == "none")
    assert fleet.checkpoint(node) == "none" and fleet.events(node, names.EVENT_STATE_RESET) == []


@pytest.mark.parametrize("kill_at", ["state-reset", "restart"],
                         ids=["killed after the delete, before the start", "killed after the start, before recording it"])
def test_a_killed_agent_finishes_the_reset_and_never_deletes_after_the_kubelet_started(fleet: Fleet, kill_at: str) -> None:
    node = _ready(fleet)
    first = fleet.process(node, kill_at)
    try:
        wait_for("the agent advertised", lambda: fleet.status(node, names.ANN_AGENT))
        desired = fleet.publish(STATIC)
        fleet.cordon(node)
        fleet.assign(node, desired, reset=True)
        assert first.wait(timeout=90) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
    if kill_at == "state-reset":  # stopped, file gone, nobody started it
        assert fleet.checkpoint(node) is None and fleet.cpu_policy(node) == ""
    else:  # started onto static already: it wrote its own checkpoint
        wait_for("the kubelet's own checkpoint", lambda: fleet.checkpoint(node) == "static")
    fleet.start(node)  # the agent again, without the failpoint
    wait_for("active", lambda: fleet.status(node, names.ANN_ACTIVE) == desired)
    assert fleet.cpu_policy(node) == "static"
    # kubesim's kubelet writes the file once per start: a delete after it started would leave none
    wait_for("last-known-good", lambda: fleet.status(node, names.ANN_LAST_KNOWN_GOOD) == desired)
    assert fleet.checkpoint(node) == "static"
    state = json.loads((fleet.root(node) / LAYOUT.state(names.STATE_FILE).lstrip("/")).read_text())
    assert state["reset"]["step"] == "done"
    # one event: the process killed before its record of the delete never reported it
    assert len(fleet.events(node, names.EVENT_STATE_RESET)) == 1
