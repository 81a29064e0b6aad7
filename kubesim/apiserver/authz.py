"""Who may do what: users, the node authorizer (E12), RBAC and NodeRestriction admission.

kubesim has three kinds of identity: the admin and kubesim's own controllers (``system:masters``,
may do anything), one identity per kubelet (``system:node:<name>`` in ``system:nodes``) and
ServiceAccounts (``system:serviceaccount:<ns>:<name>``), which get exactly what the stored Roles
and bindings grant them (:mod:`.rbac`), as with ``--authorization-mode=Node,RBAC``. Kubelet
requests are checked the way a 1.23 API server with the NodeRestriction plugin checks them:

* RBAC role ``system:node`` grants reads of nodes and pods, writes of nodes/status, events and
  leases; everything else is denied with the usual ``User ... cannot <verb> resource ...``.
* ConfigMaps are readable only along a graph edge ``configmap -> node`` that the API server's node
  informer adds *shortly after* a ``spec.configSource`` write, and only while the API server's
  ``DynamicKubeletConfig`` gate is on. List/watch must name the object with a ``metadata.name``
  field selector.
* NodeRestriction keeps a kubelet to its own Node, Lease and pods (status writes and deletions of
  pods bound to it; it creates no pods but mirror pods) and forbids it to give itself a
  ``configSource``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from . import errors
from .rbac import Attributes, RbacAuthorizer, service_account_user
from .resources import ALL_RESOURCES, RequestInfo

NODE_PREFIX = "system:node:"
# kubesim's own in-process controllers (node lifecycle, root-CA publisher): the simulated control
# plane, which API faults spare unless asked (see ``ApiFault.include_control_plane``)
CONTROL_PLANE_USERS = frozenset({"system:kube-controller-manager", "system:kube-scheduler"})
NODE_LEASE_NAMESPACE = "kube-node-lease"
MASTERS = "system:masters"


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]

    @classmethod
    def of(cls, name: str) -> "User":
        if name.startswith(NODE_PREFIX):
            return cls(name, ("system:nodes", "system:authenticated"))
        return cls(name, (MASTERS, "system:authenticated"))

    @classmethod
    def service_account(cls, namespace: str, name: str) -> "User":
        """The identity a ServiceAccount token authenticates as (serviceaccount.UserInfo)."""
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated")
        return cls(service_account_user(namespace, name), groups)

    @property
    def privileged(self) -> bool:
        """``system:masters`` passes every authorizer (the API server's privileged-group check)."""
        return MASTERS in self.groups

    @property
    def node_name(self) -> str | None:
        return self.name[len(NODE_PREFIX) :] if self.name.startswith(NODE_PREFIX) else None


# resource -> verbs granted by the system:node ClusterRole (1.23 bootstrap policy, trimmed)
_NODE_RBAC = {
    ("nodes", ""): {"get", "list", "watch", "create", "update", "patch", "delete"},
    ("nodes", "status"): {"get", "update", "patch"},
    ("pods", ""): {"get", "list", "watch", "create", "delete"},
    ("pods", "status"): {"get", "update", "patch"},
    ("events", ""): {"create", "update", "patch"},
    ("leases", ""): {"get", "create", "update", "patch", "delete"},
}


class NodeGraph:
    """The node authorizer's configmap -> node edges, populated with the informer's lag."""

    def __init__(self, lag: float, enabled: bool, *, loses_race: bool = False):
        self.lag = lag
        self.enabled = enabled  # the handlers exist only with the API server's gate on
        # tests: an edge settles no sooner than the kubelet's first refused ask for it, so the race
        # the informer's lag makes likely (a 403 on the first download) happens every time, at any load
        self.loses_race = loses_race
        self._edges: dict[str, tuple[str, str]] = {}  # node -> (namespace, configmap)
        self._wanted: dict[str, tuple[str, str] | None] = {}
        self._refused: dict[str, tuple[str, str]] = {}  # node -> the target it was refused before its edge
        self._due: dict[str, tuple[str, str]] = {}  # node -> a target whose lag is over, awaiting a refusal

    def observe(self, node_name: str, node: dict[str, Any] | None, *, immediate: bool = False) -> None:
        """Called after every Node write/delete; the edge follows after ``lag`` seconds."""
        if not self.enabled:
            return
        target = _config_map_ref(node) if node is not None else None
        if self._wanted.get(node_name, self._edges.get(node_name)) == target:
            return
        self._wanted[node_name] = target
        if immediate or self.lag <= 0:
            self._set(node_name, target)
            return
        asyncio.get_running_loop().call_later(self.lag, self._settle, node_name, target)

    def _settle(self, node_name: str, target: tuple[str, str] | None) -> None:
        if self._wanted.get(node_name) != target:  # a later write supersedes this one
            return
        if self.loses_race and target is not None and self._refused.get(node_name) != target:
            self._due[node_name] = target
            return
        self._set(node_name, target)

    def _set(self, node_name: str, target: tuple[str, str] | None) -> None:
        self._refused.pop(node_name, None)
        self._due.pop(node_name, None)
        if target is None:
            self._edges.pop(node_name, None)
        else:
            self._edges[node_name] = target

    def allows(self, node_name: str, namespace: str, name: str) -> bool:
        asked = (namespace, name)
        if self._edges.get(node_name) == asked:
            return True
        if self.loses_race and self._wanted.get(node_name) == asked:
            if self._due.get(node_name) == asked:
                self._set(node_name, asked)  # this ask is refused; the next one passes
            else:
                self._refused[node_name] = asked
        return False


def _config_map_ref(node: dict[str, Any]) -> tuple[str, str] | None:
    cm = ((node.get("spec") or {}).get("configSource") or {}).get("configMap") or {}
    namespace, name = cm.get("namespace") or "", cm.get("name") or ""
    return (namespace, name) if namespace and name else None


def _deny(user: User, info: RequestInfo, name: str, reason: str = "") -> errors.ApiError:
    group = info.resource.group
    resource = info.resource.name + (f"/{info.subresource}" if info.subresource else "")
    scope = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    why = f'User "{user.name}" cannot {info.verb} resource "{resource}" in API group "{group}" {scope}'
    if reason:
        why += f": {reason}"
    return errors.forbidden(info.resource.name, group, name, why)


def authorize(
    user: User, info: RequestInfo, graph: NodeGraph, field_name: str | None, rbac: RbacAuthorizer | None = None
) -> None:
    """Raise 403 unless ``user`` may perform ``info`` (``field_name``: name from a field selector).

    Privileged users pass; kubelets get the node authorizer and the ``system:node`` rules exactly
    as before RBAC existed here; everyone else is evaluated by RBAC.
    """
    if user.privileged:
        return
    node = user.node_name
    if node is None:
        _authorize_rbac(user, info, field_name, rbac)
        return
    res = info.resource.name
    if res == "configmaps":
        _authorize_config_map(user, node, info, graph, field_name)
        return
    if info.verb not in _NODE_RBAC.get((res, info.subresource), set()):
        raise _deny(user, info, info.name)


def _authorize_rbac(user: User, info: RequestInfo, field_name: str | None, rbac: RbacAuthorizer | None) -> None:
    if rbac is None:
        raise _deny(user, info, info.name)
    allowed, reason = rbac.authorize(user, attributes(info, field_name))
    if not allowed:
        raise _deny(user, info, info.name, reason)


def attributes(info: RequestInfo, field_name: str | None = None) -> Attributes:
    """RBAC's view of a request; list/watch take the name from a ``metadata.name`` selector."""
    name = info.name or field_name or ""
    return Attributes(info.verb, info.resource.group, info.resource.name, info.subresource, info.namespace, name)


def authorize_path(user: User, verb: str, path: str, rbac: RbacAuthorizer) -> None:
    """Non-resource URLs (discovery, /version, /openapi): RBAC's ``nonResourceURLs`` for
    ServiceAccounts; the admin and kubelets keep reaching them as before."""
    if user.privileged or user.node_name is not None:
        return
    allowed, reason = rbac.authorize(user, Attributes(verb, path=path))
    if not allowed:
        why = f'User "{user.name}" cannot {verb} path "{path}"' + (f": {reason}" if reason else "")
        raise errors.ApiError(403, errors.status_dict(403, "Forbidden", f"forbidden: {why}", {}))


def review(user: User, attrs: Attributes, graph: NodeGraph, rbac: RbacAuthorizer) -> tuple[bool, str]:
    """``(allowed, reason)`` for an access review of ``user`` (what ``kubectl auth can-i`` asks)."""
    if user.privileged:
        return True, ""
    if user.node_name is None:
        return rbac.authorize(user, attrs)
    resource = next((r for r in ALL_RESOURCES if (r.group, r.name) == (attrs.api_group, attrs.resource)), None)
    if resource is None or not attrs.is_resource:
        return False, ""
    info = RequestInfo(resource, attrs.verb, attrs.namespace, attrs.name, attrs.subresource)
    try:
        authorize(user, info, graph, None)
    except errors.ApiError:
        return False, ""
    return True, ""


def _authorize_config_map(user: User, node: str, info: RequestInfo, graph: NodeGraph, field_name: str | None) -> None:
    if info.verb not in ("get", "list", "watch"):
        raise _deny(user, info, info.name, "can only read resources of this type")
    if info.subresource:
        raise _deny(user, info, info.name, "cannot read subresource")
    if not info.namespace:
        raise _deny(user, info, info.name, "can only read namespaced object of this type")
    name = info.name or (field_name or "")
    if not name:
        raise _deny(user, info, info.name, "No Object name found")
    if not graph.allows(node, info.namespace, name):
        raise _deny(user, info, info.name, f"no relationship found between node '{node}' and this object")


# --- NodeRestriction ---------------------------------------------------------------------------


def admit(user: User, info: RequestInfo, new: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
    """NodeRestriction for mutating requests of a kubelet (create/update/patch/delete)."""
    node = user.node_name
    if node is None:
        return
    if info.resource.name == "nodes":
        _admit_node(node, info, new, old)
    elif info.resource.name == "leases":
        _admit_lease(node, info, new)
    elif info.resource.name == "pods":
        _admit_pod(node, info, new, old)


def _forbid(info: RequestInfo, name: str, why: str) -> errors.ApiError:
    return errors.forbidden(info.resource.name, info.resource.group, name, why)


def _admit_node(node: str, info: RequestInfo, new: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
    requested = info.name or ((new or {}).get("metadata") or {}).get("name", "")
    if requested != node:
        raise _forbid(info, requested, f'node "{node}" is not allowed to modify node "{requested}"')
    if info.verb == "create":
        if ((new or {}).get("spec") or {}).get("configSource") is not None:
            raise _forbid(info, requested, f'node "{node}" is not allowed to create pods with a non-nil configSource')
    elif info.verb in ("update", "patch") and new is not None and old is not None:
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        source = new_spec.get("configSource")
        if source is not None and source != old_spec.get("configSource"):
            raise _forbid(
                info, requested, f'node "{node}" is not allowed to update configSource to a new non-nil configSource'
            )
        if (new_spec.get("taints") or []) != (old_spec.get("taints") or []):
            raise _forbid(info, requested, f'node "{node}" is not allowed to modify taints')


def _admit_lease(node: str, info: RequestInfo, new: dict[str, Any] | None) -> None:
    if info.namespace != NODE_LEASE_NAMESPACE:
        raise _forbid(info, info.name, f'can only access leases in the "{NODE_LEASE_NAMESPACE}" namespace')
    name = info.name or ((new or {}).get("metadata") or {}).get("name", "")
    if name != node:
        raise _forbid(info, name, "can only access node lease with the same name as the requesting node")


MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


def _admit_pod(node: str, info: RequestInfo, new: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
    """``admitPod`` / ``admitPodStatus``: only pods bound to the node itself."""
    if info.verb == "create":
        annotations = ((new or {}).get("metadata") or {}).get("annotations") or {}
        if MIRROR_POD_ANNOTATION not in annotations:
            raise _forbid(info, info.name, f'pod does not have "{MIRROR_POD_ANNOTATION}" annotation, '
                                           f'node "{node}" can only create mirror pods')
        return
    bound = ((old or {}).get("spec") or {}).get("nodeName")
    if bound == node:
        return
    if info.subresource == "status":
        raise _forbid(info, info.name, f'node "{node}" can only update pod status for pods with spec.nodeName set to itself')
    raise _forbid(info, info.name, f'node "{node}" can only delete pods with spec.nodeName set to itself')
