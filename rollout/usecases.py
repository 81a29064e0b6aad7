"""The read-only and publishing commands, Prefect-free: validate, export, diff, plan, publish, status.

Each takes the narrowest port of ``rollout.ports`` it uses and returns plain data for the CLI to
render. Which nodes take part is ``rollout.planner.candidate_nodes`` - the same rule the rollout
itself applies - and the DKC danger review is ``rollout.prepare.review_against_nodes``'s rule, so
``validate``, ``plan`` and ``diff`` never call valid what ``start`` would refuse.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from rollout.errors import ConfigError, NotFoundError
from rollout.kubeletconfig import dkc_refusals, export_from_configz, load_config, review_changes, validate_config
from rollout.model import ConfigRef, NodeObservation
from rollout.names import CONFIG_BASE_NAME, SYSTEM_NAMESPACE
from rollout.planner import candidate_nodes, plan_batches
from rollout.policy import RolloutPolicy, load_policy_ref
from rollout.policy.durations import format_duration
from rollout.ports import ClusterForDiff, ClusterForPlan, ConfigStore, NodeReader, RunningConfigs
from rollout.prepare import DKC_REFUSED, dropin_review
from rollout.publish import build_configmap
from rollout.status import rollout_status

__all__ = ["diff_against_nodes", "export_node_config", "preview_plan", "publish_config_text",
           "rollout_status", "selected_policy", "validate_config_text"]


def selected_policy(policy_ref: str | None, selector: str | None) -> RolloutPolicy:
    """The policy, with its node selector overridden when one is given."""
    policy = load_policy_ref(policy_ref)
    if selector:
        policy = policy.model_copy(update={"nodes": policy.nodes.model_copy(update={"selector": selector})})
    return policy


def validate_config_text(text: str, *, source: str = "config", policy: RolloutPolicy | None = None) -> dict[str, Any]:
    """Validate a KubeletConfiguration; ConfigError (listing every problem) when it is invalid.

    With a ``policy``, also the DKC danger rule start applies (``dkc_refusals`` with the policy's
    allowFields; offline, so against the kubelet defaults): valid never means start will refuse.
    """
    result = validate_config(text)
    if not result.ok or result.config is None:
        raise ConfigError("invalid KubeletConfiguration", source=source, problems=[str(p) for p in result.errors])
    if policy is not None:
        refusals = dkc_refusals(result.config.document, allow_fields=policy.allow_fields)
        if refusals:
            raise ConfigError(DKC_REFUSED, source=source, problems=[str(r) for r in refusals])
    return {"valid": True, "warnings": [str(p) for p in result.warnings]}


def export_node_config(gateway: RunningConfigs, node: str) -> dict[str, Any]:
    """A node's effective config (configz) as a valid KubeletConfiguration document."""
    return export_from_configz(gateway.configz(node))


def _chosen(gateway: NodeReader, policy: RolloutPolicy) -> list[NodeObservation]:
    nodes, _ = gateway.list_nodes()
    return candidate_nodes(nodes, policy)


def diff_against_nodes(gateway: ClusterForDiff, text: str, *, policy_ref: str | None, selector: str | None,
                       only: set[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Field-level diff of ``text`` against each selected node's running config (of the nodes in
    ``only``, when given: a plan asks only the nodes it would change)."""
    new = load_config(text).document
    policy = selected_policy(policy_ref, selector)
    out: dict[str, list[dict[str, Any]]] = {}
    for node in _chosen(gateway, policy):
        if only is not None and node.name not in only:
            continue
        active = export_node_config(gateway, node.name)
        # a node run by the agent gets a drop-in: the diff is of the merge its kubelet will run,
        # and a field a drop-in read after ours overrides shows with the file that wins
        dropin = dropin_review(node, active, new) if node.backend == "agent" else None
        effective = dropin.merged if dropin else new
        review = review_changes(effective, active, allowed_fields=set(policy.allow_fields))
        refused = {r.change.path for r in review.refusals}
        changes = {c.path: {"field": c.path, "old": c.old, "new": c.new, "dkc": c.dkc_warning,
                            "explicit": c.explicit, "refused": c.path in refused} for c in review.changes}
        for o in dropin.overrides if dropin else ():  # start refuses these: say which file wins
            entry = changes.setdefault(o.field, {"field": o.field, "old": o.value_in(active), "new": o.theirs})
            entry.update({"dropin": o.ours, "overriddenBy": o.file, "refused": True})
        out[node.name] = list(changes.values())
    return out


def preview_plan(gateway: ClusterForPlan, *, config_text: str | None, policy_ref: str | None, selector: str | None,
                 rollout: str = "preview") -> dict[str, Any]:
    """The batches a rollout would run now (nothing is written)."""
    policy = selected_policy(policy_ref, selector)
    if config_text is not None:
        manifest = build_configmap(SYSTEM_NAMESPACE, base_name=CONFIG_BASE_NAME, config_text=config_text,
                                   rollout_name="preview")  # the name does not depend on the label
        target = ConfigRef(SYSTEM_NAMESPACE, manifest["metadata"]["name"])
        try:
            target = gateway.resolve(target)
        except NotFoundError:
            pass  # not published yet: nothing is on it
    else:
        target = ConfigRef(SYSTEM_NAMESPACE, "kubelet-config-unpublished")
    nodes, _ = gateway.list_nodes()
    # the rollout would refuse a cluster without DKC before any write: so does its preview
    gateway.probe_cluster(candidate_nodes(nodes, policy))
    plan = plan_batches(nodes, policy, rollout=rollout, target=target, now=datetime.now(timezone.utc))
    seconds = round(plan.estimated_duration.total_seconds())
    changes = diff_against_nodes(gateway, config_text, policy_ref=policy_ref, selector=selector,
                                 only=set(plan.nodes)) if config_text is not None else {}
    backends = {n.name: n.backend or "none" for n in nodes}
    return {
        "name": rollout,
        "policy": policy.name,
        "target": str(target),
        "backends": {b: sum(1 for v in backends.values() if v == b) for b in sorted(set(backends.values()))},
        "estimate": format_duration(timedelta(seconds=seconds)),
        "estimate_seconds": seconds,
        "max_unavailable": plan.max_unavailable,
        "batches": [{"index": b.index + 1, "label": b.name, "step": b.step, "nodes": list(b.nodes),
                     "backends": [backends.get(n, "none") for n in b.nodes]} for b in plan.batches],
        "skipped": [{"node": s.node, "reason": s.reason} for s in plan.skipped],
        "changes": changes,
    }


def publish_config_text(gateway: ConfigStore, text: str, *, namespace: str = SYSTEM_NAMESPACE, source: str = "config",
                        rollout: str = "manual") -> tuple[ConfigRef, bool]:
    """Validate and publish; returns (resolved ConfigRef, created?)."""
    validate_config_text(text, source=source)
    manifest = build_configmap(namespace, base_name=CONFIG_BASE_NAME, config_text=text, rollout_name=rollout)
    name = manifest["metadata"]["name"]
    try:
        gateway.read_configmap(name, namespace=namespace)
        existed = True
    except NotFoundError:
        existed = False
    return gateway.publish_configmap(manifest), not existed
