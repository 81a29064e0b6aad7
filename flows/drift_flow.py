"""`kubelet-config-drift`: the drift watch on a schedule (the `drift` deployment).

A thin shell around the core (``rollout.usecases.drift``, judged by ``rollout.drift``), which
does the work: every selected node's running config (configz) against what its last completed
rollout proved. Prefect adds what a schedule needs: a table artifact of the nodes, a log line per
drifted node, and one Prefect event ``kubelet-rollout.node.drifted`` per drifted node (resource
``kubelet-rollout.node.<node>``, the fields in its payload), for an automation to route (notify,
or start a deployment run). The run ends Completed whatever it finds (drift is a finding, not a
failure of the watch); it fails only when the cluster cannot be read.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact

from flows.events import emit_node_drifted
from rollout.drift import DriftState, counts
from rollout.gateway import open_gateway
from rollout.policy import DEFAULT_POLICY
from rollout.usecases import selected_policy
from rollout.usecases.drift import drift_report, record_drift_events


ARTIFACT_ROWS = 1000  # a 5,000-node fleet's table stays one the UI shows


@flow(name="kubelet-config-drift", flow_run_name="drift", log_prints=False)
def kubelet_config_drift(
    policy: str = DEFAULT_POLICY,
    node_selector: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    events: bool = True,
) -> dict[str, Any]:
    """Does every node still run the config its last completed rollout proved? One configz read
    per managed node, within the policy's ``apiQps``; a Kubernetes Event (``KubeletConfigDrift``)
    and a Prefect event (``kubelet-rollout.node.drifted``) per drifted node. ``policy``: a shipped
    name or its YAML (its node selector and rate limit); ``node_selector`` overrides its selector.
    Returns the counts and the drifted nodes with their fields (`rollout drift -o json`'s nodes)."""
    logger = get_run_logger()
    chosen = selected_policy(policy, node_selector)
    gateway = open_gateway(kubeconfig, context)
    gateway.limit_rate(chosen.api_qps, chosen.api_burst)
    results = drift_report(gateway, policy=chosen)
    if events:
        record_drift_events(gateway, results)
    drifted = [r.as_json() for r in results if r.state is DriftState.DRIFTED]
    for node in drifted:
        logger.warning("%s drifted from %s (%s): %s", node["node"], node["rollout"], node["configmap"],
                       "; ".join(f"{f['field']}: expected {f['expected']!r}, running {f['running']!r}"
                                 for f in node["fields"]))
        emit_node_drifted(node["node"], rollout=node["rollout"], configmap=node["configmap"], fields=node["fields"])
    tally = counts(results)
    logger.info("%d node(s): %s", len(results), ", ".join(f"{n} {state}" for state, n in tally.items() if n))
    create_table_artifact(key="kubelet-config-drift",
                          description=f"Nodes not in sync with what their last rollout proved ({len(results)} "
                                      f"checked; the first {ARTIFACT_ROWS} shown)",
                          table=[{"node": r.node, "state": r.state.value,
                                  "fields": "; ".join(str(f) for f in r.fields) or r.reason,
                                  "proved by": f"{r.proof.rollout} ({r.proof.configmap})" if r.proof else ""}
                                 for r in results if r.state is not DriftState.IN_SYNC][:ARTIFACT_ROWS])
    return {"counts": tally, "drifted": drifted}


__all__ = ["kubelet_config_drift"]
