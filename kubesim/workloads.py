"""The cluster file's workloads as API objects: namespaces, ReplicaSets, DaemonSets and budgets.

Created once the nodes are Ready (so the scheduler spreads the pods over all of them, rather than
packing the first nodes to register), by the controller identity; on a restart on the same state
dir whatever already exists is left as it is. The objects are all there is: the owner controller
creates the pods, the scheduler places them, the kubelets run them (``kubesim.owners``,
``kubesim.scheduler``, ``kubesim.kubelet.apipods``).

``podsPerNode: N`` stands for a busy cluster: ``ceil(N * nodes / 10)`` ReplicaSets of 10
replicas in the namespace ``workloads``, each under a budget of ``maxUnavailable: 1``, so every
node carries about N pods.
"""

from __future__ import annotations

import math
from typing import Any

from kubesim.apiserver import ApiError
from kubesim.apiserver.client import local_client
from kubesim.clusterfile import Budget, Workload
from kubesim.controllers import CONTROLLER_USER

PODS_PER_NODE_NAMESPACE = "workloads"
PODS_PER_NODE_REPLICAS = 10


def pods_per_node_workloads(pods_per_node: int, nodes: int) -> list[Workload]:
    count = math.ceil(pods_per_node * nodes / PODS_PER_NODE_REPLICAS)
    width = len(str(count))
    return [
        Workload(name=f"app-{i:0{width}d}", namespace=PODS_PER_NODE_NAMESPACE, replicas=PODS_PER_NODE_REPLICAS,
                 pdb=Budget(maxUnavailable=1))
        for i in range(1, count + 1)
    ]


def pod_labels(workload: Workload) -> dict[str, str]:
    return {"app": workload.name, **workload.labels}


def pod_template(workload: Workload) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": workload.image}
    spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": workload.termination_grace_period_seconds,
    }
    if workload.empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        container["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    return {"metadata": {"labels": pod_labels(workload)}, "spec": spec}


def owner_object(workload: Workload) -> tuple[str, dict[str, Any]]:
    """``(collection path, body)`` of the workload's ReplicaSet or DaemonSet."""
    spec: dict[str, Any] = {"selector": {"matchLabels": pod_labels(workload)}, "template": pod_template(workload)}
    if workload.kind == "ReplicaSet":
        spec["replicas"] = 1 if workload.replicas is None else workload.replicas
    resource = "replicasets" if workload.kind == "ReplicaSet" else "daemonsets"
    body = {"apiVersion": "apps/v1", "kind": workload.kind,
            "metadata": {"name": workload.name, "labels": pod_labels(workload)}, "spec": spec}
    return f"/apis/apps/v1/namespaces/{workload.namespace}/{resource}", body


def budget_object(workload: Workload) -> tuple[str, dict[str, Any]] | None:
    if workload.pdb is None:
        return None
    spec: dict[str, Any] = {"selector": {"matchLabels": pod_labels(workload)}}
    if workload.pdb.min_available is not None:
        spec["minAvailable"] = workload.pdb.min_available
    else:
        spec["maxUnavailable"] = workload.pdb.max_unavailable
    body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": workload.name},
            "spec": spec}
    return f"/apis/policy/v1/namespaces/{workload.namespace}/poddisruptionbudgets", body


async def create_workloads(server: Any, workloads: list[Workload]) -> None:
    """Create what is missing: namespaces first, then each budget before its owner (so no pod
    runs uncovered for a moment)."""
    client = local_client(server, user=CONTROLLER_USER)
    for namespace in sorted({w.namespace for w in workloads}):
        await _create(client, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    for workload in workloads:
        budget = budget_object(workload)
        if budget is not None:
            await _create(client, *budget)
        await _create(client, *owner_object(workload))


async def _create(client: Any, path: str, body: dict[str, Any]) -> None:
    try:
        await client.create(path, body)
    except ApiError as exc:
        if exc.code != 409:  # already there: a restart on the same state dir
            raise
