"""Glue shared by the flows and the CLI: build the gateway, resolve policies and configs, read a
rollout's status back from the cluster, and turn a finished flow run into an outcome.

No decisions are made here: status phases come from ``rollout.phases``, plans from
``rollout.planner``, validation from ``rollout.kubeletconfig``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from rollout.policy import RolloutPolicy, load_policy_text, resolve_policy


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def load_policy_ref(ref: str | None) -> RolloutPolicy:
    """A policy by name (``canary``), by path, or inline YAML text (what deployments pass)."""
    if ref and ("\n" in ref or (":" in ref and not ref.endswith((".yaml", ".yml")))):
        return load_policy_text(ref, source="<inline policy>")
    return resolve_policy(ref or None)


# ------------------------------------------------------------------------------ run outcomes

FAILED_OUTCOMES = ("halted", "reverted", "failed", "rejected")


@dataclass
class RunOutcome:
    """How a rollout/rollback run ended, for the CLI and tests."""

    outcome: str  # completed | halted | reverted | failed | crashed | cancelled
    message: str
    report: str = ""
    flow_run_id: str = ""
    flow_run_name: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # the error class that ended the run before any rollout outcome (ConfigError, LockHeldError...)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in ("completed", "rolled-back")

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "ok": self.ok,
            "message": self.message,
            "flow_run_id": self.flow_run_id,
            "flow_run_name": self.flow_run_name,
            "report": self.report,
            "error": self.error,
            **self.details,
        }

    @classmethod
    def from_state(cls, state: Any, *, flow_run: Any = None) -> "RunOutcome":
        from flows.outcome import RolloutFailed

        run_id = str(getattr(state.state_details, "flow_run_id", "") or "")
        name = getattr(flow_run, "name", "") if flow_run is not None else ""
        if state.is_completed():
            result = state.result(raise_on_failure=False)
            if isinstance(result, dict):
                return cls(
                    outcome=result.get("outcome", "completed"),
                    message=result.get("message", state.message or ""),
                    report=result.get("report", ""),
                    flow_run_id=run_id,
                    flow_run_name=name,
                    details={k: v for k, v in result.items() if k not in ("outcome", "message", "report")},
                )
            return cls("completed", state.message or "", flow_run_id=run_id, flow_run_name=name)
        exc = None
        try:
            exc = state.result(raise_on_failure=False)
        except Exception as error:  # noqa: BLE001 - a missing result is still an outcome
            exc = error
        if isinstance(exc, RolloutFailed):
            return cls(exc.outcome, exc.message, report=exc.report, flow_run_id=run_id, flow_run_name=name,
                       details={"nodes": list(exc.nodes)})
        kind = state.type.value.lower() if state.type else "failed"
        return cls(kind if kind in ("crashed", "cancelled") else "failed",
                   state.message or str(exc or ""), flow_run_id=run_id, flow_run_name=name,
                   error=type(exc).__name__ if isinstance(exc, BaseException) else _error_from_message(state.message or ""))

    @classmethod
    def from_flow_run(cls, flow_run: Any) -> "RunOutcome":
        """A run that executed elsewhere (a deployment): its result may not be readable here, so
        fall back to the state message (which names nodes and reason)."""
        state = flow_run.state
        try:
            outcome = cls.from_state(state, flow_run=flow_run)
        except Exception:  # noqa: BLE001
            outcome = None
        if outcome is None or (not state.is_completed() and outcome.outcome == "failed") or (
                state.is_completed() and (state.message or "").startswith("deferred:")):
            message = state.message or ""
            if state.is_completed():
                kind = "deferred" if message.startswith("deferred:") else "completed"
            else:
                kind = _outcome_from_message(message)
            outcome = cls(kind, message, flow_run_id=str(flow_run.id), flow_run_name=flow_run.name,
                          error=_error_from_message(message))
        return outcome


def _error_from_message(message: str) -> str:
    """'Flow run encountered an exception: ConfigError: ...' -> 'ConfigError'."""
    import re

    match = re.search(r"exception: (\w+Error):", message)
    return match.group(1) if match else ""


def _outcome_from_message(message: str) -> str:
    """'Flow run encountered an exception: RolloutFailed: halted: ...' -> 'halted'."""
    import re

    match = re.search(r"(?:RolloutFailed: |^)(halted|reverted|failed|rejected):", message)
    return match.group(1) if match else "failed"


# ------------------------------------------------------------------------------ cluster access


def open_gateway(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """The cluster gateway for a kubeconfig/context (in-cluster config inside a pod)."""
    from rollout.gateway import KubeGateway

    return KubeGateway.from_kubeconfig(kubeconfig or None, context=context or None)


def rollout_status(gateway: Any, rollout: str) -> dict[str, Any]:
    from flows.status import rollout_status as _status

    return _status(gateway, rollout)


# ----------------------------------------------------------------------------- CLI helpers


def validate_config_text(text: str, *, source: str = "config") -> dict[str, Any]:
    """Validate a KubeletConfiguration; ConfigError (listing every problem) when it is invalid."""
    from rollout.errors import ConfigError
    from rollout.kubeletconfig import validate_config

    result = validate_config(text)
    if not result.ok:
        raise ConfigError("invalid KubeletConfiguration", source=source,
                          problems=[str(p) for p in result.errors])
    return {"valid": True, "warnings": [str(p) for p in result.warnings]}


def export_node_config(gateway: Any, node: str) -> dict[str, Any]:
    """A node's effective config (configz) as a valid KubeletConfiguration document."""
    from rollout.kubeletconfig import export_from_configz

    return export_from_configz(gateway.configz(node))


