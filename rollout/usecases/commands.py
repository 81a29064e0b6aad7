"""The read-only and publishing commands, Prefect-free: validate, export, diff, plan, publish, status.

Each takes the narrowest port of ``rollout.ports`` it uses and returns plain data for the CLI to
render. Which nodes take part is ``rollout.planner.candidate_nodes`` - the same rule the rollout
itself applies - and every command judges a config with ``rollout.verdict.judge``, read against
the nodes as ``rollout.usecases.prepare.review_against_nodes`` reads them for ``start``: ``validate``,
``diff``, ``plan`` and ``publish`` never call valid what ``start`` would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from rollout.agent_clock import check_agent_clocks
from rollout.errors import FlagError, NotFoundError
from rollout.flags import label_selector
from rollout.kubeletconfig import export_from_configz, load_config, review_changes
from rollout.kubeletconfig.disruption import Disruption, disruption_of
from rollout.model import ConfigRef, NodeObservation
from rollout.names import CONFIG_BASE_NAME, SYSTEM_NAMESPACE
from rollout.planner import RolloutPlan, Schedule, candidate_nodes, estimate_schedule, plan_batches
from rollout.policy import RolloutPolicy, load_policy_ref
from rollout.policy.durations import format_duration
from rollout.ports import ClusterForDiff, ClusterForPlan, ClusterForVerdict, NodeReader, RunningConfigs
from rollout.usecases.prepare import check_rehearsal, review_against_nodes
from rollout.publish import build_configmap
from rollout.usecases.status import final_status, rollout_status
from rollout.timefmt import human, rfc3339_seconds
from rollout.verdict import Verdict, dropin_review, judge

__all__ = ["NodeDiff", "applied_policy", "config_verdict", "diff_against_nodes", "export_node_config", "preview_plan",
           "publish_config_text", "final_status", "refuse_invalid_config", "rollout_status", "selected_policy",
           "validate_config_text"]


def selected_policy(policy_ref: str | None, selector: str | None, *, time_scale: float | None = None) -> RolloutPolicy:
    """The policy a reference names, as a run would apply it (:func:`applied_policy`)."""
    return applied_policy(load_policy_ref(policy_ref), selector, time_scale)


def applied_policy(policy: RolloutPolicy, selector: str | None, time_scale: float | None) -> RolloutPolicy:
    """The policy with its node selector overridden (``--selector``) and divided for a rehearsal
    (``--time-scale``); nothing is parsed again."""
    if selector:
        label_selector(selector)
        policy = policy.model_copy(update={"nodes": policy.nodes.model_copy(update={"selector": selector})})
    if time_scale is not None:
        try:
            policy = policy.rehearsal(time_scale)
        except ValueError as exc:
            raise FlagError(str(exc), source="--time-scale") from None
    return policy


def validate_config_text(text: str, *, source: str = "config", policy_ref: str | None = None) -> Verdict:
    """The verdict on a config with no cluster at hand: a whole config for Dynamic Kubelet Config,
    compared with the kubelet defaults, under the policy (the default one when none is named)."""
    return judge(text, policy=load_policy_ref(policy_ref), default_policy=policy_ref is None)


def refuse_invalid_config(text: str, *, source: str, policy_ref: str | None, suffix: str = "") -> None:
    """Refuse (``ConfigError``) a config the policy refuses offline (the 1.23 rules), before anything
    starts; the verdict against the nodes' running config comes with the run (``rollout.usecases.prepare``)."""
    verdict = validate_config_text(text, source=source, policy_ref=policy_ref)
    if verdict.problems:
        raise verdict.error(source=source, suffix=suffix)


def config_verdict(gateway: ClusterForVerdict, text: str, *, policy_ref: str | None,
                   selector: str | None) -> Verdict:
    """The verdict ``start`` would give, against the nodes that take part (a sample read); a
    cluster ``start`` would refuse (nodes config cannot reach) is refused the same way, first."""
    policy = selected_policy(policy_ref, selector)
    nodes, _ = gateway.list_nodes()
    gateway.probe_cluster(candidate_nodes(nodes, policy))
    return review_against_nodes(gateway, policy, text, {o.name: o for o in nodes}, default_policy=policy_ref is None)


