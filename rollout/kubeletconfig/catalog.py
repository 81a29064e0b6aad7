"""The KubeletConfiguration field catalog as typed, immutable values.

Why: every other part of this package (the pydantic model, defaulting, validation, the DKC
danger checks, export and diff) must agree on the same field list, types, defaults and DKC
warnings. They all read them from here, and this module reads them from the data files in
``rollout/catalog/`` (a verbatim copy of the reference catalog plus 1.23 details it leaves out,
and the fields added since, each with the kubelet minor that brought it),
so a correction is a data change, not a code change. Loading is cached; nothing here does I/O
after the first call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml

API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"
CATALOG_FILE = "kubelet-config-v1beta1.yaml"
EXTRAS_FILE = "kubelet-config-extras.yaml"
GATES_FILE = re.compile(r"feature-gates-1\.(\d+)\.yaml")  # the gates a kubelet of that minor knows, where we have them
SINCE_FILE = "kubelet-config-since.yaml"  # the fields added after 1.23, each with its minor
BASE_MINOR = 23  # the minor of CATALOG_FILE

SCALARS = frozenset({"string", "bool", "int32", "int64", "float64", "duration", "quantity"})
DKC_KINDS = frozenset({"reboot", "keep_empty", "not_recommended", "caveat", "none"})


@dataclass(frozen=True)
class TypeSpec:
    """A catalog type: a scalar kind, ``map`` (key/item), ``list`` (item) or ``object``."""

    kind: str
    key: TypeSpec | None = None
    item: TypeSpec | None = None


@dataclass(frozen=True)
class FieldSpec:
    """One field of the configuration (top-level or nested), with everything the catalog says."""

    name: str
    path: str
    type: TypeSpec
    default: Any = None
    has_default: bool = False
    pointer: bool = False
    zero_means_default: bool = False
    enum: tuple[str, ...] | None = None
    enum_items: tuple[str, ...] | None = None
    dkc_warning: str = "none"
    dkc_reason: str = ""
    feature_gate: str | None = None
    flag: str | None = None
    rules: tuple[str, ...] = ()
    children: tuple[FieldSpec, ...] = ()
    since: int = BASE_MINOR  # the first kubelet minor that knows the field (the 1.23 ones: 23)

    @property
    def is_object(self) -> bool:
        """True when the field (or the items of a list field) has named subfields."""
        return bool(self.children)

    def child(self, name: str) -> FieldSpec | None:
        return next((c for c in self.children if c.name == name), None)

    @property
    def runtime_rules(self) -> tuple[str, ...]:
        """Rules checked only by the running kubelet: failing them crash-loops it (no fallback)."""
        return tuple(r for r in self.rules if r.startswith("runtime:"))


@dataclass(frozen=True)
class GateSpec:
    name: str
    default: bool
    stage: str
    locked: bool = False


@dataclass(frozen=True)
class Catalog:
    """All fields (top level, in catalog order), feature gates and runtime value sets."""

    fields: tuple[FieldSpec, ...]
    gates: Mapping[str, GateSpec]
    runtime: Mapping[str, tuple[str, ...]]
    legacy_defaults_warning: str = ""
    by_name: Mapping[str, FieldSpec] = field(default_factory=dict)

    def field(self, name: str) -> FieldSpec | None:
        return self.by_name.get(name)

    def lookup(self, path: tuple[str, ...]) -> FieldSpec | None:
        """The spec for a path of object keys (``("authentication", "webhook", "enabled")``)."""
        spec = self.by_name.get(path[0]) if path else None
        for part in path[1:]:
            spec = spec.child(part) if spec is not None else None
        return spec


_GENERIC = re.compile(r"^(map|list)<(.*)>$")


def parse_type(text: str) -> TypeSpec:
    """Parse a catalog type string such as ``map<string, list<string>>`` or ``list<object>``."""
    text = text.strip()
    if text in SCALARS or text == "object":
        return TypeSpec(text)
    match = _GENERIC.match(text)
    if not match:
        raise ValueError(f"unknown catalog type {text!r}")
    if match.group(1) == "list":
        return TypeSpec("list", item=parse_type(match.group(2)))
    key, _, value = match.group(2).partition(",")
    return TypeSpec("map", key=parse_type(key), item=parse_type(value))


def _spec_from_entry(entry: Mapping[str, Any], *, path: str, children: tuple[FieldSpec, ...]) -> FieldSpec:
    rules = entry.get("validation") or []
    kind = entry.get("dkc_warning", "none")
    if kind not in DKC_KINDS:
        raise ValueError(f"{path}: unknown dkc_warning {kind!r}")
    return FieldSpec(
        name=path.rsplit(".", 1)[-1],
        path=path,
        type=parse_type(str(entry["type"])),
        default=entry.get("default"),
        has_default="default" in entry,
        pointer=bool(entry.get("pointer", False)),
        zero_means_default=bool(entry.get("zero_means_default", False)),
        enum=tuple(entry["enum"]) if "enum" in entry else None,
        enum_items=tuple(entry["enum_items"]) if "enum_items" in entry else None,
        dkc_warning=kind,
        dkc_reason=str(entry.get("dkc_reason", "")),
        feature_gate=entry.get("feature_gate"),
        flag=entry.get("flag"),
        rules=tuple(str(r) for r in rules),
        children=children,
        since=int(entry.get("first_minor", BASE_MINOR)),
    )


def _build_children(entries: list[Mapping[str, Any]], *, prefix: str) -> tuple[FieldSpec, ...]:
    """Turn dotted subfield entries (``x509.clientCAFile``) into a tree of nested object specs."""
    direct: dict[str, Mapping[str, Any]] = {}
    nested: dict[str, list[Mapping[str, Any]]] = {}
    for entry in entries:
        head, dot, rest = str(entry["name"]).partition(".")
        if head.startswith("("):  # "(others)" placeholder: replaced by the extras file
            continue
        if dot:
            nested.setdefault(head, []).append({**entry, "name": rest})
        else:
            direct[head] = entry
    order = list(dict.fromkeys([str(e["name"]).partition(".")[0] for e in entries]))
    out = []
    for name in (n for n in order if not n.startswith("(")):
        path = f"{prefix}.{name}"
        kids = _build_children(nested.get(name, []), prefix=path)
        entry = direct.get(name, {"type": "object"})
        out.append(_spec_from_entry(entry, path=path, children=kids))
    return tuple(out)


def _build_field(entry: Mapping[str, Any], *, extras: Mapping[str, list[Any]]) -> FieldSpec:
    name = str(entry["name"])
    subs = [s for s in entry.get("subfields") or [] if not str(s["name"]).startswith("(")]
    subs += extras.get(name, [])
    return _spec_from_entry(entry, path=name, children=_build_children(subs, prefix=name))


def _read(name: str) -> Any:
    text = resources.files("rollout").joinpath("catalog", name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


def _gate_specs(raw: Mapping[str, Any]) -> Mapping[str, GateSpec]:
    return MappingProxyType({n: GateSpec(n, bool(g["default"]), str(g["stage"]), bool(g.get("lock", False)))
                             for n, g in raw["gates"].items()})


@functools.cache
def gates_by_minor() -> Mapping[int, Mapping[str, GateSpec]]:
    """Each kubelet minor we have the gate list of (1.23, the base, and later ones), its gates."""
    found = {}
    for entry in resources.files("rollout").joinpath("catalog").iterdir():
        if match := GATES_FILE.fullmatch(entry.name):
            found[int(match.group(1))] = _gate_specs(_read(entry.name))
    return MappingProxyType(dict(sorted(found.items())))


@functools.cache
def known_gate_names() -> frozenset[str]:
    """Every gate some kubelet we have the list of knows: a name outside it is no gate at all."""
    return frozenset(name for gates in gates_by_minor().values() for name in gates)


@functools.cache
def load_catalog() -> Catalog:
    """The catalog, parsed once per process."""
    raw, extras = _read(CATALOG_FILE), _read(EXTRAS_FILE)
    if name_clash := {"logging"} - {f["name"] for f in raw["fields"]}:
        raise ValueError(f"catalog lacks fields the extras extend: {name_clash}")
    later = _read(SINCE_FILE)["fields"]
    fields = tuple(_build_field(e, extras=extras.get("subfields", {})) for e in (*raw["fields"], *later))
    gates = gates_by_minor()[BASE_MINOR]
    runtime = {k: tuple(v) for k, v in (extras.get("runtime") or {}).items()}
    return Catalog(
        fields=fields,
        gates=gates,
        runtime=MappingProxyType(runtime),
        legacy_defaults_warning=str(raw["document"].get("legacy_defaults_warning", "")),
        by_name=MappingProxyType({f.name: f for f in fields}),
    )
