"""Decode, default and flag-override a KubeletConfiguration exactly like a 1.23 kubelet.

Why: whether DKC rolls back (load/validate failure at Bootstrap) or crash-loops (runtime failure)
depends on *where* a bad value is caught, so each stage raises its own error type:

* :class:`LoadError` - the payload cannot be decoded (bad YAML/JSON, missing or wrong
  ``kind``/``apiVersion``, wrong value types). Unknown or duplicate fields only warn (E17).
* :class:`FlagError` - a kubelet command-line flag cannot be parsed (the process never starts).

Decoding follows ``sigs.k8s.io/json`` (case-sensitive, strict then lenient) and v1beta1
defaulting: omitted fields get the v1beta1 defaults, never the node's previous values. Flags
(``KubeletSetup.flags``) are re-applied over any loaded config and ``--feature-gates`` win over the
file's ``featureGates`` (E18).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any, Mapping

import yaml

from kubesim.kubelet import schema
from kubesim.kubelet.schema import FieldSpec
from kubesim.kubelet.units import UnitError, normalize_duration

Config = dict[str, Any]
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1), "uint32": (0, 2**32 - 1)}


class LoadError(Exception):
    """The payload could not be decoded into a KubeletConfiguration."""


class FlagError(Exception):
    """A command-line flag could not be parsed; the kubelet exits before doing anything."""


class _NoTimestampLoader(yaml.SafeLoader):
    """YAML -> JSON like sigs.k8s.io/yaml: timestamps stay strings."""


_NoTimestampLoader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


# ----------------------------------------------------------------------------------------- parse
def _parse_document(text: str) -> tuple[Any, str, list[str]]:
    """JSON first, else YAML; returns (object, its JSON text for messages, duplicate-key warnings)."""
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                duplicates.append(f'json: duplicate field "{key}"')
            seen[key] = value
        return seen

    try:
        return json.loads(text, object_pairs_hook=pairs), text, duplicates
    except ValueError:
        pass
    try:
        obj = yaml.load(text, Loader=_NoTimestampLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        raise LoadError(f"failed to decode: error converting YAML to JSON: yaml: {_yaml_reason(exc)}") from exc
    return obj, json.dumps(obj, separators=(",", ":"), default=str), duplicates


def _yaml_reason(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    return f"line {mark.line + 1}: {problem}" if mark is not None else problem


def _check_type_meta(obj: Any, raw: str) -> None:
    """The universal decoder's kind/apiVersion checks (messages as in apimachinery)."""
    if not isinstance(obj, dict):
        raise LoadError(
            "failed to decode: couldn't get version/kind; json parse error: json: cannot unmarshal "
            f'{_json_kind(obj)} into Go value of type struct {{ APIVersion string "json:\\"apiVersion,omitempty\\""; '
            'Kind string "json:\\"kind,omitempty\\"" }'
        )
    kind, version = obj.get("kind"), obj.get("apiVersion")
    if not kind:
        raise LoadError(f"failed to decode: Object 'Kind' is missing in '{raw}'")
    if not version:
        raise LoadError(f"failed to decode: Object 'apiVersion' is missing in '{raw}'")
    if not isinstance(kind, str) or not isinstance(version, str):
        raise LoadError(
            "failed to decode: couldn't get version/kind; json parse error: json: cannot unmarshal "
            "into Go struct field .kind of type string"
        )
    if version != schema.API_VERSION or kind != schema.KIND:
        raise LoadError(
            f'failed to decode: no kind "{kind}" is registered for version "{version}" in scheme '
            '"k8s.io/kubernetes/pkg/kubelet/apis/config/scheme/scheme.go:29"'
        )


# ------------------------------------------------------------------------------------ typed decode
def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"


def _go_type(spec_type: str) -> str:
    if spec_type in ("duration",):
        return "string"
    if spec_type == "quantity":
        return "string"
    if spec_type.startswith("map<"):
        inner = spec_type[4:-1].split(",", 1)[1].strip()
        return f"map[string]{_go_type(inner)}"
    if spec_type.startswith("list<"):
        return f"[]{_go_type(spec_type[5:-1])}"
    return {"object": "struct"}.get(spec_type, spec_type)


