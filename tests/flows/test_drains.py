"""A change that needs a drain, end to end on today's clusters: kubesim 1.31, real agent code on
every node, the rollout flow, pods and a PodDisruptionBudget as API objects (``drained_fleet``).

``cpuManagerPolicy: static`` (with ``reservedSystemCPUs``) makes a real kubelet refuse to start
over a ``cpu_manager_state`` written under ``none``, so each node is drained and its checkpoint
reset: through 20 nodes under the shipped canary in test_drains_at_fleet_size.py, killed mid-drain
and mid-state-reset (and its rollback) in test_drain_kills.py. Here: a budget that allows nothing
holds the canary's drain; the run names the pod and the budget, and at the timeout gives the node
back and halts, nothing written.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import scenario as sc
import yaml
from kubernetes import client
from test_modern import Agents, dropin, modern_cluster_file, workers

from rollout.names import ANN_CORDONED_BY
from tests.conftest import api_client, wait_for

pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]

PINNING = dropin(cpuManagerPolicy="static", reservedSystemCPUs="0")
GENERAL = {"selector": "kubesim.kubelet-rollout.io/pool=general"}
NAMESPACE = "shop"


@contextmanager
def drained_fleet(tmp_path: Path, general: int, *, replicas: int, budget: dict[str, Any], grace: int = 2,
                  more: tuple[dict[str, Any], ...] = (), **timings: str) -> Iterator[tuple[Any, Agents, list[str]]]:
    """A 1.31 fleet with the agents, and a ReplicaSet ``web`` of ``replicas`` pods under ``budget``
    (and the workloads ``more``, in the same namespace), each pod's terminationGracePeriodSeconds
    ``grace`` at the x20 clock, every pod Running before the rollout starts; ``timings``: kubesim's."""
    from kubesim.cluster import Cluster

    cluster_file = modern_cluster_file(general=general)
    cluster_file["workloads"] = [{"name": "web", "namespace": NAMESPACE, "replicas": replicas, "pdb": budget,
                                  "terminationGracePeriodSeconds": grace},
                                 *({"namespace": NAMESPACE, "terminationGracePeriodSeconds": grace, **w} for w in more)]
    replicas += sum(w["replicas"] for w in more)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster_file))
    with Cluster(cluster_file=path, state_dir=tmp_path / "kubesim", time_scale=20, kubernetes_version="1.31",
                 audit_log=tmp_path / "audit.log", **timings) as c:
        agents = Agents(c)
        try:
            nodes = agents.start_pool("general")
            core = client.CoreV1Api(api_client(c.kubeconfig))
            wait_for(lambda: len(running(core)) == replicas, timeout=60, what="the workload's pods Running")
            yield c, agents, nodes
        finally:
            agents.stop_all()


def running(core: client.CoreV1Api) -> dict[str, str]:
    """The workload's pods that run, and where."""
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(NAMESPACE).items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp}


def evictions(c: Any) -> list[dict[str, Any]]:
    return [e for e in c.audit_log.events(verb="create") if e["objectRef"].get("subresource") == "eviction"]


def test_a_budget_that_allows_nothing_holds_the_canary_then_gives_it_back_and_halts(tmp_path: Path) -> None:
    with drained_fleet(tmp_path, general=2, replicas=6, budget={"minAvailable": "100%"}) as (c, agents, general):
        policy = sc.policy(nodes=GENERAL, steps=[1, "100%"],
                           disruption={"drain": "auto", "timeout": "10s", "onBlocked": "halt"})
        outcome = sc.run(name="held", config=PINNING, policy=policy, kubeconfig=str(c.kubeconfig))
        assert outcome.outcome == "halted", outcome
        assert "onBlocked is halt" in outcome.message and "PodDisruptionBudget" in outcome.message, outcome.message
        assert "web" in outcome.message, outcome.message
        gw = sc.gateway(c)
        for node in workers(c):
            obs = sc.nodes(gw)[node]
            assert not obs.unschedulable and ANN_CORDONED_BY not in obs.annotations, node
            assert "kubelet-rollout.io/desired-config" not in obs.annotations, node  # nothing written
        assert not [e for e in evictions(c) if e["responseStatus"]["code"] == 201]
        refusals = Counter(e["objectRef"]["name"] for e in evictions(c) if e["responseStatus"]["code"] == 429)
        # Each round asks the spent budget once: the canary's first pod every round, the others
        # once (their first refusal), then held on the first's words.
        first, *others = sorted(refusals)
        assert others and refusals[first] >= 3 and {refusals[p] for p in others} == {1}, refusals
