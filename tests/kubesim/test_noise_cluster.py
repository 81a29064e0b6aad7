"""Fleet noise in a running cluster: the cluster file's noise section reaches every kubelet's
workload, and a shift injected at run time (Python, CLI, the faults endpoint) reaches every node alike.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import wait_for

CLUSTER = """
apiVersion: kubesim.kubelet-rollout.io/v1
kind: Cluster
noise:
  preset: fleet
  seed: 3
  shifts: [{at: 0s, for: 1000h, memory: 1.1}]
pools:
  - {name: general, count: 2}
"""


def workload(cluster, node: str):  # thread mode: the in-process kubelet behind the node proxy
    return cluster.api.node_proxy[node].__self__.workload


def test_noise_and_shifts_reach_every_node_of_a_running_cluster(kubesim_cluster, tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    cluster = kubesim_cluster(cluster_file=path, time_scale=60)
    nodes = ["general-1", "general-2"]
    assert all(workload(cluster, n).noise.preset == "fleet" for n in nodes)
    assert workload(cluster, nodes[0]).slowness != workload(cluster, nodes[1]).slowness  # hosts differ
    assert {workload(cluster, n).factors().memory for n in nodes} == {1.1}  # the file's shift

    shown = cluster.faults.shift(pod_start=2.0, for_="10m")
    assert [s["podStart"] for s in shown["shifts"]] == [2.0]
    assert {workload(cluster, n).factors().pod_start for n in nodes} == {2.0}

    def cli(*args: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "kubesim", "fault", "--kubeconfig", str(cluster.kubeconfig),
                               "shift", *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert len(cli("--for", "5m", "--churn", "3")["shifts"]) == 2
    assert {workload(cluster, n).factors().churn for n in nodes} == {3.0}
    assert cli("--end")["shifts"] == []
    assert {workload(cluster, n).factors().pod_start for n in nodes} == {1.0}

    def served() -> bool:
        status, text = cluster.api.node_proxy[nodes[0]]("metrics")
        return status == 200 and \
            'kubelet_runtime_operations_duration_seconds_bucket{operation_type="pull_image",le="0.005"}' in str(text)

    wait_for(served, timeout=30, what="pull_image durations on /metrics")
