"""Computed, never-stored answers: access reviews (``kubectl auth can-i``) and TokenRequests.

Why: ``kubectl auth can-i`` is how an operator checks the orchestrator's RBAC before a rollout;
it POSTs a ``SelfSubjectAccessReview`` (``--list``: a ``SelfSubjectRulesReview``) and prints the
server's answer, so kubesim must answer with the same evaluator that guards real requests.
``kubectl create token`` / ``kubesim token`` POST a ``TokenRequest`` to a ServiceAccount.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from . import authz, errors, timefmt
from .errors import FieldError
from .rbac import Attributes, RbacAuthorizer
from .resources import Resource

AUTHORIZATION_V1 = "authorization.k8s.io/v1"


def answer(
    resource: Resource, body: Any, user: authz.User, graph: authz.NodeGraph, rbac: RbacAuthorizer
) -> dict[str, Any]:
    """The review ``body`` with its ``status`` filled in for the requesting user."""
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body of the request could not be decoded as a {resource.kind} object")
    spec = body.get("spec") or {}
    if resource.kind == "SelfSubjectAccessReview":
        status = _access(spec, user, graph, rbac)
    else:
        status = _rules(spec, user, rbac)
    meta = {"creationTimestamp": None}
    return {"kind": resource.kind, "apiVersion": AUTHORIZATION_V1, "metadata": meta, "spec": spec, "status": status}


def _access(spec: dict[str, Any], user: authz.User, graph: authz.NodeGraph, rbac: RbacAuthorizer) -> dict[str, Any]:
    """``SelfSubjectAccessReview``: exactly one of resource or non-resource attributes."""
    resource, non_resource = spec.get("resourceAttributes") or {}, spec.get("nonResourceAttributes") or {}
    if bool(resource) == bool(non_resource):
        detail = "exactly one of nonResourceAttributes or resourceAttributes must be specified"
        cause = FieldError("Invalid", "spec.resourceAttributes", detail, "null")
        raise errors.invalid("SelfSubjectAccessReview", "authorization.k8s.io", "", [cause])
    if resource:
        attrs = Attributes(
            resource.get("verb") or "",
            resource.get("group") or "",
            resource.get("resource") or "",
            resource.get("subresource") or "",
            resource.get("namespace") or "",
            resource.get("name") or "",
        )
    else:
        attrs = Attributes(non_resource.get("verb") or "", path=non_resource.get("path") or "")
    allowed, reason = authz.review(user, attrs, graph, rbac)
    status: dict[str, Any] = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return status


def _rules(spec: dict[str, Any], user: authz.User, rbac: RbacAuthorizer) -> dict[str, Any]:
    """``SelfSubjectRulesReview``: every rule that applies in the namespace (``kubectl auth can-i --list``)."""
    namespace = spec.get("namespace") or ""
    rules, problems = rbac.rules_for(user, namespace)
    resource_rules = [
        {k: rule[k] for k in ("verbs", "apiGroups", "resources", "resourceNames") if rule.get(k)}
        for rule in rules
        if not rule.get("nonResourceURLs")
    ]
    non_resource_rules = [
        {"verbs": rule.get("verbs") or [], "nonResourceURLs": rule["nonResourceURLs"]}
        for rule in rules
        if rule.get("nonResourceURLs")
    ]
    status: dict[str, Any] = {
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": bool(problems),
    }
    if problems:
        status["evaluationError"] = ", ".join(problems)
    return status


def token_request(namespace: str, name: str, body: Any, token: str) -> dict[str, Any]:
    """The TokenRequest answer. kubesim's tokens do not expire; the stamp only echoes the request."""
    spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
    seconds = int(spec.get("expirationSeconds") or 3600)
    spec["expirationSeconds"] = seconds
    spec.setdefault("audiences", ["https://kubernetes.default.svc.cluster.local"])
    expires = timefmt.now() + dt.timedelta(seconds=seconds)
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
        "spec": spec,
        "status": {"token": token, "expirationTimestamp": timefmt.fmt_time(expires)},
    }