class _Decoder:
    """Walks a JSON value against the field table, collecting strict-mode warnings."""

    def __init__(self) -> None:
        self.unknown: list[str] = []

    def type_error(self, value: Any, path: str, spec_type: str) -> LoadError:
        return LoadError(
            f"failed to decode: json: cannot unmarshal {_json_kind(value)} into Go struct field "
            f"KubeletConfiguration.{path} of type {_go_type(spec_type)}"
        )

    def value(self, spec_type: str, value: Any, path: str, children: Mapping[str, FieldSpec]) -> Any:
        if value is None:
            return None
        if spec_type == "bool":
            if not isinstance(value, bool):
                raise self.type_error(value, path, spec_type)
            return value
        if spec_type in _INT_RANGES:
            return self._int(spec_type, value, path)
        if spec_type == "float64":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.type_error(value, path, spec_type)
            return float(value)
        if spec_type in ("string", "quantity"):
            if not isinstance(value, str):
                raise self.type_error(value, path, spec_type)
            return value
        if spec_type == "duration":
            return self._duration(value, path)
        if spec_type.startswith("map<"):
            return self._map(spec_type, value, path)
        if spec_type == "list<object>":
            if not isinstance(value, list):
                raise self.type_error(value, path, spec_type)
            return [self.obj(children, item, path) for item in value]
        if spec_type.startswith("list<"):
            if not isinstance(value, list):
                raise self.type_error(value, path, spec_type)
            return [self.value(spec_type[5:-1], item, path, {}) for item in value]
        if spec_type == "object":
            return self.obj(children, value, path)
        raise AssertionError(f"unhandled type {spec_type}")

    def _int(self, spec_type: str, value: Any, path: str) -> int:
        is_integral_float = isinstance(value, float) and value.is_integer() and False  # Go rejects 5.0 for ints
        if isinstance(value, bool) or not isinstance(value, int) or is_integral_float:
            raise self.type_error(value, path, spec_type)
        low, high = _INT_RANGES[spec_type]
        if not low <= value <= high:
            raise LoadError(
                f"failed to decode: json: cannot unmarshal number {value} into Go struct field "
                f"KubeletConfiguration.{path} of type {spec_type}"
            )
        return value

    def _duration(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise LoadError(
                f"failed to decode: json: cannot unmarshal {_json_kind(value)} into Go value of type string"
            )
        try:
            return normalize_duration(value)
        except UnitError as exc:
            raise LoadError(f"failed to decode: {exc}") from exc

    def _map(self, spec_type: str, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.type_error(value, path, spec_type)
        inner = spec_type[4:-1].split(",", 1)[1].strip()
        return {str(k): self.value(inner, v, f"{path}", {}) for k, v in value.items()}

    def obj(self, children: Mapping[str, FieldSpec], value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.type_error(value, path, "object")
        out: dict[str, Any] = {}
        for key, item in value.items():
            spec = children.get(key)
            if spec is None:
                self.unknown.append(f'unknown field "{(path + ".") if path else ""}{key}"')
                continue
            out[key] = self.value(spec.type, item, f"{path}.{key}" if path else key, spec.children)
        return out


def parse_document(text: str) -> dict[str, Any]:
    """JSON or YAML with a KubeletConfiguration type meta, not decoded against the type (drop-ins)."""
    obj, raw, _duplicates = _parse_document(text)
    _check_type_meta(obj, raw)
    return dict(obj)


# ------------------------------------------------------------------------------------- defaulting
def _apply_defaults(children: Mapping[str, FieldSpec], obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in children.items():
        value = obj.get(name)
        if spec.type == "object" and not (spec.pointer and value is None):
            value = _apply_defaults(spec.children, value or {})
        elif spec.type == "list<object>" and value is not None:
            value = [_apply_defaults(spec.children, item) for item in value]
        elif value is None:
            value = (
                schema.default_of(spec)
                if spec.default is not None
                else (None if spec.pointer else schema.zero_of(spec))
            )
        elif spec.zero_default and value == schema.zero_of(spec):
            value = schema.default_of(spec)
        out[name] = value
    return out


def _special_defaults(cfg: Config, explicit: Mapping[str, Any], minor: int) -> None:
    """The few v1beta1 defaults that are not 'zero -> constant'."""
    # 1.27+: image pulls are serial by default only while maxParallelImagePulls says at most one
    parallel = explicit.get("maxParallelImagePulls")
    if minor >= 27 and explicit.get("serializeImagePulls") is None and isinstance(parallel, int) and parallel >= 2:
        cfg["serializeImagePulls"] = False
    update = explicit.get("nodeStatusUpdateFrequency")
    if explicit.get("nodeStatusReportFrequency") in (None, "0s") and update not in (None, "0s"):
        cfg["nodeStatusReportFrequency"] = cfg["nodeStatusUpdateFrequency"]
    if cfg.get("podPidsLimit") is None or cfg["podPidsLimit"] < 0:
        cfg["podPidsLimit"] = -1


def decode_body(body: Mapping[str, Any], minor: int = schema.BASE_MINOR) -> tuple[Config, list[str]]:
    """Typed decode + v1beta1 defaults of an already-parsed object (kind/apiVersion ignored), by
    a kubelet of ``minor`` (a field it does not know yet is unknown: lenient decoding drops it)."""
    decoder = _Decoder()
    top = {k: v for k, v in body.items() if k not in ("kind", "apiVersion")}
    known = schema.fields(minor)
    explicit = decoder.obj(known, top, "")
    cfg = _apply_defaults(known, explicit)
    _special_defaults(cfg, explicit, minor)
    return cfg, decoder.unknown


def decode_payload(data: str, minor: int = schema.BASE_MINOR) -> tuple[Config, list[str]]:
    """Decode a ConfigMap payload; returns (defaulted config, warnings). Raises :class:`LoadError`.

    Each payload is decoded once (its copy handed out after that): a rollout restarts thousands of
    kubelets on the same payload, and decoding its YAML was a sixth of kubesim's event loop."""
    cfg, warnings = _decoded(data, minor)
    return copy.deepcopy(cfg), list(warnings)


@functools.lru_cache(maxsize=64)
def _decoded(data: str, minor: int) -> tuple[Config, tuple[str, ...]]:
    obj, raw, duplicates = _parse_document(data)
    _check_type_meta(obj, raw)
    cfg, unknown = decode_body(obj, minor)
    strict = duplicates + [f"strict decoding error: {u}" for u in unknown]
    warnings = [f"using lenient decoding as strict decoding failed: {', '.join(strict)}"] if strict else []
    return cfg, tuple(warnings)


# ------------------------------------------------------------------------------------------ flags
def _flag_value(flag: str, spec: FieldSpec, text: str) -> Any:
    bad = f'invalid argument "{text}" for "{flag}" flag'
    try:
        if spec.type == "bool":
            if text.lower() not in ("true", "false", "1", "0", "t", "f"):
                raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')
            return text.lower() in ("true", "1", "t")
        if spec.type in _INT_RANGES:
            if not re.fullmatch(r"[+-]?\d+", text):
                raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
            return int(text)
        if spec.type == "float64":
            return float(text)
        if spec.type == "duration":
            return normalize_duration(text)
        if spec.type.startswith("list<"):
            return [item for item in text.split(",") if item] if text else []
        if spec.type.startswith("map<"):
            return _flag_map(flag, text)
        return text
    except (ValueError, UnitError) as exc:
        raise FlagError(f"{bad}: {exc}") from exc


def _flag_map(flag: str, text: str) -> dict[str, str]:
    """``k=v,k2=v2`` (reserved) or ``signal<value`` (eviction) map flags."""
    sep = (
        "<" if flag.startswith("--eviction-hard") or flag.startswith("--eviction-soft") and "grace" not in flag else "="
    )
    out: dict[str, str] = {}
    for item in filter(None, text.split(",")):
        if sep not in item:
            raise ValueError(f"malformed pair, expect string{sep}string")
        key, value = item.split(sep, 1)
        out[key.strip()] = value.strip()
    return out


def _set_path(cfg: Config, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    level = cfg
    for parent in parents:
        level = level.setdefault(parent, {})
    level[leaf] = value


def _spec_at(dotted: str) -> FieldSpec:
    parts = dotted.split(".")
    spec = schema.fields()[parts[0]]
    for part in parts[1:]:
        spec = spec.children[part]
    return spec


def parse_flags(flags: Mapping[str, str]) -> dict[str, Any]:
    """Parse ``KubeletSetup.flags`` into {dotted field: value}; unknown flags fail like pflag."""
    parsed: dict[str, Any] = {}
    table = schema.flag_table()
    for flag, text in flags.items():
        name = flag if flag.startswith("--") else f"--{flag}"
        if name in table:
            parsed[table[name]] = _flag_value(name, _spec_at(table[name]), str(text))
        elif name not in schema.PLAIN_FLAGS and name not in ("--feature-gates", "--dynamic-config-dir"):
            raise FlagError(f"unknown flag: {name}")
    return parsed


def apply_flags(cfg: Config, flag_values: Mapping[str, Any], flag_gates: Mapping[str, bool]) -> Config:
    """Flag precedence (the controller's ``transform``): passed flags win, then gates merge (E18)."""
    out: Config = json.loads(json.dumps(cfg))
    for dotted, value in flag_values.items():
        _set_path(out, dotted, value)
    gates = dict(out.get("featureGates") or {})
    gates.update(flag_gates)
    out["featureGates"] = gates or None
    return out


def local_config(body: Mapping[str, Any], minor: int = schema.BASE_MINOR) -> tuple[Config, list[str]]:
    """The ``--config`` file (body without kind/apiVersion) decoded with v1beta1 defaults."""
    return decode_body(body, minor)


# KubeletConfigurationPathRefs: the fields whose relative paths are resolved against the directory
# the config was loaded from (for DKC: the checkpoint dir, reference section 5)
PATH_FIELDS = ("staticPodPath", "tlsCertFile", "tlsPrivateKeyFile", "authentication.x509.clientCAFile", "resolvConf")


def resolve_relative_paths(cfg: Config, base: str) -> Config:
    """Make relative path fields absolute under ``base`` (empty values stay empty)."""
    for dotted in PATH_FIELDS:
        *parents, leaf = dotted.split(".")
        level = cfg
        for parent in parents:
            level = level.get(parent) or {}
        value = level.get(leaf)
        if isinstance(value, str) and value and not value.startswith("/"):
            level[leaf] = f"{base.rstrip('/')}/{value}"
    return cfg
