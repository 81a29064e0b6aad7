"""Which cluster each work pool's workers reach: ``rollout fleet validate``'s probe.

A cluster's run checks the cluster it reaches before any write (``rollout.identity``), so a
miswired worker refuses its rollout. This finds it before the fleet starts: one small flow run per
cluster (:func:`kubelet_config_cluster_identity`, copied onto each pool like the rollout
deployment: ``kubelet-config-cluster-identity/identity@<pool>``) opens the cluster with the
credentials its worker holds, reads its identity (one GET) and compares it with the fleet file's,
then counts the cluster's nodes (one list of one node) and puts the count on its own flow run as
the label ``kubelet-rollout.io/nodes``: what a disruption budget given as a share of the fleet is a
share of. It writes nothing to the cluster. A pool with no live worker shows as a probe nobody
picked up in time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from uuid import UUID

from prefect import flow, get_run_logger

from flows.fleet.runs import cluster_tag, pool_deployment
from flows.outcome import RunEnd, ended, refuses_quietly
from rollout.errors import GatewayError
from rollout.fleet import FleetPlan
from rollout.gateway import open_gateway
from rollout.identity import ClusterIdentity, check_cluster
from rollout.outcome import Outcome

PROBE_DEPLOYMENT = "kubelet-config-cluster-identity/identity"
NODES_LABEL = "kubelet-rollout.io/nodes"  # on a probe's flow run: the nodes of the cluster it reached


@flow(name="kubelet-config-cluster-identity", flow_run_name="identity-{cluster_name}", log_prints=False)
@refuses_quietly
def kubelet_config_cluster_identity(cluster_name: str, expected: dict[str, str], kubeconfig: str | None = None,
                                    context: str | None = None) -> RunEnd:
    """Does this worker's kubeconfig reach cluster ``cluster_name``, identified by ``expected``
    (``server``, ``caSha256``, ``kubeSystemUID``)? Completed if so; failed naming both identities
    if not. Reads one object; writes nothing."""
    gateway = open_gateway(kubeconfig, context)
    try:
        reached = gateway.cluster_identity()
        check_cluster(ClusterIdentity.from_params(expected), reached, named=cluster_name)
        nodes = gateway.node_count()
    finally:
        gateway.close()
    _label_this_run({NODES_LABEL: nodes})
    get_run_logger().info("cluster %s: %s, %d node(s)", cluster_name, reached.describe(), nodes)
    return ended(Outcome.COMPLETED, f"cluster {cluster_name}: {reached.describe()}, {nodes} node(s)")


def _label_this_run(labels: dict[str, bool | int | float | str]) -> None:
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is not None and ctx.flow_run is not None:
        with get_client(sync_client=True) as client:
            client.update_flow_run_labels(ctx.flow_run.id, labels)


@dataclass(frozen=True)
class ProbeResult:
    cluster: str
    work_pool: str
    ok: bool
    message: str
    nodes: int | None = None  # the nodes of the cluster its worker reached (ok only)


def probe_clusters(plan: FleetPlan, *, timeout_s: float, poll_s: float = 1.0) -> list[ProbeResult]:
    """One identity probe per cluster, on its pool, all at once; each cluster's result (a probe
    not finished within ``timeout_s`` is cancelled and says so)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment
    from prefect.states import Cancelled

    runs: dict[str, FlowRun] = {}
    for name, cluster in plan.clusters.items():
        run = run_deployment(pool_deployment(PROBE_DEPLOYMENT, cluster.work_pool), timeout=0, as_subflow=False,
                             parameters={"cluster_name": name, "expected": cluster.identity.given()},
                             tags=[cluster_tag(name), "kubelet-rollout-probe"])
        assert isinstance(run, FlowRun)  # called outside an event loop, it answers at once
        runs[name] = run
    deadline = time.monotonic() + timeout_s
    ended_runs: dict[str, FlowRun] = {}
    with get_client(sync_client=True) as client:
        while True:
            for name, run in runs.items():
                if name not in ended_runs:
                    current = client.read_flow_run(run.id)
                    if current.state is not None and current.state.is_final():
                        ended_runs[name] = current
            if len(ended_runs) == len(runs) or time.monotonic() >= deadline:
                break
            time.sleep(poll_s)
        for name in set(runs) - set(ended_runs):
            # a probe still scheduled never runs after this (Prefect's own rules decide a later one)
            client.set_flow_run_state(UUID(str(runs[name].id)), Cancelled(message="no worker answered in time"))
    return [_result(name, plan.clusters[name].work_pool, ended_runs.get(name), timeout_s) for name in plan.clusters]


def _result(cluster_name: str, pool: str, run: object, timeout_s: float) -> ProbeResult:
    state = getattr(run, "state", None)
    if state is None:
        return ProbeResult(cluster_name, pool, False, f"no worker of pool {pool!r} ran the probe within {timeout_s:g}s: "
                                                      f"start one that holds cluster {cluster_name}'s kubeconfig")
    if state.is_completed():
        nodes = _nodes_label(run)
        counted = f", {nodes} node(s)" if nodes is not None else ""
        return ProbeResult(cluster_name, pool, True, f"reaches its cluster{counted}", nodes)
    return ProbeResult(cluster_name, pool, False, state.message or f"the probe ended {state.name}")


def _nodes_label(run: object) -> int | None:
    value = (getattr(run, "labels", None) or {}).get(NODES_LABEL)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else None


def count_fleet_nodes(plan: FleetPlan, *, timeout_s: float) -> int:
    """Every node of every cluster of the fleet, each counted by its identity probe on its pool;
    ``GatewayError`` (exit 3) naming each cluster whose probe did not answer as named: no cluster
    was started."""
    results = probe_clusters(plan, timeout_s=timeout_s)
    refused = [r for r in results if not r.ok or r.nodes is None]
    if refused:
        raise GatewayError("the disruption budget is a share of the fleet's nodes, which its clusters' identity "
                           "probes count before any cluster starts: "
                           + "; ".join(f"{r.cluster} (pool {r.work_pool}): {r.message}" for r in refused),
                           advice="`rollout fleet validate` names each pool whose workers do not reach the cluster "
                                  "the fleet file names for it; no cluster was started")
    return sum(r.nodes or 0 for r in results)


__all__ = ["NODES_LABEL", "PROBE_DEPLOYMENT", "ProbeResult", "count_fleet_nodes", "kubelet_config_cluster_identity",
           "probe_clusters"]
