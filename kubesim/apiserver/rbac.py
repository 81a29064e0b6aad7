"""The RBAC authorizer over the stored Roles and bindings, as a 1.23 API server evaluates them.

Why kubesim has it: the orchestrator runs in-cluster as a ServiceAccount with the least-privilege
rules of ``deployments/kubernetes/rbac.yaml``; a missing rule must fail on kubesim with the same
403 a real cluster gives, not be hidden by an all-powerful identity.

The rule semantics follow ``plugin/pkg/auth/authorizer/rbac/rbac.go`` and
``pkg/apis/rbac/v1/evaluation_helpers.go``: ``*`` matches any verb, group or resource; ``*/sub``
matches a subresource of any resource; ``resourceNames`` narrows to named objects; a
``nonResourceURLs`` entry ending in ``*`` is a prefix. ClusterRoleBindings apply everywhere,
RoleBindings only to namespaced requests in their namespace. A binding to a missing role grants
nothing and its error is appended to the denial as ``RBAC: ...`` (as the real evaluator does).
Aggregated ClusterRoles are not aggregated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Protocol

RBAC_GROUP = "rbac.authorization.k8s.io"
SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class Attributes:
    """What is being asked: a resource request or (``path`` set) a non-resource one."""

    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return not self.path


class Subject(Protocol):
    """Who asks; read-only, so a frozen ``User`` is one."""

    @property
    def name(self) -> str: ...

    @property
    def groups(self) -> tuple[str, ...]: ...


class ObjectSource(Protocol):
    """Where roles and bindings come from (the store): ``list(resource, namespace)`` of objects."""

    def objects(self, resource: str, namespace: str = "") -> list[dict[str, Any]]: ...

    def object(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None: ...


# --- rule matching (evaluation_helpers.go) -------------------------------------------------------


def verb_matches(rule: dict[str, Any], verb: str) -> bool:
    return any(v in ("*", verb) for v in rule.get("verbs") or [])


def api_group_matches(rule: dict[str, Any], group: str) -> bool:
    return any(g in ("*", group) for g in rule.get("apiGroups") or [])


def resource_matches(rule: dict[str, Any], combined: str, subresource: str) -> bool:
    """``combined`` is ``resource`` or ``resource/subresource``; ``*/sub`` matches any resource's sub."""
    for wanted in rule.get("resources") or []:
        if wanted in ("*", combined):
            return True
        if subresource and wanted == f"*/{subresource}":
            return True
    return False


def resource_name_matches(rule: dict[str, Any], name: str) -> bool:
    names = rule.get("resourceNames") or []
    return not names or name in names


def non_resource_url_matches(rule: dict[str, Any], path: str) -> bool:
    for url in rule.get("nonResourceURLs") or []:
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(attrs: Attributes, rule: dict[str, Any]) -> bool:
    """``RuleAllows`` of rbac.go."""
    if not attrs.is_resource:
        return verb_matches(rule, attrs.verb) and non_resource_url_matches(rule, attrs.path)
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    return (
        verb_matches(rule, attrs.verb)
        and api_group_matches(rule, attrs.api_group)
        and resource_matches(rule, combined, attrs.subresource)
        and resource_name_matches(rule, attrs.name)
    )


# --- subjects and bindings ---------------------------------------------------------------------


def service_account_user(namespace: str, name: str) -> str:
    return f"{SA_PREFIX}{namespace}:{name}"


def applies_to(user: Subject, subject: dict[str, Any], binding_namespace: str) -> bool:
    """``appliesToUser``: a User by name, a Group by membership, a ServiceAccount by its user name
    (namespace defaulting to the binding's)."""
    kind = subject.get("kind")
    if kind == "User":
        return user.name == subject.get("name")
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(namespace) and user.name == service_account_user(namespace, subject.get("name") or "")
    return False


@dataclass(frozen=True)
class Grant:
    """One binding that applies to the user, with the rules of the role it names."""

    description: str
    rules: list[dict[str, Any]]


