"""The cluster file's workloads as API objects: namespaces, ReplicaSets, DaemonSets and budgets.

Created once the nodes are Ready (so the scheduler spreads the pods over all of them, rather than
packing the first nodes to register), by the controller identity; on a restart on the same state
dir whatever already exists is left as it is. The objects are all there is: the owner controller
creates the pods, the scheduler places them, the kubelets run them (``kubesim.owners``,
``kubesim.scheduler``, ``kubesim.kubelet.apipods``).

The ReplicaSets created here get their first pods at once, in bulk (:func:`start_pods`): each pod
created, bound and started in one store write - the object the owner controller's create, the
scheduler's binding and its kubelet's status update would leave (the scheduler's own placement,
the kubelet's own status, every step checked as in its request), without the three round trips
per pod and their per-request audit events. At 5,000 nodes x 30 pods the round trips are what
kept 150,000 pods from running within minutes. What happens to them afterwards (an eviction, a
drain, a scale change, a replacement) goes through the controllers and the API as before.

``podsPerNode: N`` stands for a busy cluster: ``ceil(N * nodes / 10)`` ReplicaSets of 10
replicas in the namespace ``workloads``, each under a budget of ``maxUnavailable: 1``, so every
node carries about N pods.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
from typing import Any

from kubesim.apiserver import ApiError
from kubesim.apiserver.authz import User
from kubesim.apiserver.client import LocalClient, local_client
from kubesim.clusterfile import Budget, Workload
from kubesim.controllers import CONTROLLER_USER
from kubesim.kubelet.apipods import PodWorkers
from kubesim.owners import OwnerController, pod_for
from kubesim.scheduler import Scheduler

log = logging.getLogger("kubesim.workloads")

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


async def create_workloads(server: Any, workloads: list[Workload]) -> list[dict[str, Any]]:
    """Create what is missing: namespaces first, then each budget before its owner (so no pod
    runs uncovered for a moment). Returns the ReplicaSets created now (not those a restart on the
    same state dir found): theirs are the pods :func:`start_pods` may create."""
    client = local_client(server, user=CONTROLLER_USER, shared=True)
    for namespace in sorted({w.namespace for w in workloads}):
        await _create(client, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    created = []
    for index, workload in enumerate(workloads):
        if index % 200 == 199:
            await asyncio.sleep(0)  # 30,000 objects at 5,000 nodes: heartbeats go between
        budget = budget_object(workload)
        if budget is not None:
            await _create(client, *budget)
        owner = await _create(client, *owner_object(workload))
        if owner is not None and workload.kind == "ReplicaSet":
            created.append(owner)
    return created


async def _create(client: LocalClient, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return await client.create(path, body)
    except ApiError as exc:
        if exc.code != 409:  # already there: a restart on the same state dir
            raise
        return None


async def start_pods(server: Any, replica_sets: list[dict[str, Any]], owners: OwnerController,
                     scheduler: Scheduler, pod_workers: PodWorkers, *, batch: int = 500) -> int:
    """The pods of ``replica_sets`` (just created, without pods), each created from its template,
    placed by the scheduler's rule, bound and - its kubelet running - started, in one write
    (``Registry.create_started_pod``); the controllers are told (``expect``, ``assume``) before
    their informers bring the pods. The owner controller must be held meanwhile (``hold``): it
    would otherwise create the same pods through the API. A pod that fits no node now is left to
    the owner controller, which creates it through the API to wait for room as any pod. Yields to
    the event loop every ``batch`` pods, so heartbeats are not held up. Returns the pods created."""
    collecting = gc.isenabled()
    gc.disable()  # 150,000 pods add millions of containers: full collections would walk them again and again
    try:
        return await _start_pods(server, replica_sets, owners, scheduler, pod_workers, batch)
    finally:
        if collecting:
            gc.enable()


async def _start_pods(server: Any, replica_sets: list[dict[str, Any]], owners: OwnerController,
                      scheduler: Scheduler, pod_workers: PodWorkers, batch: int) -> int:
    registry = server.registry
    controller = User.of(CONTROLLER_USER)
    count = 0
    for owner in replica_sets:
        namespace = owner["metadata"]["namespace"]
        for _ in range(int((owner.get("spec") or {}).get("replicas", 1))):
            body = pod_for(owner, "ReplicaSet")
            node = scheduler.pick(body)
            if node is None:
                break
            status = (lambda pod, node=node: pod_workers.started_status(node, pod)) if pod_workers.alive(node) else None
            stored = _create_started_pod(registry, namespace, body, controller, node, status)
            if stored is None:  # the owner controller creates the rest
                log.warning("starting the pods of %s/%s: the API refused one", namespace, owner["metadata"]["name"])
                break
            key = f"{namespace}/{stored.name}"
            scheduler.assume(key, node)
            owners.expect(owner, key)
            count += 1
            if count % batch == 0:
                await asyncio.sleep(0)
    return count


def _create_started_pod(registry: Any, namespace: str, body: dict[str, Any], user: User, node: str,
                        status: Any, attempts: int = 3) -> Any:
    """``Registry.create_started_pod``, again on a generated name already taken (a 409, which the
    real API server answers too: 5 letters of 27 repeat among 150,000 pods now and then)."""
    for attempt in range(attempts):
        try:
            return registry.create_started_pod(namespace, body, user, node, status)
        except ApiError as exc:
            if exc.code != 409 or attempt == attempts - 1:
                log.debug("a pod of %s in %s: %s", body["metadata"].get("generateName"), namespace, exc)
                return None
    return None
