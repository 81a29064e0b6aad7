"""Label and field selectors (``k8s.io/apimachinery/pkg/labels`` and ``fields``).

Field selectors are per kind and limited to the fields the real registry supports; anything else
is a 400 ``field label not supported`` exactly as kube-apiserver answers. Requirements are ANDed
and parsed in any order (kubectl's order varies between runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from . import errors

_LABEL_TERM = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|=|!=|\s+in\s+|\s+notin\s+)\s*(?P<val>\([^)]*\)|[A-Za-z0-9_.-]*))?\s*$"
)


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str]

    def matches(self, labels: dict[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!":
            return self.key not in labels
        if self.op in ("=", "in"):
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values  # "!=", "notin"


def _split_terms(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


def parse_label_selector(text: str | None) -> tuple[LabelRequirement, ...]:
    if not text:
        return ()
    reqs = []
    for term in _split_terms(text):
        match = _LABEL_TERM.match(term)
        if not match:
            raise errors.bad_request(f"unable to parse requirement: invalid label selector: {term.strip()!r}")
        key, op, val, neg = match["key"], (match["op"] or "").strip(), match["val"], match["neg"]
        if neg:
            if op:
                raise errors.bad_request(f"unable to parse requirement: {term.strip()}")
            reqs.append(LabelRequirement(key, "!", frozenset()))
        elif not op:
            reqs.append(LabelRequirement(key, "exists", frozenset()))
        elif op in ("in", "notin"):
            if not val or not val.startswith("("):
                raise errors.bad_request(f"unable to parse requirement: {term.strip()}")
            values = frozenset(v.strip() for v in val[1:-1].split(",") if v.strip())
            reqs.append(LabelRequirement(key, op, values))
        else:
            if val is not None and val.startswith("("):
                raise errors.bad_request(f"unable to parse requirement: {term.strip()}")
            reqs.append(LabelRequirement(key, "!=" if op == "!=" else "=", frozenset([val or ""])))
    return tuple(reqs)


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    equal: bool

    def matches(self, fields: dict[str, str]) -> bool:
        return (fields.get(self.field, "") == self.value) == self.equal


def _get(obj: dict[str, Any], *path: str) -> Any:
    node: Any = obj
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _s(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _meta_fields(obj: dict[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    return {"metadata.name": _s(meta.get("name")), "metadata.namespace": _s(meta.get("namespace"))}


def _node_fields(obj: dict[str, Any]) -> dict[str, str]:
    fields = _meta_fields(obj)
    fields["spec.unschedulable"] = _s(bool(_get(obj, "spec", "unschedulable")))
    return fields


def _event_fields(obj: dict[str, Any]) -> dict[str, str]:
    fields = _meta_fields(obj)
    involved = obj.get("involvedObject") or {}
    for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"):
        fields[f"involvedObject.{key}"] = _s(involved.get(key))
    for key in ("reason", "reportingComponent", "type"):
        fields[key] = _s(obj.get(key))
    fields["source"] = _s(_get(obj, "source", "component"))
    return fields


def _pod_fields(obj: dict[str, Any]) -> dict[str, str]:
    """``pod.ToSelectableFields`` (1.23), less ``status.podIPs``."""
    fields = _meta_fields(obj)
    for name in ("nodeName", "restartPolicy", "schedulerName", "serviceAccountName"):
        fields[f"spec.{name}"] = _s(_get(obj, "spec", name))
    for name in ("phase", "podIP", "nominatedNodeName"):
        fields[f"status.{name}"] = _s(_get(obj, "status", name))
    return fields


def _namespace_fields(obj: dict[str, Any]) -> dict[str, str]:
    fields = _meta_fields(obj)
    fields["status.phase"] = _s(_get(obj, "status", "phase"))
    return fields


FIELD_EXTRACTORS: dict[str, Callable[[dict[str, Any]], dict[str, str]]] = {
    "nodes": _node_fields,
    "events": _event_fields,
    "pods": _pod_fields,
    "namespaces": _namespace_fields,
    "configmaps": _meta_fields,
    "leases": _meta_fields,
}
_META_FIELDS = {"metadata.name", "metadata.namespace"}

SUPPORTED_FIELDS = {
    "nodes": {"metadata.name", "metadata.namespace", "spec.unschedulable"},
    "events": {
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    },
    "pods": {
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    },
    "namespaces": {"metadata.name", "metadata.namespace", "status.phase"},
    "configmaps": {"metadata.name", "metadata.namespace"},
    "leases": {"metadata.name", "metadata.namespace"},
}


def parse_field_selector(text: str | None, resource: str) -> tuple[FieldRequirement, ...]:
    if not text:
        return ()
    reqs = []
    for term in filter(str.strip, text.split(",")):
        req = _field_term(term)
        if req is None:
            raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        if req.field not in SUPPORTED_FIELDS.get(resource, _META_FIELDS):
            raise errors.bad_request(f"field label not supported: {req.field}")
        reqs.append(req)
    return tuple(reqs)


def _field_term(term: str) -> FieldRequirement | None:
    for op, equal in (("!=", False), ("==", True), ("=", True)):
        if op in term:
            field_name, value = term.split(op, 1)
            return FieldRequirement(field_name.strip(), value.strip(), equal)
    return None


def exact_name(reqs: tuple[FieldRequirement, ...]) -> str | None:
    """The name a ``metadata.name=X`` requirement pins (requestinfo uses it for list/watch authz)."""
    for req in reqs:
        if req.field == "metadata.name" and req.equal:
            return req.value
    return None


@dataclass(frozen=True)
class Selector:
    """A parsed label + field selector for one resource."""

    resource: str
    labels: tuple[LabelRequirement, ...] = ()
    fields: tuple[FieldRequirement, ...] = ()

    @classmethod
    def parse(cls, resource: str, query: dict[str, str]) -> "Selector":
        return cls(
            resource,
            parse_label_selector(query.get("labelSelector")),
            parse_field_selector(query.get("fieldSelector"), resource),
        )

    @property
    def empty(self) -> bool:
        return not self.labels and not self.fields

    @property
    def name(self) -> str | None:
        return exact_name(self.fields)

    def matches(self, obj: dict[str, Any]) -> bool:
        if self.labels:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if not all(r.matches(labels) for r in self.labels):
                return False
        if self.fields:
            fields = FIELD_EXTRACTORS.get(self.resource, _meta_fields)(obj)
            if not all(r.matches(fields) for r in self.fields):
                return False
        return True


# --- metav1.LabelSelector (PodDisruptionBudget.spec.selector) ----------------------------------


def label_selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """``metav1.LabelSelectorAsSelector(selector).Matches(labels)``: a missing selector matches
    nothing, an empty one everything; an operator it does not know matches nothing."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def label_selector_is_empty(selector: dict[str, Any] | None) -> bool:
    return not selector or (not selector.get("matchLabels") and not selector.get("matchExpressions"))


def _expression_matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator", "")
    values = expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False
