"""v1beta1 defaulting: what the kubelet will actually run with for a given document.

Why it matters for a rollout: DKC fills every omitted field with the *v1beta1 default*, not with
the node's current value (reference section 12.10). Validation rules must therefore run on the
defaulted config (``imageGCHighThresholdPercent: 70`` alone is invalid because the low default
is 80), and a diff against a node's active config must compare defaulted values on both sides,
or an omitted field that silently changes would not show up.

Rules (from the catalog): omitted or null -> default; a ``zero_means_default`` field set to its
zero value (0, "", "0s") -> default; ``pointer`` fields keep an explicit 0/false. Durations are
rewritten in Go's canonical form ("1m" -> "1m0s") as the kubelet's configz shows them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from rollout.kubeletconfig.catalog import API_VERSION, KIND, FieldSpec, load_catalog
from rollout.kubeletconfig.values import format_go_duration, parse_go_duration, parse_quantity


def is_zero(value: Any, spec: FieldSpec) -> bool:
    """Go's zero value for the field's type (what non-pointer defaulting replaces)."""
    kind = spec.type.kind
    if kind == "duration":
        try:
            return parse_go_duration(value) == 0
        except ValueError:
            return False
    if kind in ("int32", "int64", "float64"):
        return value == 0 and not isinstance(value, bool)
    if kind == "quantity":
        return value == "" or _quantity_is_zero(value)
    return value == "" if kind == "string" else False


def _quantity_is_zero(value: Any) -> bool:
    try:
        return parse_quantity(value) == 0
    except ValueError:
        return False


def canonical_duration(value: Any) -> Any:
    """Go's String() form of a duration; anything unparsable is returned unchanged."""
    try:
        return format_go_duration(parse_go_duration(value))
    except ValueError:
        return value


def _default_value(spec: FieldSpec) -> Any:
    value = copy.deepcopy(spec.default)
    return canonical_duration(value) if spec.type.kind == "duration" and value is not None else value


def _default_field(spec: FieldSpec, value: Any) -> tuple[bool, Any]:
    """(present, value) for one field after defaulting; absent when there is nothing to say."""
    if spec.type.kind == "object":
        return True, default_object(spec.children, value if isinstance(value, Mapping) else {})
    if value is None or (spec.zero_means_default and is_zero(value, spec)):
        if spec.has_default and spec.default is not None:
            return True, _default_value(spec)
        return (value is not None), copy.deepcopy(value)
    if spec.type.kind == "duration":
        return True, canonical_duration(value)
    return True, copy.deepcopy(value)


def default_object(specs: tuple[FieldSpec, ...], doc: Mapping[str, Any]) -> dict[str, Any]:
    """Default one object level; keys the specs do not know are dropped."""
    out: dict[str, Any] = {}
    for spec in specs:
        present, value = _default_field(spec, doc.get(spec.name))
        if present:
            out[spec.name] = value
    return out


def _special_cases(doc: Mapping[str, Any], out: dict[str, Any]) -> None:
    """The defaults that depend on other fields (1.23 defaults.go; the pulls' from 1.27)."""
    # For backward compatibility the report frequency follows an explicitly set update frequency.
    report, update = doc.get("nodeStatusReportFrequency"), doc.get("nodeStatusUpdateFrequency")
    if (report is None or _zero_duration(report)) and update is not None and not _zero_duration(update):
        out["nodeStatusReportFrequency"] = canonical_duration(update)
    # 1.27+: pulls are serial by default only while maxParallelImagePulls allows one at a time
    # (a field no older kubelet knows: where it is set, the kubelet is 1.27 or later)
    parallel = doc.get("maxParallelImagePulls")
    if doc.get("serializeImagePulls") is None and isinstance(parallel, int) and parallel >= 2:
        out["serializeImagePulls"] = False
    # Any negative pod PID limit means "no limit" and is stored as -1.
    if isinstance(out.get("podPidsLimit"), int) and out["podPidsLimit"] < 0:
        out["podPidsLimit"] = -1


def _zero_duration(value: Any) -> bool:
    try:
        return parse_go_duration(value) == 0
    except ValueError:
        return False


def effective_config(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document with v1beta1 defaults applied: every known field, as the kubelet sees it."""
    out = {"kind": KIND, "apiVersion": API_VERSION}
    out.update(default_object(load_catalog().fields, doc))
    _special_cases(doc, out)
    return out
