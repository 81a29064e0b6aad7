"""Registry strategies: what the server does to an object before storing it.

Like ``pkg/registry/core/*/strategy.go``: the main resource keeps the stored ``status``, ``/status``
keeps the stored ``spec``; with the ``DynamicKubeletConfig`` gate off a *new* ``spec.configSource``
and a first-time ``status.config`` are dropped silently (section 3.2 of the DKC reference). From
1.26 on the fields are gone from the Node type, so the server drops them from every write, the way
a decoder drops any field its Go type lacks.
"""

from __future__ import annotations

from typing import Any, Callable

from . import rbac_validation, validation
from .errors import FieldError


class Strategy:
    """Default strategy: no spec/status split, metadata validation only."""

    kind = ""
    has_status = False

    def __init__(self, gate_enabled: bool = True):
        self.gate_enabled = gate_enabled

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        pass

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any], subresource: str) -> None:
        if not self.has_status:
            return
        if subresource == "status":
            _copy_field(new, old, "spec")
        else:
            _copy_field(new, old, "status")

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return validation.validate_metadata(self.kind, obj)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any], subresource: str) -> list[FieldError]:
        return self.validate_create(new)

    def warnings(self, obj: dict[str, Any]) -> list[str]:
        return []


def _copy_field(new: dict[str, Any], old: dict[str, Any], field: str) -> None:
    if field in old:
        new[field] = old[field]
    else:
        new.pop(field, None)


class NodeStrategy(Strategy):
    kind = "Node"
    has_status = True
    # 1.26+: Node has no spec.configSource / status.config at all (set by the ApiServer)
    config_source_gone = False

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        if not self.gate_enabled or self.config_source_gone:
            (obj.get("spec") or {}).pop("configSource", None)
            (obj.get("status") or {}).pop("config", None)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any], subresource: str) -> None:
        super().prepare_for_update(new, old, subresource)
        if self.config_source_gone:
            (new.get("spec") or {}).pop("configSource", None)
            (new.get("status") or {}).pop("config", None)
            return
        if self.gate_enabled:
            return
        if subresource == "status":
            # nodeStatusStrategy: status.config may only be kept if it was already in use
            if not (old.get("status") or {}).get("config"):
                (new.get("status") or {}).pop("config", None)
        elif not (old.get("spec") or {}).get("configSource"):
            (new.get("spec") or {}).pop("configSource", None)

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return validation.validate_node(obj)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any], subresource: str) -> list[FieldError]:
        errs = validation.validate_node_update(new, old)
        if subresource != "status":  # the main resource also runs ValidateNode (taints, ...)
            errs = validation.validate_node_taints(new) + errs
        return errs

    def warnings(self, obj: dict[str, Any]) -> list[str]:
        if not self.config_source_gone and (obj.get("spec") or {}).get("configSource") is not None:
            return ["spec.configSource: deprecated in v1.22, support removal is planned in v1.23"]
        return []


class NamespaceStrategy(Strategy):
    kind = "Namespace"
    has_status = True

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"].get("name", "")
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        labels = obj["metadata"].setdefault("labels", {}) or {}
        labels["kubernetes.io/metadata.name"] = name
        obj["metadata"]["labels"] = labels

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any], subresource: str) -> None:
        super().prepare_for_update(new, old, subresource)
        if subresource != "status":
            new.setdefault("spec", {})["finalizers"] = (old.get("spec") or {}).get("finalizers", [])
        labels = new["metadata"].setdefault("labels", {}) or {}
        labels["kubernetes.io/metadata.name"] = new["metadata"].get("name", "")
        new["metadata"]["labels"] = labels

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return validation.validate_namespace(obj)


class ConfigMapStrategy(Strategy):
    kind = "ConfigMap"

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return validation.validate_config_map(obj)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any], subresource: str) -> list[FieldError]:
        return validation.validate_config_map_update(new, old)


class EventStrategy(Strategy):
    kind = "Event"

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return validation.validate_event(obj)


class LeaseStrategy(Strategy):
    kind = "Lease"

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return validation.validate_lease(obj)


class PodStrategy(Strategy):
    """``pkg/registry/core/pod/strategy.go`` plus the defaults (``SetDefaults_Pod``...) for the
    fields kubesim reads or prints: a new pod is Pending, whatever status it was sent with."""

    kind = "Pod"
    has_status = True

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        spec = obj.setdefault("spec", {})
        for key, default in _POD_SPEC_DEFAULTS:
            spec.setdefault(key, default)
        for container in spec.get("containers") or []:
            if isinstance(container, dict):
                _default_container(container)
        obj["status"] = {"phase": "Pending", "qosClass": pod_qos_class(spec)}

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return validation.validate_pod(obj)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any], subresource: str) -> list[FieldError]:
        return validation.validate_pod_update(new, old)


