"""Validation of the rbac.authorization.k8s.io/v1 kinds, as ``pkg/apis/rbac/validation`` (1.23).

Why: ``kubectl apply`` of a manifest with a typo in a rule or a binding must fail here as it does
on a real cluster (422 with the same field paths), not be stored and silently grant nothing.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError, GoRepr
from .validation import validate_metadata

RBAC_GROUP = "rbac.authorization.k8s.io"


def validate_role(obj: dict[str, Any], *, namespaced: bool) -> list[FieldError]:
    """A Role or ClusterRole: metadata and every rule."""
    errs = validate_metadata(obj.get("kind") or "", obj)
    for index, rule in enumerate(obj.get("rules") or []):
        errs += _rule(rule if isinstance(rule, dict) else {}, f"rules[{index}]", namespaced)
    return errs


def _rule(rule: dict[str, Any], path: str, namespaced: bool) -> list[FieldError]:
    """``ValidatePolicyRule``: verbs always; either resource or non-resource rules, not both."""
    errs: list[FieldError] = []
    if not rule.get("verbs"):
        errs.append(FieldError("Required", f"{path}.verbs", "verbs must contain at least one value"))
    urls = rule.get("nonResourceURLs") or []
    if urls:
        if namespaced:
            errs.append(
                FieldError(
                    "Invalid", f"{path}.nonResourceURLs", "namespaced rules cannot apply to non-resource URLs", urls
                )
            )
        if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
            errs.append(
                FieldError(
                    "Invalid",
                    f"{path}.nonResourceURLs",
                    "rules cannot apply to both regular resources and non-resource URLs",
                    urls,
                )
            )
        return errs
    if not rule.get("apiGroups"):
        errs.append(FieldError("Required", f"{path}.apiGroups", "resource rules must supply at least one api group"))
    if not rule.get("resources"):
        errs.append(FieldError("Required", f"{path}.resources", "resource rules must supply at least one resource"))
    return errs


def validate_binding(obj: dict[str, Any], *, namespaced: bool) -> list[FieldError]:
    """A RoleBinding (may reference a Role or ClusterRole) or ClusterRoleBinding (ClusterRole)."""
    errs = validate_metadata(obj.get("kind") or "", obj)
    ref = obj.get("roleRef") or {}
    if ref.get("apiGroup") != RBAC_GROUP:
        supported_group = f'supported values: "{RBAC_GROUP}"'
        errs.append(FieldError("NotSupported", "roleRef.apiGroup", supported_group, ref.get("apiGroup", "")))
    kinds = ("Role", "ClusterRole") if namespaced else ("ClusterRole",)
    if ref.get("kind") not in kinds:
        supported = ", ".join(f'"{k}"' for k in kinds)
        errs.append(FieldError("NotSupported", "roleRef.kind", f"supported values: {supported}", ref.get("kind", "")))
    if not ref.get("name"):
        errs.append(FieldError("Required", "roleRef.name", ""))
    for index, subject in enumerate(obj.get("subjects") or []):
        errs += _subject(subject if isinstance(subject, dict) else {}, f"subjects[{index}]", namespaced)
    return errs


def _subject(subject: dict[str, Any], path: str, namespaced: bool) -> list[FieldError]:
    """``ValidateRoleBindingSubject``."""
    errs: list[FieldError] = []
    if not subject.get("name"):
        errs.append(FieldError("Required", f"{path}.name", ""))
    kind, group = subject.get("kind"), subject.get("apiGroup") or ""
    if kind == "ServiceAccount":
        if group:
            errs.append(FieldError("NotSupported", f"{path}.apiGroup", 'supported values: ""', group))
        if not namespaced and not subject.get("namespace"):
            errs.append(FieldError("Required", f"{path}.namespace", ""))
    elif kind in ("User", "Group"):
        if group != RBAC_GROUP:
            errs.append(FieldError("NotSupported", f"{path}.apiGroup", f'supported values: "{RBAC_GROUP}"', group))
    else:
        supported = 'supported values: "ServiceAccount", "User", "Group"'
        errs.append(FieldError("NotSupported", f"{path}.kind", supported, kind or ""))
    return errs


def validate_binding_update(new: dict[str, Any], old: dict[str, Any], *, namespaced: bool) -> list[FieldError]:
    """A binding's roleRef is immutable (delete and re-create to point it elsewhere)."""
    errs = validate_binding(new, namespaced=namespaced)
    if (new.get("roleRef") or {}) != (old.get("roleRef") or {}):
        errs.append(FieldError("Invalid", "roleRef", "cannot change roleRef", _go_role_ref(new.get("roleRef") or {})))
    return errs


def _go_role_ref(ref: dict[str, Any]) -> GoRepr:
    """``%#v`` of the new RoleRef, as the real error shows it."""
    group, kind, name = ref.get("apiGroup", ""), ref.get("kind", ""), ref.get("name", "")
    return GoRepr(f'rbac.RoleRef{{APIGroup:"{group}", Kind:"{kind}", Name:"{name}"}}')
