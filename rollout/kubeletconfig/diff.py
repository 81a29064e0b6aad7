"""Field-level diff of a new KubeletConfiguration against a node's active one.

Why defaults on both sides: DKC replaces the node's whole config, and every field the new
document omits takes its v1beta1 default, not the node's current value. Comparing the texts
would hide exactly the changes that surprise people (readOnlyPort 10255 -> 0, anonymous auth
true -> false, cgroupDriver systemd -> cgroupfs). Values are compared by meaning ("1m" equals
"60s", "1Gi" equals "1024Mi"); maps are compared per key (``evictionHard.memory.available``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rollout.kubeletconfig.catalog import FieldSpec, TypeSpec, load_catalog
from rollout.kubeletconfig.defaults import effective_config
from rollout.kubeletconfig.values import parse_go_duration, parse_quantity

_MISSING = object()


@dataclass(frozen=True)
class FieldChange:
    """One changed value; ``old``/``new`` are None when the key is absent on that side."""

    path: str
    old: Any
    new: Any
    field: str
    dkc_warning: str
    dkc_reason: str = ""
    explicit: bool = True  # False: the new document omits it, the change comes from defaulting

    def __str__(self) -> str:
        how = "" if self.explicit else " (omitted: default)"
        return f"{self.path}: {self.old!r} -> {self.new!r}{how}"


def _norm_scalar(value: Any, kind: str) -> Any:
    """A comparable form: durations as ns, quantities as Decimal; others unchanged."""
    try:
        if kind == "duration":
            return ("duration", parse_go_duration(value))
        if kind == "quantity":
            return ("quantity", parse_quantity(value))
    except ValueError:
        pass
    return value


def _norm_loose(value: Any) -> Any:
    """For map<string,string> items whose meaning depends on the key (evictionHard, grace periods)."""
    if isinstance(value, str):
        for kind in ("duration", "quantity"):
            normed = _norm_scalar(value, kind)
            if normed is not value:
                return normed
    return value


def _norm(value: Any, type_: TypeSpec) -> Any:
    if value is None or value == {} or value == []:
        return None
    if type_.kind == "list" and isinstance(value, list):
        item = type_.item or TypeSpec("string")
        return tuple(_norm(v, item) for v in value) if item.kind not in ("object", "map") else value
    if type_.kind in ("duration", "quantity"):
        return _norm_scalar(value, type_.kind)
    return value


def _map_changes(
    spec: FieldSpec, old: Mapping[str, Any], new: Mapping[str, Any], *, top: FieldSpec, new_doc: Any
) -> Iterable[FieldChange]:
    item = spec.type.item or TypeSpec("string")
    gates = load_catalog().gates if spec.path == "featureGates" else {}
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if key in gates:  # an absent gate is its default, not "nothing"
            before = gates[key].default if before is None else before
            after = gates[key].default if after is None else after
        normalise = _norm_loose if item.kind == "string" else (lambda v: _norm(v, item))
        if normalise(before) != normalise(after):
            explicit = isinstance(new_doc, Mapping) and key in new_doc
            yield _change(f"{spec.path}.{key}", before, after, top=top, explicit=explicit)


def _change(path: str, old: Any, new: Any, *, top: FieldSpec, explicit: bool) -> FieldChange:
    return FieldChange(path, old, new, top.name, top.dkc_warning, top.dkc_reason, explicit)


def _field_changes(
    spec: FieldSpec, old: Any, new: Any, *, top: FieldSpec, new_doc: Any
) -> Iterable[FieldChange]:
    """Changes inside one field: objects recurse, maps go per key, everything else as a whole."""
    if spec.type.kind == "object":
        old_m, new_m = old if isinstance(old, Mapping) else {}, new if isinstance(new, Mapping) else {}
        sub_doc = new_doc if isinstance(new_doc, Mapping) else {}
        for child in spec.children:
            yield from _field_changes(
                child,
                old_m.get(child.name),
                new_m.get(child.name),
                top=top,
                new_doc=sub_doc.get(child.name, _MISSING),
            )
    elif spec.type.kind == "map" and isinstance(old or {}, Mapping) and isinstance(new or {}, Mapping):
        yield from _map_changes(spec, old or {}, new or {}, top=top, new_doc=new_doc)
    elif _norm(old, spec.type) != _norm(new, spec.type):
        yield _change(spec.path, old, new, top=top, explicit=new_doc is not _MISSING and new_doc is not None)


def diff_configs(new: Mapping[str, Any], active: Mapping[str, Any]) -> list[FieldChange]:
    """Every field whose effective value differs between ``active`` and ``new``, catalog order."""
    new_eff, old_eff = effective_config(new), effective_config(active)
    changes: list[FieldChange] = []
    for spec in load_catalog().fields:
        changes.extend(
            _field_changes(
                spec,
                old_eff.get(spec.name),
                new_eff.get(spec.name),
                top=spec,
                new_doc=new.get(spec.name, _MISSING),
            )
        )
    return changes