_POD_SPEC_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("restartPolicy", "Always"),
    ("terminationGracePeriodSeconds", 30),
    ("dnsPolicy", "ClusterFirst"),
    ("securityContext", {}),
    ("schedulerName", "default-scheduler"),
    ("enableServiceLinks", True),
    ("priority", 0),
)


def _default_container(container: dict[str, Any]) -> None:
    image = str(container.get("image") or "")
    untagged = ":" not in image.rsplit("/", 1)[-1] and "@" not in image
    latest = untagged or image.endswith(":latest")
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})


def pod_qos_class(spec: dict[str, Any]) -> str:
    """``qos.GetPodQOS`` for cpu and memory: no requests or limits at all is BestEffort; limits
    on both for every container, with requests (if given) equal to them, is Guaranteed."""
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    resources = [c.get("resources") or {} for c in containers]
    if not any((r.get("requests") or r.get("limits")) for r in resources):
        return "BestEffort"
    for r in resources:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                return "Burstable"
    return "Guaranteed"


class PodDisruptionBudgetStrategy(Strategy):
    """``pkg/registry/policy/poddisruptionbudget/strategy.go``: a new budget starts with an empty
    status at generation 1; a spec change bumps the generation (the disruption controller answers
    with ``status.observedGeneration``); ``/status`` keeps the spec."""

    kind = "PodDisruptionBudget"
    has_status = True

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        obj["metadata"]["generation"] = 1
        obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any], subresource: str) -> None:
        super().prepare_for_update(new, old, subresource)
        _bump_generation(new, old, subresource)

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return validation.validate_pod_disruption_budget(obj)


class WorkloadStrategy(Strategy):
    """ReplicaSet and DaemonSet (``pkg/registry/apps/*/strategy.go``): a spec change bumps
    ``metadata.generation`` (the controller answers with ``status.observedGeneration``); a new
    object starts with an empty status."""

    kind = "ReplicaSet"
    has_status = True
    # the status fields the Go type always writes (no omitempty): clients require them
    empty_status: dict[str, int] = {"replicas": 0}

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        obj["metadata"]["generation"] = 1
        obj["status"] = dict(self.empty_status)
        if self.kind == "ReplicaSet":
            obj.setdefault("spec", {}).setdefault("replicas", 1)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any], subresource: str) -> None:
        super().prepare_for_update(new, old, subresource)
        _bump_generation(new, old, subresource)

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return validation.validate_workload(self.kind, obj)


class DaemonSetStrategy(WorkloadStrategy):
    kind = "DaemonSet"
    empty_status = {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0}


class ServiceAccountStrategy(Strategy):
    kind = "ServiceAccount"


class RoleStrategy(Strategy):
    """Role and ClusterRole: the rules are validated as the real registry does."""

    kind = "Role"
    namespaced = True

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return rbac_validation.validate_role(obj, namespaced=self.namespaced)


class ClusterRoleStrategy(RoleStrategy):
    kind = "ClusterRole"
    namespaced = False


class RoleBindingStrategy(Strategy):
    """RoleBinding and ClusterRoleBinding: roleRef is immutable."""

    kind = "RoleBinding"
    namespaced = True

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return rbac_validation.validate_binding(obj, namespaced=self.namespaced)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any], subresource: str) -> list[FieldError]:
        return rbac_validation.validate_binding_update(new, old, namespaced=self.namespaced)


class ClusterRoleBindingStrategy(RoleBindingStrategy):
    kind = "ClusterRoleBinding"
    namespaced = False


STRATEGIES: dict[str, Callable[[bool], Strategy]] = {
    "nodes": NodeStrategy,
    "namespaces": NamespaceStrategy,
    "configmaps": ConfigMapStrategy,
    "events": EventStrategy,
    "leases": LeaseStrategy,
    "pods": PodStrategy,
    "poddisruptionbudgets": PodDisruptionBudgetStrategy,
    "replicasets": WorkloadStrategy,
    "daemonsets": DaemonSetStrategy,
    "serviceaccounts": ServiceAccountStrategy,
    "roles": RoleStrategy,
    "clusterroles": ClusterRoleStrategy,
    "rolebindings": RoleBindingStrategy,
    "clusterrolebindings": ClusterRoleBindingStrategy,
}


def _bump_generation(new: dict[str, Any], old: dict[str, Any], subresource: str) -> None:
    """``metadata.generation`` counts spec changes (the status subresource never moves it)."""
    generation = old["metadata"].get("generation", 1)
    if subresource != "status" and new.get("spec") != old.get("spec"):
        generation += 1
    new["metadata"]["generation"] = generation
