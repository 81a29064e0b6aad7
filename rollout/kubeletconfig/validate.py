"""The 1.23 ``ValidateKubeletConfiguration`` rules (and the later ones on fields added since), run
on the defaulted config.

Why a port: a config that fails these on the node makes the kubelet report ``failed to validate
config`` and fall back, after it already restarted. Checking the same rules before publishing
means a bad config never reaches a node. The rules follow the real 1.23 source
(pkg/kubelet/apis/config/validation/validation.go, read from a vendored 1.23 copy), message
texts included where practical; each rule is a small function returning problems so every
violation is reported in one pass (the kubelet aggregates them the same way).

Input: ``cfg`` is the effective (defaulted) config, ``gates`` the merged feature gates.
Linux nodes are assumed (the Windows-only checks of validateKubeletOSConfiguration are not run).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rollout.kubeletconfig.problems import Problem, error
from rollout.kubeletconfig.values import parse_cpuset, parse_go_duration, parse_quantity

Gates = Mapping[str, bool]
Rule = Callable[[Mapping[str, Any], Gates], Iterable[Problem]]

_SECOND = 1_000_000_000
_MICROSECOND = 1_000
_CFS_DEFAULT = 100_000_000
_PREVIOUS_MINOR = "1.22"  # showHiddenMetricsForVersion accepts only the previous minor of 1.23


def _int(cfg: Mapping[str, Any], name: str) -> int:
    value = cfg.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _ns(cfg: Mapping[str, Any], name: str) -> int:
    try:
        return parse_go_duration(cfg.get(name) or "0s")
    except ValueError:
        return 0


def _invalid(path: str, message: str, rule: str) -> Problem:
    return error(path, f"invalid configuration: {message}", rule=rule)


def rule_node_lease(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    if _int(cfg, "nodeLeaseDurationSeconds") <= 0:
        yield _invalid(
            "nodeLeaseDurationSeconds",
            "nodeLeaseDurationSeconds must be greater than 0",
            "node-lease-positive",
        )


def rule_cgroups(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    if cfg.get("cgroupsPerQOS") is False and cfg.get("enforceNodeAllocatable"):
        yield _invalid(
            "enforceNodeAllocatable",
            "enforceNodeAllocatable (--enforce-node-allocatable) is not supported unless cgroupsPerQOS (--cgroups-per-qos) is set to true",
            "enforce-needs-cgroups-per-qos",
        )
    if cfg.get("systemCgroups") and not cfg.get("cgroupRoot"):
        yield _invalid(
            "systemCgroups",
            "systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified",
            "system-cgroups-need-cgroup-root",
        )


_NON_NEGATIVE = (
    "eventBurst",
    "eventRecordQPS",
    "kubeAPIBurst",
    "kubeAPIQPS",
    "maxOpenFiles",
    "maxPods",
    "podsPerCore",
    "registryBurst",
    "registryPullQPS",
)


def rule_non_negative(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    for name in _NON_NEGATIVE:
        if _int(cfg, name) < 0:
            yield _invalid(name, f"{name} {cfg[name]} must not be a negative number", "non-negative")


def rule_ports(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    for name in ("healthzPort", "readOnlyPort"):
        value = _int(cfg, name)
        if value != 0 and not 1 <= value <= 65535:
            yield _invalid(
                name, f"{name} {value} must be between 1 and 65535, inclusive (or 0 to disable)", "port-range"
            )
    # 1.23 does not validate `port` (the reference says it does); the kubelet then fails to bind
    # at start and crash-loops with no fallback, so refuse it as a certain runtime failure.
    if not 1 <= _int(cfg, "port") <= 65535:
        yield error(
            "port",
            f"port {cfg.get('port')} must be between 1 and 65535 (not validated by the kubelet: it would crash-loop)",
            source="runtime",
            rule="port-range",
        )


def rule_cfs_quota_period(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    period = _ns(cfg, "cpuCFSQuotaPeriod")
    if not gates.get("CustomCPUCFSQuotaPeriod") and period != _CFS_DEFAULT:
        yield _invalid(
            "cpuCFSQuotaPeriod",
            f"cpuCFSQuotaPeriod {cfg.get('cpuCFSQuotaPeriod')} requires feature gate CustomCPUCFSQuotaPeriod",
            "cfs-period-needs-gate",
        )
    if gates.get("CustomCPUCFSQuotaPeriod") and not _MICROSECOND <= period <= _SECOND:
        yield _invalid(
            "cpuCFSQuotaPeriod",
            f"cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {cfg.get('cpuCFSQuotaPeriod')} must be between 1usec and 1sec, inclusive",
            "cfs-period-range",
        )


def rule_image_gc(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    high, low = _int(cfg, "imageGCHighThresholdPercent"), _int(cfg, "imageGCLowThresholdPercent")
    for name, value in (("imageGCHighThresholdPercent", high), ("imageGCLowThresholdPercent", low)):
        if not 0 <= value <= 100:
            yield _invalid(
                name, f"{name} {value} must be between 0 and 100, inclusive", "image-gc-percent-range"
            )
    if low >= high:
        yield _invalid(
            "imageGCLowThresholdPercent",
            f"imageGCLowThresholdPercent {low} must be less than imageGCHighThresholdPercent {high}",
            "image-gc-low-below-high",
        )


def rule_ranges(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    for name, low, high in (
        ("iptablesDropBit", 0, 31),
        ("iptablesMasqueradeBit", 0, 31),
        ("oomScoreAdj", -1000, 1000),
    ):
        if not low <= _int(cfg, name) <= high:
            yield _invalid(
                name, f"{name} {cfg.get(name)} must be between {low} and {high}, inclusive", f"{name}-range"
            )
    if _int(cfg, "nodeStatusMaxImages") < -1:
        yield _invalid(
            "nodeStatusMaxImages",
            "nodeStatusMaxImages (--node-status-max-images) must be -1 or greater",
            "node-status-max-images-range",
        )


def rule_server_tls_bootstrap(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    if cfg.get("serverTLSBootstrap") and not gates.get("RotateKubeletServerCertificate"):
        yield _invalid(
            "serverTLSBootstrap",
            "serverTLSBootstrap true requires feature gate RotateKubeletServerCertificate",
            "server-tls-bootstrap-needs-gate",
        )


def rule_topology_manager(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    policy, scope = cfg.get("topologyManagerPolicy"), cfg.get("topologyManagerScope")
    if policy != "none" and not gates.get("TopologyManager"):
        yield _invalid(
            "topologyManagerPolicy",
            f"topologyManagerPolicy {policy} requires feature gate TopologyManager",
            "topology-policy-needs-gate",
        )
    if policy not in ("none", "best-effort", "restricted", "single-numa-node"):
        yield _invalid(
            "topologyManagerPolicy",
            f"topologyManagerPolicy non-allowable value: {policy} (none, best-effort, restricted, single-numa-node)",
            "topology-policy-enum",
        )
    if scope != "container" and not gates.get("TopologyManager"):
        yield _invalid(
            "topologyManagerScope",
            f"topologyManagerScope {scope} requires feature gate TopologyManager",
            "topology-scope-needs-gate",
        )
    if scope not in ("container", "pod"):
        yield _invalid(
            "topologyManagerScope",
            f"topologyManagerScope non-allowable value: {scope} (container, pod)",
            "topology-scope-enum",
        )


_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _taint_key_ok(key: Any) -> bool:
    """k8s IsQualifiedName: optional DNS-subdomain prefix, '/', name of at most 63 chars."""
    if not isinstance(key, str) or not key:
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123.match(prefix)):
        return False
    return len(name) <= 63 and bool(_QUALIFIED.match(name))


def _taint_ok(taint: Mapping[str, Any]) -> bool:
    value, effect = taint.get("value") or "", taint.get("effect") or ""
    value_ok = value == "" or (len(value) <= 63 and bool(_QUALIFIED.match(value)))
    return (
        _taint_key_ok(taint.get("key"))
        and value_ok
        and effect in ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
    )


def rule_register_with_taints(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    for i, taint in enumerate(cfg.get("registerWithTaints") or []):
        if not _taint_ok(taint):
            yield error(
                f"registerWithTaints[{i}]",
                f"invalid taint: {taint} (key must be a qualified name, value a label value, effect NoSchedule/PreferNoSchedule/NoExecute)",
                rule="taint-valid",
            )
        if taint.get("timeAdded") is not None:
            yield error(
                f"registerWithTaints[{i}].timeAdded", "taint TimeAdded is not nil", rule="taint-time-added"
            )


def rule_graceful_shutdown(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    total, critical = _ns(cfg, "shutdownGracePeriod"), _ns(cfg, "shutdownGracePeriodCriticalPods")
    if gates.get("GracefulNodeShutdown"):
        if total < 0 or critical < 0 or critical > total:
            yield _invalid(
                "shutdownGracePeriodCriticalPods",
                "ShutdownGracePeriod and ShutdownGracePeriodCriticalPods must be >= 0, and ShutdownGracePeriodCriticalPods must be <= ShutdownGracePeriod",
                "shutdown-critical-within-total",
            )
        for name, value in (("shutdownGracePeriod", total), ("shutdownGracePeriodCriticalPods", critical)):
            if 0 < value < _SECOND:
                yield _invalid(
                    name,
                    f"{name} {cfg.get(name)} must be either zero or otherwise >= 1 sec",
                    "shutdown-period-min",
                )
    elif total > 0 or critical > 0:
        yield _invalid(
            "shutdownGracePeriod",
            "Specifying ShutdownGracePeriod or ShutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown",
            "shutdown-needs-gate",
        )
    yield from _shutdown_by_priority(cfg, gates, total=total, critical=critical)


def _shutdown_by_priority(
    cfg: Mapping[str, Any], gates: Gates, *, total: int, critical: int
) -> Iterable[Problem]:
    if not cfg.get("shutdownGracePeriodByPodPriority"):
        return
    if not gates.get("GracefulNodeShutdownBasedOnPodPriority"):
        yield _invalid(
            "shutdownGracePeriodByPodPriority",
            "Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority",
            "shutdown-by-priority-needs-gate",
        )
    elif total > 0 or critical > 0:
        yield _invalid(
            "shutdownGracePeriodByPodPriority",
            "Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time",
            "shutdown-by-priority-exclusive",
        )


def rule_memory_swap(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    behavior = (cfg.get("memorySwap") or {}).get("swapBehavior") or ""
    if gates.get("NodeSwap") and behavior not in ("", "LimitedSwap", "UnlimitedSwap"):
        yield _invalid(
            "memorySwap.swapBehavior",
            f"MemorySwap.SwapBehavior {behavior} must be one of: LimitedSwap, UnlimitedSwap",
            "swap-behavior-enum",
        )
    if not gates.get("NodeSwap") and behavior:
        yield _invalid(
            "memorySwap.swapBehavior",
            "MemorySwap.SwapBehavior cannot be set when NodeSwap feature flag is disabled",
            "swap-needs-gate",
        )


def rule_enforce_node_allocatable(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    items = cfg.get("enforceNodeAllocatable") or []
    for i, item in enumerate(items):
        path = f"enforceNodeAllocatable[{i}]"
        if item == "system-reserved" and not cfg.get("systemReservedCgroup"):
            yield _invalid(
                path,
                "systemReservedCgroup (--system-reserved-cgroup) must be specified when 'system-reserved' contained in enforceNodeAllocatable (--enforce-node-allocatable)",
                "system-reserved-needs-cgroup",
            )
        elif item == "kube-reserved" and not cfg.get("kubeReservedCgroup"):
            yield _invalid(
                path,
                "kubeReservedCgroup (--kube-reserved-cgroup) must be specified when 'kube-reserved' contained in enforceNodeAllocatable (--enforce-node-allocatable)",
                "kube-reserved-needs-cgroup",
            )
        elif item == "none" and len(items) > 1:
            yield _invalid(
                path,
                "enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when 'none' is specified",
                "enforce-none-alone",
            )
        elif item not in ("pods", "system-reserved", "kube-reserved", "none"):
            yield _invalid(
                path,
                f"option {item!r} specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are 'pods', 'system-reserved', 'kube-reserved', or 'none'",
                "enforce-enum",
            )


def rule_hairpin_mode(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    mode = cfg.get("hairpinMode")
    if mode not in ("none", "hairpin-veth", "promiscuous-bridge"):
        yield _invalid(
            "hairpinMode",
            f"option {mode!r} specified for hairpinMode (--hairpin-mode). Valid options are 'none', 'hairpin-veth' or 'promiscuous-bridge'",
            "hairpin-enum",
        )


def rule_reserved_system_cpus(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    cpus = cfg.get("reservedSystemCPUs") or ""
    if not cpus:
        return
    if cfg.get("systemReservedCgroup") or cfg.get("kubeReservedCgroup"):
        yield error(
            "reservedSystemCPUs",
            "can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)",
            rule="reserved-cpus-exclusive",
        )
    try:
        parse_cpuset(cpus)
    except ValueError as exc:
        yield error(
            "reservedSystemCPUs",
            f"unable to parse reservedSystemCPUs (--reserved-cpus), error: {exc}",
            rule="reserved-cpus-cpuset",
        )


def rule_reserved_memory(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    seen: set[tuple[Any, str]] = set()
    for i, entry in enumerate(cfg.get("reservedMemory") or []):
        numa = entry.get("numaNode", 0)
        for resource, amount in (entry.get("limits") or {}).items():
            path = f"reservedMemory[{i}].limits.{resource}"
            if (numa, resource) in seen:
                yield _invalid(
                    path,
                    f"the reserved memory has a duplicate value for NUMA node {numa} and resource {resource!r}",
                    "reserved-memory-duplicate",
                )
            seen.add((numa, resource))
            if resource != "memory" and not resource.startswith("hugepages-"):
                yield _invalid(
                    path,
                    f"the limit type {resource!r} for NUMA node {numa} is not supported, only [memory hugepages-<HugePageSize>] is accepted",
                    "reserved-memory-resource",
                )
            if _quantity_or_none(amount) == 0:
                yield _invalid(
                    path,
                    f"reserved memory may not be zero for NUMA node {numa} and resource {resource!r}",
                    "reserved-memory-nonzero",
                )


def _quantity_or_none(value: Any) -> Any:
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def rule_hidden_metrics(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    version = cfg.get("showHiddenMetricsForVersion") or ""
    if version and version != _PREVIOUS_MINOR:
        yield error(
            "showHiddenMetricsForVersion",
            f"--show-hidden-metrics-for-version must be omitted or have the value '{_PREVIOUS_MINOR}'. Only the previous minor version is allowed",
            rule="hidden-metrics-previous-minor",
        )


def rule_logging(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    fmt = (cfg.get("logging") or {}).get("format", "text")
    if fmt not in ("text", "json"):
        yield error("logging.format", f"Unsupported log format {fmt!r} (text, json)", rule="logging-format")


def rule_memory_throttling(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    factor = cfg.get("memoryThrottlingFactor")
    if gates.get("MemoryQoS") and factor is None:
        yield _invalid(
            "memoryThrottlingFactor",
            "memoryThrottlingFactor is required when MemoryQoS feature flag is enabled",
            "memory-throttling-required",
        )
    if factor is not None and not 0 < factor <= 1.0:
        yield _invalid(
            "memoryThrottlingFactor",
            f"memoryThrottlingFactor {factor} must be greater than 0 and less than or equal to 1.0",
            "memory-throttling-range",
        )


def rule_later_fields(cfg: Mapping[str, Any], gates: Gates) -> Iterable[Problem]:
    """The rules on fields added after 1.23 (the 1.31 source), each only where the config sets
    the field: they have no default here (``rollout/catalog/kubelet-config-since.yaml``)."""
    parallel = cfg.get("maxParallelImagePulls")
    if isinstance(parallel, int) and parallel < 1:
        yield _invalid("maxParallelImagePulls", f"maxParallelImagePulls {parallel} must be a positive number",
                       "max-parallel-pulls-positive")
    if cfg.get("serializeImagePulls") is not False and isinstance(parallel, int) and parallel > 1:
        yield _invalid("maxParallelImagePulls", "maxParallelImagePulls cannot be larger than 1 unless "
                       "SerializeImagePulls (--serialize-image-pulls) is set to false", "max-parallel-pulls-serial")
    if cfg.get("containerRuntimeEndpoint") == "":
        yield _invalid("containerRuntimeEndpoint", "the containerRuntimeEndpoint was not specified or empty",
                       "runtime-endpoint-set")
    if cfg.get("enableSystemLogQuery") and not cfg.get("enableSystemLogHandler"):
        yield _invalid("enableSystemLogQuery", "enableSystemLogHandler is required for enableSystemLogQuery",
                       "log-query-needs-handler")
    if "imageMaximumGCAge" in cfg:
        oldest, youngest = _ns(cfg, "imageMaximumGCAge"), _ns(cfg, "imageMinimumGCAge")
        if oldest < 0:
            yield _invalid("imageMaximumGCAge", f"imageMaximumGCAge {cfg['imageMaximumGCAge']} must not be negative",
                           "image-max-age-negative")
        elif 0 < oldest <= youngest:
            yield _invalid("imageMaximumGCAge", f"imageMaximumGCAge {cfg['imageMaximumGCAge']} must be greater "
                           f"than imageMinimumGCAge {cfg.get('imageMinimumGCAge')}", "image-max-age-above-min")
    workers = cfg.get("containerLogMaxWorkers")
    if isinstance(workers, int) and workers < 1:
        yield _invalid("containerLogMaxWorkers", "containerLogMaxWorkers must be greater than or equal to 1",
                       "log-workers-positive")
    if "containerLogMonitorInterval" in cfg and _ns(cfg, "containerLogMonitorInterval") < 3 * _SECOND:
        yield _invalid("containerLogMonitorInterval", "containerLogMonitorInterval must be a positive time "
                       "duration greater than or equal to 3s", "log-monitor-interval-min")
    logs = cfg.get("podLogsDir")
    if isinstance(logs, str):
        yield from _pod_logs_dir(logs)


def _pod_logs_dir(path: str) -> Iterable[Problem]:
    if not path:
        yield _invalid("podLogsDir", "podLogsDir was not specified", "pod-logs-dir-set")
    elif not path.startswith("/"):
        yield _invalid("podLogsDir", f"pod logs path {json.dumps(path)} must be absolute path", "pod-logs-dir-absolute")
    elif posixpath.normpath(path) != path:
        yield _invalid("podLogsDir", f"pod logs path {json.dumps(path)} must be normalized", "pod-logs-dir-clean")


RULES: tuple[Rule, ...] = (
    rule_node_lease,
    rule_cgroups,
    rule_non_negative,
    rule_ports,
    rule_cfs_quota_period,
    rule_image_gc,
    rule_ranges,
    rule_server_tls_bootstrap,
    rule_topology_manager,
    rule_register_with_taints,
    rule_graceful_shutdown,
    rule_memory_swap,
    rule_enforce_node_allocatable,
    rule_hairpin_mode,
    rule_reserved_system_cpus,
    rule_reserved_memory,
    rule_hidden_metrics,
    rule_logging,
    rule_memory_throttling,
    rule_later_fields,
)


def validate_effective(cfg: Mapping[str, Any], gates: Gates) -> tuple[Problem, ...]:
    """Every 1.23 validation problem of a defaulted config under the merged gates."""
    return tuple(p for rule in RULES for p in rule(cfg, gates))
