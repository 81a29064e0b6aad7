"""The resources kubesim serves and how a URL path maps onto them (``RequestInfo``).

This mirrors ``k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`` closely enough that the
node authorizer sees the same (verb, resource, namespace, name) a real API server would derive -
including the name taken from a ``metadata.name`` field selector on list/watch (edge case E12).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

from . import errors


@dataclass(frozen=True)
class Resource:
    name: str  # plural, e.g. "nodes"
    singular: str
    kind: str
    group: str  # "" for core
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
    subresources: tuple[str, ...] = ()
    # a delete answers with the object rather than a Status (the registry's ReturnDeletedObject)
    return_deleted_object: bool = False
    # not stored: a POST is answered with a computed object (access reviews)
    virtual: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


NODES = Resource("nodes", "node", "Node", "", "v1", False, ("no",), subresources=("status", "proxy"))
NAMESPACES = Resource(
    "namespaces", "namespace", "Namespace", "", "v1", False, ("ns",), subresources=("status",),
    return_deleted_object=True,
)
CONFIGMAPS = Resource("configmaps", "configmap", "ConfigMap", "", "v1", True, ("cm",))
EVENTS = Resource("events", "event", "Event", "", "v1", True, ("ev",))
# ``/eviction`` is the Eviction subresource (policy/v1 body; kubectl drain); ``/binding`` is how a
# scheduler assigns a pod to a node
PODS = Resource(
    "pods", "pod", "Pod", "", "v1", True, ("po",), subresources=("status", "eviction", "binding"),
    return_deleted_object=True,
)
LEASES = Resource("leases", "lease", "Lease", "coordination.k8s.io", "v1", True)
# ``/token`` is the TokenRequest subresource (``kubectl create token``, ``kubesim token``)
SERVICE_ACCOUNTS = Resource(
    "serviceaccounts", "serviceaccount", "ServiceAccount", "", "v1", True, ("sa",), subresources=("token",)
)

RBAC_GROUP = "rbac.authorization.k8s.io"
ROLES = Resource("roles", "role", "Role", RBAC_GROUP, "v1", True)
CLUSTER_ROLES = Resource("clusterroles", "clusterrole", "ClusterRole", RBAC_GROUP, "v1", False)
ROLE_BINDINGS = Resource("rolebindings", "rolebinding", "RoleBinding", RBAC_GROUP, "v1", True)
CLUSTER_ROLE_BINDINGS = Resource(
    "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", RBAC_GROUP, "v1", False
)
# create-only, never stored: the answer is computed (``kubectl auth can-i``)
SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    "selfsubjectaccessreviews",
    "",
    "SelfSubjectAccessReview",
    "authorization.k8s.io",
    "v1",
    False,
    verbs=("create",),
    virtual=True,
)
SELF_SUBJECT_RULES_REVIEWS = Resource(
    "selfsubjectrulesreviews",
    "",
    "SelfSubjectRulesReview",
    "authorization.k8s.io",
    "v1",
    False,
    verbs=("create",),
    virtual=True,
)

POLICY_GROUP = "policy"
POD_DISRUPTION_BUDGETS = Resource(
    "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", POLICY_GROUP, "v1", True, ("pdb",),
    subresources=("status",),
)
EVICTION_API_VERSIONS = ("policy/v1", "policy/v1beta1")  # the real handler accepts both

# the owners of a cluster file's workloads (kubectl drain GETs a DaemonSet owner)
APPS_GROUP = "apps"
REPLICA_SETS = Resource(
    "replicasets", "replicaset", "ReplicaSet", APPS_GROUP, "v1", True, ("rs",), subresources=("status",)
)
DAEMON_SETS = Resource("daemonsets", "daemonset", "DaemonSet", APPS_GROUP, "v1", True, ("ds",), subresources=("status",))

CORE_RESOURCES = (NODES, NAMESPACES, CONFIGMAPS, EVENTS, PODS, SERVICE_ACCOUNTS)
GROUP_RESOURCES = {
    ("coordination.k8s.io", "v1"): (LEASES,),
    (POLICY_GROUP, "v1"): (POD_DISRUPTION_BUDGETS,),
    (APPS_GROUP, "v1"): (DAEMON_SETS, REPLICA_SETS),
    (RBAC_GROUP, "v1"): (CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, ROLE_BINDINGS, ROLES),
    ("authorization.k8s.io", "v1"): (SELF_SUBJECT_ACCESS_REVIEWS, SELF_SUBJECT_RULES_REVIEWS),
}
ALL_RESOURCES = CORE_RESOURCES + tuple(r for group in GROUP_RESOURCES.values() for r in group)
_BY_GV_NAME = {(r.group, r.version, r.name): r for r in ALL_RESOURCES}


def by_kind(kind: str) -> Resource:
    for resource in ALL_RESOURCES:
        if resource.kind == kind:
            return resource
    raise KeyError(kind)


@dataclass
class RequestInfo:
    """What a request addresses; ``verb`` uses the Kubernetes names (get, list, watch, create, ...)."""

    resource: Resource
    verb: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    # the rest of the path after a "proxy" subresource, e.g. "configz"
    proxy_path: str = ""
    query: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return object_key(self.resource, self.namespace, self.name)


def object_key(resource: Resource, namespace: str, name: str) -> str:
    return f"{resource.name}/{namespace}/{name}" if resource.namespaced else f"{resource.name}//{name}"


_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

TRUE_VALUES = {"1", "t", "T", "TRUE", "true", "True"}
FALSE_VALUES = {"0", "f", "F", "FALSE", "false", "False"}


def parse_bool(value: str | None) -> bool:
    """Go's ``strconv.ParseBool`` (the Python client 31 sends ``watch=True``)."""
    if value is None or value == "":
        return False
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    raise errors.bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def parse_path(method: str, path: str, query: dict[str, str]) -> RequestInfo:
    """Map ``/api/v1/...`` or ``/apis/<g>/<v>/...`` onto a resource request; 404 for anything else."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise errors.path_not_found()
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] != "status":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        raise errors.path_not_found()
    resource = _BY_GV_NAME.get((group, version, rest[0]))
    if resource is None or (namespace and not resource.namespaced):
        raise errors.path_not_found()
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    proxy_path = "/".join(rest[3:]) if subresource == "proxy" else ""
    if subresource and subresource not in resource.subresources:
        raise errors.path_not_found()
    if len(rest) > 3 and subresource != "proxy":
        raise errors.path_not_found()
    verb = _verb(method, name, subresource, query)
    return RequestInfo(resource, verb, namespace, name, subresource, proxy_path, query)


def _verb(method: str, name: str, subresource: str, query: dict[str, str]) -> str:
    if method == "GET" or method == "HEAD":
        if subresource == "proxy":
            return "get"
        if name:
            return "get"
        return "watch" if parse_bool(query.get("watch")) else "list"
    verb = _METHOD_VERBS.get(method)
    if verb is None or (verb != "create" and not name) or (verb == "create" and name and not subresource):
        if verb == "delete" and not name:
            return "deletecollection"
        raise errors.method_not_allowed()
    return verb
