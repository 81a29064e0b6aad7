"""The node lifecycle controller: a stall of the simulator itself is not a node failure.

The kubelets and the controller share one event loop. When it stalls (a busy test process, a
slow CI machine), every heartbeat is late at once; a real fleet never behaves like that, and
treating it as a node failure made rollouts revert healthy nodes in tests.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from kubernetes import client, config

from kubesim.clusterfile import CONTROL_PLANE_LABEL
from tests.kubesim.kubelet_helpers import ready_condition, ready_status, wait_for

SCALE = 40.0  # node-monitor grace 40 s -> 1 s real; lease renewal 10 s -> 0.25 s


def ready_transitions(api: client.CoreV1Api, nodes: list[str]) -> dict[str, Any]:
    return {node: (cond["status"], cond["lastTransitionTime"]) for node in nodes
            for cond in [ready_condition(api, node)]}


def last_heartbeat(api: client.CoreV1Api, coordination: client.CoordinationV1Api, node: str) -> float:
    """The newest heartbeat a node left: its Lease's renewal or its Ready condition's heartbeat."""
    lease = coordination.read_namespaced_lease(node, "kube-node-lease")
    ready = ready_condition(api, node)
    beats = [lease.spec.renew_time, datetime.fromisoformat(ready["lastHeartbeatTime"].replace("Z", "+00:00"))]
    return max(beat.timestamp() for beat in beats)


async def freeze_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # blocks the simulator's event loop: no heartbeat, no controller pass


def test_a_stalled_simulator_marks_no_node_unknown_but_a_silent_node_still_goes_unknown(kubesim_cluster) -> None:
    cluster = kubesim_cluster(nodes=2, time_scale=SCALE)
    api_client = config.new_client_from_config(str(cluster.kubeconfig))
    api, coordination = client.CoreV1Api(api_client), client.CoordinationV1Api(api_client)
    workers = [
        n.metadata.name
        for n in api.list_node(label_selector=f"!{CONTROL_PLANE_LABEL}").items
    ]
    assert len(workers) == 2
    before = ready_transitions(api, workers)
    assert {status for status, _ in before.values()} == {"True"}

    cluster.run(freeze_the_loop(3.0))  # three times the grace
    time.sleep(1.0)  # several controller passes and lease renewals after the stall
    assert ready_transitions(api, workers) == before

    cluster.faults.partition(workers[0])
    try:
        wait_for(lambda: ready_status(api, workers[0]) == "Unknown", timeout=10, what="Ready=Unknown")
        seen_unknown = time.time()
        # The grace runs from the node's last heartbeat, which may come up to one renewal before
        # the partition: timing from the partition itself would race the kubelet's renewal.
        assert seen_unknown - last_heartbeat(api, coordination, workers[0]) >= 40.0 / SCALE
        assert ready_status(api, workers[1]) == "True"
    finally:
        cluster.faults.heal(workers[0])
    wait_for(lambda: ready_status(api, workers[0]) == "True", timeout=10, what="Ready again after healing")


def test_a_lease_on_a_slowed_clock_says_how_long_it_lasts_in_real_seconds(kubesim_cluster) -> None:
    """At half speed a kubelet renews every 20 s of wall time: its Lease says 80 s, keeping a real
    kubelet's margin (renewed at a quarter of its duration), so one late renewal of an overloaded
    simulator is not a stale Lease. A faster clock keeps the configured 40 s."""
    coordination = client.CoordinationV1Api(config.new_client_from_config(
        str(kubesim_cluster(nodes=1, time_scale=0.5, ready_timeout=60).kubeconfig)))
    slowed = coordination.list_namespaced_lease("kube-node-lease").items
    assert slowed and {lease.spec.lease_duration_seconds for lease in slowed} == {80}
    coordination = client.CoordinationV1Api(config.new_client_from_config(
        str(kubesim_cluster(nodes=1, time_scale=SCALE).kubeconfig)))
    assert {lease.spec.lease_duration_seconds for lease in coordination.list_namespaced_lease("kube-node-lease").items} == {40}