def _target_nodes(gateway: Any, policy_ref: str | None, selector: str | None) -> tuple[RolloutPolicy, list[Any]]:
    from rollout.planner import is_control_plane

    policy = load_policy_ref(policy_ref)
    if selector:
        policy = policy.model_copy(update={"nodes": policy.nodes.model_copy(update={"selector": selector})})
    sel = policy.nodes.label_selector()
    nodes, _ = gateway.list_nodes()
    chosen = [n for n in nodes if sel.matches(n.labels)
              and (policy.nodes.allow_control_plane or not is_control_plane(n))
              and n.name not in policy.nodes.exclude_names]
    return policy, chosen


def diff_against_nodes(gateway: Any, text: str, *, policy_ref: str | None, selector: str | None) -> dict[str, list[dict[str, Any]]]:
    """Field-level diff of ``text`` against each target node's running config."""
    from rollout.kubeletconfig import load_config, review_changes

    new = load_config(text).document
    policy, chosen = _target_nodes(gateway, policy_ref, selector)
    out: dict[str, list[dict[str, Any]]] = {}
    for node in chosen:
        active = export_node_config(gateway, node.name)
        review = review_changes(new, active, allowed_fields=set(policy.allow_fields))
        refused = {r.change.path for r in review.refusals}
        out[node.name] = [
            {"field": c.path, "old": c.old, "new": c.new, "dkc": c.dkc_warning,
             "explicit": c.explicit, "refused": c.path in refused}
            for c in review.changes
        ]
    return out


def preview_plan(gateway: Any, *, config_text: str | None, policy_ref: str | None, selector: str | None,
                 rollout: str = "preview") -> dict[str, Any]:
    """The batches a rollout would run now (nothing is written)."""
    from rollout.model import ConfigRef
    from rollout.planner import plan_batches
    from rollout.publish import build_configmap

    policy, _ = _target_nodes(gateway, policy_ref, selector)
    if selector:
        policy = policy.model_copy(update={"nodes": policy.nodes.model_copy(update={"selector": selector})})
    if config_text is not None:
        manifest = build_configmap("kube-system", base_name="kubelet-config", config_text=config_text,
                                   rollout_name="preview")  # the name does not depend on the label
        target = ConfigRef("kube-system", manifest["metadata"]["name"])
        try:
            target = gateway.resolve(target)
        except Exception:  # noqa: BLE001 - not published yet: nothing is on it
            pass
    else:
        target = ConfigRef("kube-system", "kubelet-config-unpublished")
    nodes, _ = gateway.list_nodes()
    plan = plan_batches(nodes, policy, rollout=rollout, target=target, now=utcnow())
    return {
        "policy": policy.name,
        "target": str(target),
        "estimate": str(plan.estimated_duration),
        "max_unavailable": plan.max_unavailable,
        "batches": [{"index": b.index + 1, "label": b.name,
                     "step": b.step, "nodes": list(b.nodes)} for b in plan.batches],
        "skipped": [{"node": s.node, "reason": s.reason} for s in plan.skipped],
    }


def publish_config_text(gateway: Any, text: str, *, namespace: str = "kube-system", source: str = "config",
                        rollout: str = "manual") -> tuple[Any, bool]:
    """Validate and publish; returns (resolved ConfigRef, created?)."""
    from rollout.errors import NotFoundError
    from rollout.publish import build_configmap

    validate_config_text(text, source=source)
    manifest = build_configmap(namespace, base_name="kubelet-config", config_text=text, rollout_name=rollout)
    name = manifest["metadata"]["name"]
    try:
        gateway.read_configmap(name, namespace=namespace)
        existed = True
    except NotFoundError:
        existed = False
    return gateway.publish_configmap(manifest), not existed