class RbacAuthorizer:
    """Evaluates requests against the stored roles and bindings (read at request time)."""

    def __init__(self, source: ObjectSource):
        self.source = source

    def grants(self, user: Subject, namespace: str) -> tuple[list[Grant], list[str]]:
        """Every binding that applies to ``user`` for a request in ``namespace`` (``""``: cluster
        scope), and the errors of bindings whose role is missing."""
        grants: list[Grant] = []
        errors: list[str] = []
        for binding in self._bindings(namespace):
            binding_namespace = binding["metadata"].get("namespace", "")
            if not any(applies_to(user, s, binding_namespace) for s in binding.get("subjects") or []):
                continue
            role, error = self._role(binding)
            if role is None:
                errors.append(error)
                continue
            grants.append(Grant(_describe(binding, user), role.get("rules") or []))
        return grants, errors

    def _bindings(self, namespace: str) -> Iterator[dict[str, Any]]:
        yield from self.source.objects("clusterrolebindings")
        if namespace:
            yield from self.source.objects("rolebindings", namespace)

    def _role(self, binding: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        ref = binding.get("roleRef") or {}
        name = ref.get("name") or ""
        if ref.get("kind") == "Role":
            namespace = binding["metadata"].get("namespace", "")
            role = self.source.object("roles", namespace, name)
            return role, f'role.{RBAC_GROUP} "{name}" not found'
        role = self.source.object("clusterroles", "", name)
        return role, f'clusterrole.{RBAC_GROUP} "{name}" not found'

    def authorize(self, user: Subject, attrs: Attributes) -> tuple[bool, str]:
        """``(allowed, reason)``: the reason names the granting binding, or carries the
        ``RBAC: ...`` errors of a denial (empty when there were none)."""
        grants, errors = self.grants(user, attrs.namespace if attrs.is_resource else "")
        for grant in grants:
            if any(rule_allows(attrs, rule) for rule in grant.rules):
                return True, f"RBAC: allowed by {grant.description}"
        return False, f"RBAC: {_aggregate(errors)}" if errors else ""

    def rules_for(self, user: Subject, namespace: str) -> tuple[list[dict[str, Any]], list[str]]:
        """All rules that apply in ``namespace`` (``SelfSubjectRulesReview``)."""
        grants, errors = self.grants(user, namespace)
        return [rule for grant in grants for rule in grant.rules], errors


def _aggregate(errors: list[str]) -> str:
    """``utilerrors.NewAggregate(...).Error()``: one message, or ``[a, b]``."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def _describe(binding: dict[str, Any], user: Subject) -> str:
    """As rbac.go's ``authorizingVisitor`` describes the source of an allow."""
    ref = binding.get("roleRef") or {}
    namespace = binding["metadata"].get("namespace", "")
    kind = "RoleBinding" if namespace else "ClusterRoleBinding"
    where = f'"{binding["metadata"]["name"]}/{namespace}"' if namespace else f'"{binding["metadata"]["name"]}"'
    subject: dict[str, Any] = next(
        (s for s in binding.get("subjects") or [] if applies_to(user, s, namespace)), {})
    who = subject.get("name", "")
    if subject.get("kind") == "ServiceAccount":  # describeSubject: "name/namespace"
        who = f"{who}/{subject.get('namespace') or namespace}"
    return f'{kind} {where} of {ref.get("kind", "")} "{ref.get("name", "")}" to {subject.get("kind", "")} "{who}"'


# --- the 1.23 bootstrap policy kubesim seeds ---------------------------------------------------

# What ``system:authenticated`` (and, for the public info, ``system:unauthenticated``) may do on a
# fresh 1.23 cluster: plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go.
BOOTSTRAP_CLUSTER_ROLES: dict[str, list[dict[str, Any]]] = {
    "cluster-admin": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["*"]},
    ],
    "system:discovery": [
        {
            "nonResourceURLs": [
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
                "/healthz",
                "/livez",
                "/openapi",
                "/openapi/*",
                "/readyz",
                "/version",
                "/version/",
            ],
            "verbs": ["get"],
        }
    ],
    "system:basic-user": [
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
            "verbs": ["create"],
        }
    ],
    "system:public-info-viewer": [
        {"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}
    ],
}
BOOTSTRAP_BINDINGS: dict[str, tuple[str, tuple[str, ...]]] = {  # binding -> (cluster role, groups)
    "cluster-admin": ("cluster-admin", ("system:masters",)),
    "system:discovery": ("system:discovery", ("system:authenticated",)),
    "system:basic-user": ("system:basic-user", ("system:authenticated",)),
    "system:public-info-viewer": ("system:public-info-viewer", ("system:authenticated", "system:unauthenticated")),
}


def bootstrap_objects() -> Iterator[tuple[str, dict[str, Any]]]:
    """``(resource, object)`` for every bootstrap ClusterRole and ClusterRoleBinding."""
    labels = {"kubernetes.io/bootstrapping": "rbac-defaults"}
    annotations = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
    for name, rules in BOOTSTRAP_CLUSTER_ROLES.items():
        meta = {"name": name, "labels": dict(labels), "annotations": dict(annotations)}
        yield "clusterroles", {"metadata": meta, "rules": rules}
    for name, (role, groups) in BOOTSTRAP_BINDINGS.items():
        meta = {"name": name, "labels": dict(labels), "annotations": dict(annotations)}
        subjects = [{"kind": "Group", "apiGroup": RBAC_GROUP, "name": g} for g in groups]
        ref = {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role}
        yield "clusterrolebindings", {"metadata": meta, "roleRef": ref, "subjects": subjects}