def export_node_config(gateway: RunningConfigs, node: str) -> dict[str, Any]:
    """A node's effective config (configz) as a valid KubeletConfiguration document."""
    return export_from_configz(gateway.configz(node))


def _chosen(gateway: NodeReader, policy: RolloutPolicy) -> list[NodeObservation]:
    nodes, _ = gateway.list_nodes()
    return candidate_nodes(nodes, policy)


@dataclass(frozen=True)
class NodeDiff:
    """One node's diff: its changes (``plan.json#/$defs/change`` each) and what they cost it."""

    changes: list[dict[str, Any]]
    disruption: Disruption


def diff_against_nodes(gateway: ClusterForDiff, text: str, *, policy_ref: str | None, selector: str | None,
                       only: set[str] | None = None) -> dict[str, NodeDiff]:
    """Field-level diff of ``text`` against each selected node's running config (of the nodes in
    ``only``, when given: a plan asks only the nodes it would change), and what it costs each node."""
    new = load_config(text).document
    policy = selected_policy(policy_ref, selector)
    out: dict[str, NodeDiff] = {}
    for node in _chosen(gateway, policy):
        if only is not None and node.name not in only:
            continue
        active = export_node_config(gateway, node.name)
        # a node run by the agent gets a drop-in: the diff is of the merge its kubelet will run,
        # and a field a drop-in read after ours overrides shows with the file that wins
        dropin = dropin_review(node, active, new) if node.backend == "agent" else None
        effective = dropin.merged if dropin else new
        review = review_changes(effective, active, allowed_fields=set(policy.allow_fields), drain=policy.drain_mode)
        refused = {r.change.path for r in review.refusals}
        changes: dict[str, dict[str, Any]] = {}
        for c, cost in zip(review.changes, review.costs):
            changes[c.path] = {"field": c.path, "old": c.old, "new": c.new, "dkc": c.dkc_warning,
                               "explicit": c.explicit, "refused": c.path in refused, "disruption": cost.kind}
            if cost.state_file:
                changes[c.path]["stateFile"] = cost.state_file
        for o in dropin.overrides if dropin else ():  # start refuses these: say which file wins
            entry = changes.setdefault(o.field, {"field": o.field, "old": o.value_in(active), "new": o.theirs})
            entry.update({"dropin": o.ours, "overriddenBy": o.file, "refused": True})
        out[node.name] = NodeDiff(list(changes.values()), disruption_of(review.costs, drain=policy.drain_mode or "auto"))
    return out


