"""Turn a node's ``/configz`` output into a KubeletConfiguration document.

Why not the seed's ``jq '.kubeletconfig | .kind=... | .apiVersion=...'``: a 1.23 kubelet's
configz is its running config converted to v1beta1 (``setConfigz`` in cmd/kubelet/app/server.go)
but without TypeMeta, and a kubelet of another minor version (or a simulator, or a proxy) may
add keys this validator does not know, Go-cased names or nulls. Publishing that verbatim either
fails strict decoding (the kubelet's lenient fallback silently drops keys) or is refused by our
validator. This keeps exactly the v1beta1 fields (matched case-insensitively, so Go field names
map back), drops nulls, adds ``kind``/``apiVersion``, and yields a document that round-trips
through ``validate_config`` with no diff against the node.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from rollout.errors import ConfigError
from rollout.inputs import parse_document
from rollout.kubeletconfig.catalog import API_VERSION, KIND, FieldSpec, load_catalog


def _keep(specs: tuple[FieldSpec, ...], body: Mapping[str, Any]) -> dict[str, Any]:
    """The known fields of one object level, renamed to their JSON names."""
    by_lower = {s.name.lower(): s for s in specs}
    out: dict[str, Any] = {}
    for key, value in body.items():
        spec = by_lower.get(str(key).lower())
        if spec is None or value is None:
            continue
        out[spec.name] = _value(spec, value)
    return out


def _value(spec: FieldSpec, value: Any) -> Any:
    if spec.children and isinstance(value, Mapping):
        return _keep(spec.children, value)
    if spec.children and isinstance(value, list):  # list<object>: filter each item
        return [_keep(spec.children, v) if isinstance(v, Mapping) else v for v in value]
    return copy.deepcopy(value)


class ConfigzError(ConfigError, ValueError):
    """A node's configz answer is not configz output (a ValueError too, for older callers)."""

    advice = "the node's kubelet answered something that is not configz; check the node"


def parse_configz(data: str | bytes, *, source: str = "configz") -> dict[str, Any]:
    """A configz response body through the input boundary (size, depth, digits, encoding)."""
    doc = parse_document(data, source=source, error=ConfigzError)
    if not isinstance(doc.data, dict):
        raise ConfigzError("not configz output: expected a JSON object", source=source)
    return doc.data


def export_from_configz(configz_json: Mapping[str, Any] | str | bytes) -> dict[str, Any]:
    """``{"kubeletconfig": {...}}`` (parsed, or the response text) -> a KubeletConfiguration
    v1beta1 document (a new dict); ``ConfigzError`` when it is not configz output."""
    parsed = configz_json if isinstance(configz_json, Mapping) else parse_configz(configz_json)
    body = parsed.get("kubeletconfig")
    if not isinstance(body, Mapping):
        raise ConfigzError("not configz output: expected a 'kubeletconfig' object at the top level")
    exported = {"kind": KIND, "apiVersion": API_VERSION, **_keep(load_catalog().fields, body)}
    # Go's json omits a zero readOnlyPort (omitempty): absent from configz means the node runs 0,
    # and written down it stays 0 (omitted, validate warns that a flag-configured kubelet had 10255)
    for field, zero in OMITTED_WHEN_ZERO.items():
        exported.setdefault(field, zero)
    return exported


# fields a kubelet's configz leaves out when they are zero (``json:",omitempty"`` on a plain int),
# and whose absence from a config means something else (rollout.kubeletconfig.runtime._LEGACY)
OMITTED_WHEN_ZERO = {"readOnlyPort": 0}


def dropped_keys(configz_json: Mapping[str, Any]) -> list[str]:
    """Top-level configz keys the export leaves out (for an operator-facing note)."""
    body = configz_json.get("kubeletconfig")
    known = {f.name.lower() for f in load_catalog().fields} | {"kind", "apiversion"}
    return sorted(str(k) for k in (body if isinstance(body, Mapping) else {}) if str(k).lower() not in known)
