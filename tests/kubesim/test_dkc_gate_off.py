"""A 1.22/1.23 API server with the default ``DynamicKubeletConfig=false`` and DKC-enabled kubelets.

The kubelets run their controller and push ``status.config: {}``, but the API server strips a
first-time ``status.config`` and silently drops a new ``spec.configSource`` (reference 3.2, E13),
so an orchestrator's prerequisite probe (section 12 point 2) sees no ``status.config`` and an
assignment never reaches the kubelet: no download, no restart, no event.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from kubernetes import client, config

from kubesim.cluster import Cluster
from tests.kubesim.kubelet_helpers import (
    NodeStore,
    assign,
    cm_ref,
    config_status,
    lease_renew_time,
    node_events,
    payload,
    raw_node,
    ready_status,
    wait_for,
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(nodes=1, gate_enabled=False, time_scale=40, node_monitor_grace="120s", ready_timeout=60) as running:
        yield running


def test_gate_off_api_server_hides_dkc_from_the_orchestrator(cluster: Cluster) -> None:
    api = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    coord = client.CoordinationV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    node = "node-1"
    disk = NodeStore(cluster.node_dir(node))
    wait_for(lambda: (disk.root / "meta" / "assigned").exists(), what="the kubelet's store (DKC is on)")
    api.create_namespaced_config_map("kube-system", {"metadata": {"name": "off-a"}, "data": {"kubelet": payload()}})
    assign(api, node, cm_ref("off-a"))
    assert "configSource" not in raw_node(api, node).get("spec", {})  # 200 OK, field silently dropped
    seen = {lease_renew_time(coord, node)}
    wait_for(lambda: seen.add(lease_renew_time(coord, node)) or len(seen) > 4, what="time to pass")
    assert config_status(api, node) is None
    assert node_events(api, node, "KubeletConfigChanged") == []
    assert disk.assigned is None and ready_status(api, node) == "True"
