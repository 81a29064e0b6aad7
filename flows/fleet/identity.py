"""Which cluster each work pool's workers reach: ``rollout fleet validate``'s probe.

A cluster's run checks the cluster it reaches before any write (``rollout.identity``), so a
miswired worker refuses its rollout. This finds it before the fleet starts: one small flow run per
cluster (:func:`kubelet_config_cluster_identity`, copied onto each pool like the rollout
deployment: ``kubelet-config-cluster-identity/identity@<pool>``) opens the cluster with the
credentials its worker holds, reads its identity (one GET) and compares it with the fleet file's.
It writes nothing. A pool with no live worker shows as a probe nobody picked up in time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from uuid import UUID

from prefect import flow, get_run_logger

from flows.fleet.runs import cluster_tag, pool_deployment
from flows.outcome import RunEnd, ended, refuses_quietly
from rollout.fleet import FleetPlan
from rollout.gateway import open_gateway
from rollout.identity import ClusterIdentity, check_cluster
from rollout.outcome import Outcome

PROBE_DEPLOYMENT = "kubelet-config-cluster-identity/identity"


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
    finally:
        gateway.close()
    check_cluster(ClusterIdentity.from_params(expected), reached, named=cluster_name)
    get_run_logger().info("cluster %s: %s", cluster_name, reached.describe())
    return ended(Outcome.COMPLETED, f"cluster {cluster_name}: {reached.describe()}")


@dataclass(frozen=True)
class ProbeResult:
    cluster: str
    work_pool: str
    ok: bool
    message: str


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
        return ProbeResult(cluster_name, pool, True, "reaches its cluster")
    return ProbeResult(cluster_name, pool, False, state.message or f"the probe ended {state.name}")


__all__ = ["PROBE_DEPLOYMENT", "ProbeResult", "kubelet_config_cluster_identity", "probe_clusters"]