def preview_plan(gateway: ClusterForPlan, *, config_text: str | None, policy_ref: str | None, selector: str | None,
                 rollout: str = "preview", time_scale: float | None = None) -> dict[str, Any]:
    """The batches a rollout would run now, its gates and windows, and the verdict on the config
    ``start`` would give (nothing is written)."""
    policy = selected_policy(policy_ref, selector, time_scale=time_scale)
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
    # the rollout would refuse a cluster without DKC (or a rehearsal off kubesim): so does its preview
    candidates = candidate_nodes(nodes, policy)
    check_rehearsal(policy, gateway.probe_cluster(candidates))
    check_agent_clocks(policy, candidates)
    now = datetime.now(timezone.utc)
    plan = plan_batches(nodes, policy, rollout=rollout, target=target, now=now)
    schedule = estimate_schedule(plan, policy, now)
    verdict = (review_against_nodes(gateway, policy, config_text, {o.name: o for o in nodes},
                                    default_policy=policy_ref is None) if config_text is not None else None)
    diffs = diff_against_nodes(gateway, config_text, policy_ref=policy_ref, selector=selector,
                               only=set(plan.nodes)) if config_text is not None and verdict and not verdict.problems else {}
    backends = {n.name: n.backend or "none" for n in nodes}
    writes = {n.name: n.writes or None for n in nodes}  # the agent's file: drop-in or main-file
    return {
        "name": rollout,
        "policy": policy.name,
        "time_scale": policy.time_scale,
        "target": str(target),
        "backends": {b: sum(1 for v in backends.values() if v == b) for b in sorted(set(backends.values()))},
        **_schedule(schedule),
        "max_unavailable": plan.max_unavailable,
        "batches": [{"index": b.index + 1, "label": b.name, "step": b.step, "nodes": list(b.nodes),
                     "backends": [backends.get(n, "none") for n in b.nodes],
                     "writes": [writes.get(n) for n in b.nodes],
                     "approval_after": plan.approval_after(b.index)} for b in plan.batches],
        "skipped": [{"node": s.node, "reason": s.reason} for s in plan.skipped],
        "changes": {node: d.changes for node, d in diffs.items()},
        # what the change costs each node of the plan (rollout.kubeletconfig.disruption)
        "disruption": {node: d.disruption.as_json() for node, d in diffs.items()},
        "gates": _gates(plan),
        "windows": _windows(policy, now),
        "verdict": verdict.as_json() if verdict is not None else None,
    }


def _schedule(schedule: Schedule) -> dict[str, Any]:
    """The estimate from now to the end, the waits for maintenance windows included (the batches'
    own time when no window ever opens), that time alone, and when the first batch starts and
    the last ends."""
    work = round(schedule.work.total_seconds())
    total = round(schedule.total.total_seconds()) if schedule.total is not None else work
    return {"estimate": format_duration(timedelta(seconds=total)), "estimate_seconds": total,
            "work": format_duration(timedelta(seconds=work)), "work_seconds": work,
            "starts_at": rfc3339_seconds(schedule.starts_at) if schedule.starts_at is not None else None,
            "ends_at": rfc3339_seconds(schedule.ends_at) if schedule.ends_at is not None else None}


def _gates(plan: RolloutPlan) -> dict[str, Any]:
    """The approval gates the plan stops at: after which batches, how long each waits, then what."""
    approval = plan.policy.approval
    after = [b.index + 1 for b in plan.batches if plan.approval_after(b.index)]
    return {"after_batches": after, "timeout": format_duration(approval.timeout),
            "on_timeout": approval.on_timeout.value, "on_reject": approval.on_reject.value}


def _windows(policy: RolloutPolicy, now: datetime) -> dict[str, Any]:
    """When batches may start: the policy's maintenance windows, and whether one is open now."""
    windows = policy.maintenance_windows
    described = [w.model_dump(mode="json", by_alias=True) for w in windows.windows]
    if not described:
        return {"windows": [], "timezone": windows.timezone, "open_now": True, "next_open": None}
    opens = policy.next_window(now)
    return {"windows": described, "timezone": windows.timezone, "open_now": policy.in_window(now),
            "next_open": human(opens) if opens is not None else None}


def publish_config_text(gateway: ClusterForPlan, text: str, *, namespace: str = SYSTEM_NAMESPACE,
                        source: str = "config", rollout: str = "manual",
                        policy_ref: str | None = None) -> tuple[ConfigRef, bool, Verdict]:
    """Judge the config as ``start`` would (under ``policy_ref``), then publish it; returns (the
    resolved ConfigRef, created?, the verdict). A refused config is not published."""
    verdict = config_verdict(gateway, text, policy_ref=policy_ref, selector=None)
    if not verdict.valid:
        raise verdict.error(source=source, suffix=": nothing was published")
    manifest = build_configmap(namespace, base_name=CONFIG_BASE_NAME, config_text=text, rollout_name=rollout)
    name = manifest["metadata"]["name"]
    try:
        gateway.read_configmap(name, namespace=namespace)
        existed = True
    except NotFoundError:
        existed = False
    return gateway.publish_configmap(manifest), not existed, verdict
