"""What ``ValidateKubeletConfiguration`` does not check but the running kubelet does.

Why this is the dangerous class (reference section 11.2): a config that passes validation is
accepted by DKC, the kubelet restarts onto it, and only then fails (bad eviction signal, unknown
TLS cipher, cgroup driver mismatch, swap on, missing cgroups). It exits and crash-loops; DKC
never falls back, and the node can only be rescued if it survives long enough to sync a new
assignment. So:

- failures certain on every node (unparsable eviction thresholds, unknown cipher names, unknown
  reserved resources, enum values the kubelet rejects at start) are ERRORS here;
- failures that depend on the node (cgroup driver, existing cgroups, swap, kernel sysctls,
  relative paths resolved against the checkpoint directory) are WARNINGS;
- and so are values that silently differ from what the text suggests (legacy defaults, explicit
  zero meaning "default", a partial ``evictionHard`` replacing the whole default map).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from rollout.kubeletconfig.catalog import FieldSpec, load_catalog
from rollout.kubeletconfig.defaults import is_zero
from rollout.kubeletconfig.problems import Problem, error, warning
from rollout.kubeletconfig.values import check_eviction_threshold, parse_go_duration, parse_quantity

Doc = Mapping[str, Any]


def _runtime_error(path: str, message: str, rule: str) -> Problem:
    return error(
        path,
        f"{message} (not caught by kubelet validation: the kubelet would exit at start and crash-loop, no DKC fallback)",
        source="runtime",
        rule=rule,
    )


def check_eviction(cfg: Doc) -> Iterable[Problem]:
    signals = set(load_catalog().runtime["eviction_signals"])
    for name in ("evictionHard", "evictionSoft", "evictionMinimumReclaim"):
        for signal, value in (cfg.get(name) or {}).items():
            if signal not in signals:
                yield _runtime_error(
                    f"{name}.{signal}",
                    f"unsupported eviction signal {signal!r} (known: {', '.join(sorted(signals))})",
                    "eviction-signal",
                )
                continue
            try:
                check_eviction_threshold(value, allow_zero=name == "evictionMinimumReclaim")
            except ValueError as exc:
                yield _runtime_error(f"{name}.{signal}", str(exc), "eviction-threshold")
    yield from _check_soft_grace(cfg, signals)


def _check_soft_grace(cfg: Doc, signals: set[str]) -> Iterable[Problem]:
    grace = cfg.get("evictionSoftGracePeriod") or {}
    for signal in cfg.get("evictionSoft") or {}:
        if signal in signals and signal not in grace:
            yield _runtime_error(
                f"evictionSoft.{signal}",
                f"grace period must be specified for the soft eviction threshold {signal} (evictionSoftGracePeriod)",
                "eviction-soft-grace",
            )
    for signal, value in grace.items():
        try:
            if parse_go_duration(value) < 0:
                raise ValueError(f"grace period {value!r} must not be negative")
        except ValueError as exc:
            yield _runtime_error(f"evictionSoftGracePeriod.{signal}", str(exc), "eviction-grace-duration")


def check_reserved(cfg: Doc) -> Iterable[Problem]:
    known = set(load_catalog().runtime["reserved_resources"])
    for name in ("systemReserved", "kubeReserved"):
        for resource, value in (cfg.get(name) or {}).items():
            if resource not in known:
                yield _runtime_error(
                    f"{name}.{resource}",
                    f'cannot reserve "{resource}" resource (known: {", ".join(sorted(known))})',
                    "reserved-resource",
                )
            elif _negative(value):
                yield _runtime_error(
                    f"{name}.{resource}",
                    f"reserved quantity {value!r} must not be negative",
                    "reserved-negative",
                )


def _negative(value: Any) -> bool:
    try:
        return parse_quantity(value) < 0
    except ValueError:
        return False  # already reported as a decode error


def check_tls(cfg: Doc) -> Iterable[Problem]:
    runtime = load_catalog().runtime
    for i, name in enumerate(cfg.get("tlsCipherSuites") or []):
        if name not in runtime["tls_cipher_suites"]:
            yield _runtime_error(
                f"tlsCipherSuites[{i}]", f"unknown TLS cipher suite {name!r}", "tls-cipher-name"
            )
    version = cfg.get("tlsMinVersion") or ""
    if version and version not in runtime["tls_versions"]:
        yield _runtime_error(
            "tlsMinVersion",
            f"unknown TLS version {version!r} ({', '.join(runtime['tls_versions'])})",
            "tls-min-version",
        )


_RUNTIME_ENUMS = (
    "cgroupDriver",
    "cpuManagerPolicy",
    "memoryManagerPolicy",
    "configMapAndSecretChangeDetectionStrategy",
)


def check_enums(cfg: Doc) -> Iterable[Problem]:
    """Enum fields the kubelet only checks when it starts the component that uses them."""
    catalog = load_catalog()
    for path in (*_RUNTIME_ENUMS, "authorization.mode"):
        spec = catalog.lookup(tuple(path.split(".")))
        value = _get(cfg, path)
        if spec is not None and spec.enum and value not in spec.enum:
            yield _runtime_error(path, f"{value!r} is not one of {', '.join(spec.enum)}", "runtime-enum")


def _get(cfg: Doc, path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def node_dependent_warnings(doc: Doc, cfg: Doc) -> Iterable[Problem]:
    """Warnings for start-up checks whose outcome depends on the node."""
    if "cgroupDriver" not in doc:
        yield warning(
            "cgroupDriver",
            "omitted: defaults to cgroupfs; on nodes whose container runtime uses systemd (kubeadm's default since 1.22) the kubelet fails at start and crash-loops",
            rule="cgroup-driver-omitted",
        )
    for item in ("system-reserved", "kube-reserved"):
        cgroup = cfg.get("systemReservedCgroup" if item == "system-reserved" else "kubeReservedCgroup")
        if item in (cfg.get("enforceNodeAllocatable") or []) and cgroup:  # empty: a validation error
            yield warning(
                "enforceNodeAllocatable",
                f"enforcing {item} needs the cgroup {cgroup!r} to exist on every node, else the kubelet fails at start (no fallback)",
                rule="enforce-cgroup-exists",
            )
    if cfg.get("protectKernelDefaults"):
        yield warning(
            "protectKernelDefaults",
            "true: nodes whose kernel sysctls differ from the kubelet's expectations fail at start (no fallback)",
            rule="protect-kernel-defaults",
        )
    if "failSwapOn" not in doc:
        yield warning(
            "failSwapOn",
            "omitted: defaults to true; nodes with swap enabled fail at start and crash-loop",
            rule="fail-swap-on",
        )
    yield from _cluster_dns_warnings(cfg)
    yield from _relative_path_warnings(cfg)


def _cluster_dns_warnings(cfg: Doc) -> Iterable[Problem]:
    for i, entry in enumerate(cfg.get("clusterDNS") or []):
        try:
            ipaddress.ip_address(entry)
        except ValueError:
            yield warning(
                f"clusterDNS[{i}]",
                f"{entry!r} is not an IP address; the kubelet ignores it with a log, pods get no cluster DNS from it",
                rule="cluster-dns-ip",
            )


_PATH_FIELDS = (
    "staticPodPath",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "resolvConf",
    "authentication.x509.clientCAFile",
)


def _relative_path_warnings(cfg: Doc) -> Iterable[Problem]:
    for path in _PATH_FIELDS:
        value = _get(cfg, path)
        if isinstance(value, str) and value and not value.startswith("/"):
            yield warning(
                path,
                f"relative path {value!r} is resolved against the DKC checkpoint directory (<dynamic-config-dir>/store/checkpoints/<uid>/<rv>/), not the node's config directory",
                rule="relative-path",
            )


# Warnings about a whole config (a field it omits falls back to a default; DKC checkpoints it):
# a drop-in merged over the node's own --config keeps every field it omits and is never
# checkpointed. The merged result is validated per node instead (prepare.review_against_nodes).
WHOLE_CONFIG_RULES = frozenset({"legacy-default", "cgroup-driver-omitted", "fail-swap-on", "relative-path"})

_LEGACY = (
    ("authentication.anonymous.enabled", "false", "true"),
    ("authentication.webhook.enabled", "true", "false"),
    ("authorization.mode", "Webhook", "AlwaysAllow"),
    ("readOnlyPort", "0", "10255"),
)


def legacy_default_warnings(doc: Doc) -> Iterable[Problem]:
    """Omitted fields whose v1beta1 default differs from a flag-configured kubelet's baseline."""
    for path, v1beta1, legacy in _LEGACY:
        if _get(doc, path) is None:
            yield warning(
                path,
                f"omitted: the node switches to the v1beta1 default {v1beta1}; a kubelet started without --config ran with {legacy} (unless the flag is passed explicitly)",
                source="legacy-defaults",
                rule="legacy-default",
            )


