"""The v1beta1 KubeletConfiguration field table: types, pointer-ness and defaults (Kubernetes 1.23).

Why a table instead of a model class: decoding, defaulting and the ``configz`` rendering all walk
the same facts (which fields are pointers, which treat the zero value as "use the default", which
are omitted when empty), and the facts come from the shared reference file
``kubesim/data/kubelet-config-v1beta1.yaml`` (a copy of ``kubelet-config-v1beta1.yaml``), so the
simulator and the reference cannot drift apart silently.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from kubesim.kubelet.units import normalize_duration

API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"


@dataclass
class FieldSpec:
    """One JSON field of the v1beta1 type."""

    name: str
    type: str  # string|bool|int32|int64|uint32|float64|duration|quantity|map<..>|list<..>|object
    pointer: bool = False
    zero_default: bool = False
    default: Any = None
    children: dict[str, "FieldSpec"] = field(default_factory=dict)  # object / list<object> items
    # json omitempty: dropped from configz output when zero/empty (pointers are kept when set)
    omitempty: bool = True


def _logging_spec() -> FieldSpec:
    """component-base LoggingConfiguration as of 1.23 (not detailed in the reference file)."""
    json_opts = FieldSpec(
        "json",
        "object",
        omitempty=False,
        children={
            "splitStream": FieldSpec("splitStream", "bool"),
            "infoBufferSize": FieldSpec("infoBufferSize", "quantity", default="0", zero_default=True, omitempty=False),
        },
    )
    return FieldSpec(
        "logging",
        "object",
        omitempty=False,
        children={
            "format": FieldSpec("format", "string", zero_default=True, default="text"),
            # time.Duration in nanoseconds, not a metav1.Duration string
            "flushFrequency": FieldSpec(
                "flushFrequency", "int64", zero_default=True, default=5_000_000_000, omitempty=False
            ),
            "verbosity": FieldSpec("verbosity", "uint32", omitempty=False),
            "vmodule": FieldSpec(
                "vmodule",
                "list<object>",
                children={
                    "FilePattern": FieldSpec("FilePattern", "string"),
                    "Verbosity": FieldSpec("Verbosity", "uint32"),
                },
            ),
            "sanitization": FieldSpec("sanitization", "bool"),
            "options": FieldSpec("options", "object", children={"json": json_opts}),
        },
    )


def _sub_spec(raw: dict[str, Any]) -> FieldSpec:
    default = raw.get("default")
    if raw["type"] == "duration" and isinstance(default, str):
        default = normalize_duration(default)  # "1m" in the reference is "1m0s" on the wire
    return FieldSpec(
        raw["name"],
        raw["type"],
        pointer=bool(raw.get("pointer")),
        zero_default=bool(raw.get("zero_means_default")),
        default=default,
    )


def _object_children(subfields: list[dict[str, Any]]) -> dict[str, FieldSpec]:
    """Turn dotted subfield names (``webhook.enabled``) into nested object specs."""
    root: dict[str, FieldSpec] = {}
    for raw in subfields:
        if raw["name"].startswith("("):
            continue
        *parents, leaf = raw["name"].split(".")
        level = root
        for parent in parents:
            node = level.setdefault(parent, FieldSpec(parent, "object", omitempty=False))
            level = node.children
        spec = _sub_spec(raw)
        spec.name = leaf
        level[leaf] = spec
    return root


BASE_MINOR = 23  # the minor of the reference table
NEWEST_MINOR = 99  # every field kubesim knows, whatever its minor (``render`` walks them all)


@lru_cache(maxsize=16)
def fields(minor: int = BASE_MINOR) -> dict[str, FieldSpec]:
    """The top-level fields a kubelet of ``minor`` knows, in declaration order: the 1.23 table,
    then each later field from its minor (``data/kubelet-config-since.yaml``), kept as written."""
    specs = dict(_base_fields())
    text = resources.files("kubesim").joinpath("data", "kubelet-config-since.yaml").read_text()
    for raw in yaml.safe_load(text)["fields"]:
        if raw["since"] <= minor:
            spec = _sub_spec(raw)
            spec.pointer = True  # absent unless set: kubesim does not default them (docs/kubesim.md)
            spec.children = _object_children(raw.get("subfields", []))
            specs[spec.name] = spec
    return specs


@lru_cache(maxsize=1)
def _base_fields() -> dict[str, FieldSpec]:
    """All top-level fields of the 1.23 table, in declaration order."""
    text = resources.files("kubesim").joinpath("data", "kubelet-config-v1beta1.yaml").read_text()
    specs: dict[str, FieldSpec] = {}
    for raw in yaml.safe_load(text)["fields"]:
        spec = _sub_spec(raw)
        if raw["name"] == "logging":
            spec = _logging_spec()
        elif raw["type"] == "object" or raw["type"] == "list<object>":
            spec.children = _object_children(raw.get("subfields", []))
            spec.omitempty = raw["type"] == "list<object>"
        if raw["type"] in ("map<string, string>", "map<string, quantity>") and spec.default is not None:
            spec.default = dict(spec.default)
        specs[spec.name] = spec
    return specs


@lru_cache(maxsize=1)
def flag_table() -> dict[str, str]:
    """kubelet flag -> dotted config field, for flags that override config (E18)."""
    text = resources.files("kubesim").joinpath("data", "kubelet-config-v1beta1.yaml").read_text()
    table: dict[str, str] = {}
    for raw in yaml.safe_load(text)["fields"]:
        if raw.get("flag"):
            table[raw["flag"]] = raw["name"]
        for sub in raw.get("subfields", []):
            if sub.get("flag"):
                table[sub["flag"]] = f"{raw['name']}.{sub['name']}"
    table.update(EXTRA_FLAGS)
    return table


# Flags of the 1.23 kubelet that also map to config fields but are not named in the reference.
EXTRA_FLAGS = {
    "--address": "address",
    "--cgroup-driver": "cgroupDriver",
    "--cluster-dns": "clusterDNS",
    "--cluster-domain": "clusterDomain",
    "--container-log-max-files": "containerLogMaxFiles",
    "--container-log-max-size": "containerLogMaxSize",
    "--cpu-manager-policy": "cpuManagerPolicy",
    "--eviction-hard": "evictionHard",
    "--eviction-soft": "evictionSoft",
    "--eviction-soft-grace-period": "evictionSoftGracePeriod",
    "--eviction-minimum-reclaim": "evictionMinimumReclaim",
    "--fail-swap-on": "failSwapOn",
    "--healthz-bind-address": "healthzBindAddress",
    "--kube-reserved": "kubeReserved",
    "--system-reserved": "systemReserved",
    "--node-status-update-frequency": "nodeStatusUpdateFrequency",
    "--pod-max-pids": "podPidsLimit",
    "--protect-kernel-defaults": "protectKernelDefaults",
    "--resolv-conf": "resolvConf",
    "--rotate-certificates": "rotateCertificates",
    "--runtime-request-timeout": "runtimeRequestTimeout",
    "--serialize-image-pulls": "serializeImagePulls",
    "--streaming-connection-idle-timeout": "streamingConnectionIdleTimeout",
    "--sync-frequency": "syncFrequency",
    "--tls-cipher-suites": "tlsCipherSuites",
    "--tls-min-version": "tlsMinVersion",
    "--volume-plugin-dir": "volumePluginDir",
    "--memory-manager-policy": "memoryManagerPolicy",
    "--static-pod-path": "staticPodPath",
    "--client-ca-file": "authentication.x509.clientCAFile",
}

# Flags that exist on a 1.23 kubelet but do not map to a config field (accepted, ignored here).
PLAIN_FLAGS = frozenset(
    {
        "--kubeconfig",
        "--bootstrap-kubeconfig",
        "--config",
        "--container-runtime",
        "--container-runtime-endpoint",
        "--node-ip",
        "--hostname-override",
        "--pod-infra-container-image",
        "--cert-dir",
        "--root-dir",
        "--node-labels",
        "--register-with-taints",
        "--cloud-provider",
        "--v",
        "--network-plugin",
        "--image-service-endpoint",
        "--runtime-cgroups",
        "--provider-id",
        "--logtostderr",
    }
)


def default_of(spec: FieldSpec) -> Any:
    return copy.deepcopy(spec.default)


def zero_of(spec: FieldSpec) -> Any:
    """The Go zero value of a non-pointer field as it appears after decoding (None = nil)."""
    if spec.type == "bool":
        return False
    if spec.type in ("int32", "int64", "uint32"):
        return 0
    if spec.type == "float64":
        return 0.0
    if spec.type in ("string", "quantity"):
        return ""
    if spec.type == "duration":
        return "0s"
    if spec.type == "object":
        return {}
    return None
