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
    kind = "Pod"
    has_status = True


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
    "serviceaccounts": ServiceAccountStrategy,
    "roles": RoleStrategy,
    "clusterroles": ClusterRoleStrategy,
    "rolebindings": RoleBindingStrategy,
    "clusterrolebindings": ClusterRoleBindingStrategy,
}