def _surprising_zero(value: Any, spec: FieldSpec) -> bool:
    """An explicit 0/"" the kubelet silently replaces by a default (``maxPods: 0`` -> 110).

    Zero durations are skipped: writing "0s" for "default" is the documented convention (kubeadm
    emits a dozen of them), so warning about each would bury the warnings that matter.
    """
    if spec.type.kind == "duration" or spec.path == "logging.flushFrequency":  # int64 nanoseconds
        return False
    return spec.zero_means_default and is_zero(value, spec) and spec.default not in (None, "")


def defaulting_warnings(
    doc: Doc, *, specs: tuple[FieldSpec, ...] | None = None, prefix: str = ""
) -> Iterable[Problem]:
    """Explicit zero values that defaulting replaces, and a partial evictionHard map."""
    for spec in specs if specs is not None else load_catalog().fields:
        value = doc.get(spec.name)
        if spec.type.kind == "object" and isinstance(value, Mapping):
            yield from defaulting_warnings(value, specs=spec.children, prefix=f"{prefix}{spec.name}.")
        elif value is not None and _surprising_zero(value, spec):
            yield warning(
                f"{prefix}{spec.name}",
                f"{value!r} cannot be set: zero means default, the kubelet uses {spec.default!r}",
                source="defaulting",
                rule="zero-means-default",
            )
    if not prefix and isinstance(doc.get("evictionHard"), Mapping):
        missing = sorted(set(load_catalog().field("evictionHard").default) - set(doc["evictionHard"]))  # type: ignore[union-attr]
        if missing:
            yield warning(
                "evictionHard",
                f"setting evictionHard replaces the whole default map: {', '.join(missing)} will no longer be enforced",
                source="defaulting",
                rule="eviction-hard-replaces-defaults",
            )


def gate_warnings(doc: Doc) -> Iterable[Problem]:
    if (doc.get("featureGates") or {}).get("DynamicKubeletConfig") is False:
        yield warning(
            "featureGates.DynamicKubeletConfig",
            "false: on nodes that enable DKC only in their config file (not by flag) this config turns DKC off, so it can never be reverted through DKC",
            source="validation",
            rule="dkc-gate-off",
        )


def runtime_problems(doc: Doc, cfg: Doc) -> tuple[Problem, ...]:
    """All runtime errors and warnings for a document (``doc``) and its defaulted form (``cfg``)."""
    return (
        *check_eviction(cfg),
        *check_reserved(cfg),
        *check_tls(cfg),
        *check_enums(cfg),
        *node_dependent_warnings(doc, cfg),
        *legacy_default_warnings(doc),
        *defaulting_warnings(doc),
        *gate_warnings(doc),
    )
