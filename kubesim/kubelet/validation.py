"""``ValidateKubeletConfiguration`` with the 1.23 rules (reference section 11.1).

Why separate from runtime checks: a validation failure at Bootstrap makes DKC fall back to the
last-known-good config, while a runtime failure (``runtime_checks``) crash-loops the kubelet with
no fallback. Messages follow ``pkg/kubelet/apis/config/validation/validation.go`` and are
aggregated like ``utilerrors.NewAggregate`` (``[a, b]`` when more than one).
"""

from __future__ import annotations

from typing import Any, Callable

from kubesim.kubelet.gates import FeatureGates, GateError
from kubesim.kubelet.kubeletconfig import Config
from kubesim.kubelet.units import UnitError, parse_cpuset, parse_go_duration, parse_quantity

_P = "invalid configuration: "
_SECOND = 10**9


class ValidationError(Exception):
    """The config failed validation; ``str()`` is the aggregated message."""


def _aggregate(errors: list[str]) -> str:
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def validate(cfg: Config, process_gates: FeatureGates, *, kubelet_minor: int = 23) -> FeatureGates:
    """Raise :class:`ValidationError` if invalid; return the merged gates the config runs with."""
    try:
        gates = process_gates.with_overrides(cfg.get("featureGates"))
    except GateError as exc:
        raise ValidationError(str(exc)) from exc
    errors: list[str] = []
    for rule in _RULES if kubelet_minor <= 23 else _MODERN_RULES:
        errors.extend(rule(cfg, gates))
    errors.extend(_show_hidden_metrics(cfg, kubelet_minor))
    if errors:
        raise ValidationError(_aggregate(errors))
    return gates


def _non_negative(cfg: Config, _: FeatureGates) -> list[str]:
    checks = [
        ("eventBurst", "--event-burst"),
        ("eventRecordQPS", "--event-qps"),
        ("kubeAPIBurst", "--kube-api-burst"),
        ("kubeAPIQPS", "--kube-api-qps"),
        ("maxOpenFiles", "--max-open-files"),
        ("maxPods", "--max-pods"),
        ("podsPerCore", "--pods-per-core"),
        ("registryBurst", "--registry-burst"),
        ("registryPullQPS", "--registry-qps"),
    ]
    return [
        f"{_P}{name} ({flag}) {cfg[name]} must not be a negative number"
        for name, flag in checks
        if (cfg.get(name) or 0) < 0
    ]


def _ranges(cfg: Config, _: FeatureGates) -> list[str]:
    errs: list[str] = []
    if cfg["nodeLeaseDurationSeconds"] <= 0:
        errs.append(f"{_P}nodeLeaseDurationSeconds must be greater than 0")
    if cfg["healthzPort"] != 0 and not 1 <= cfg["healthzPort"] <= 65535:
        errs.append(f"{_P}healthzPort (--healthz-port) {cfg['healthzPort']} must be between 1 and 65535, inclusive")
    for name, flag in (
        ("imageGCHighThresholdPercent", "--image-gc-high-threshold"),
        ("imageGCLowThresholdPercent", "--image-gc-low-threshold"),
    ):
        if not 0 <= cfg[name] <= 100:
            errs.append(f"{_P}{name} ({flag}) {cfg[name]} must be between 0 and 100, inclusive")
    if cfg["imageGCLowThresholdPercent"] >= cfg["imageGCHighThresholdPercent"]:
        errs.append(
            f"{_P}imageGCLowThresholdPercent (--image-gc-low-threshold) {cfg['imageGCLowThresholdPercent']} "
            f"must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) "
            f"{cfg['imageGCHighThresholdPercent']}"
        )
    for name, flag in (
        ("iptablesDropBit", "--iptables-drop-bit"),
        ("iptablesMasqueradeBit", "--iptables-masquerade-bit"),
    ):
        if not 0 <= cfg[name] <= 31:
            errs.append(f"{_P}{name} ({flag}) {cfg[name]} must be between 0 and 31, inclusive")
    if cfg["nodeStatusMaxImages"] < -1:
        errs.append(
            f"{_P}nodeStatusMaxImages (--node-status-max-images) {cfg['nodeStatusMaxImages']} must be -1 or greater"
        )
    if not -1000 <= cfg["oomScoreAdj"] <= 1000:
        errs.append(f"{_P}oomScoreAdj (--oom-score-adj) {cfg['oomScoreAdj']} must be between -1000 and 1000, inclusive")
    if not 1 <= cfg["port"] <= 65535:
        errs.append(f"{_P}port (--port) {cfg['port']} must be between 1 and 65535, inclusive")
    if not 0 <= cfg["readOnlyPort"] <= 65535:
        errs.append(f"{_P}readOnlyPort (--read-only-port) {cfg['readOnlyPort']} must be between 0 and 65535, inclusive")
    return errs


def _cgroups(cfg: Config, _: FeatureGates) -> list[str]:
    errs: list[str] = []
    enforce = cfg.get("enforceNodeAllocatable") or []
    if not cfg["cgroupsPerQOS"] and enforce:
        errs.append(
            f"{_P}enforceNodeAllocatable (--enforce-node-allocatable) is not supported unless "
            "cgroupsPerQOS (--cgroups-per-qos) is set to true"
        )
    if cfg.get("systemCgroups") and not cfg.get("cgroupRoot"):
        errs.append(
            f"{_P}systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified"
        )
    for value in enforce:
        if value == "system-reserved" and not cfg.get("systemReservedCgroup"):
            errs.append(
                f"{_P}systemReservedCgroup (--system-reserved-cgroup) must be specified when "
                '"system-reserved" contained in enforceNodeAllocatable (--enforce-node-allocatable)'
            )
        elif value == "kube-reserved" and not cfg.get("kubeReservedCgroup"):
            errs.append(
                f"{_P}kubeReservedCgroup (--kube-reserved-cgroup) must be specified when "
                '"kube-reserved" contained in enforceNodeAllocatable (--enforce-node-allocatable)'
            )
        elif value == "none" and len(enforce) > 1:
            errs.append(
                f"{_P}enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional "
                'enforcements when "none" is specified'
            )
        elif value not in ("pods", "system-reserved", "kube-reserved", "none"):
            errs.append(
                f'{_P}option "{value}" specified for enforceNodeAllocatable (--enforce-node-allocatable). '
                'Valid options are "pods", "system-reserved", "kube-reserved", or "none"'
            )
    return errs


def _cfs_quota(cfg: Config, gates: FeatureGates) -> list[str]:
    period = parse_go_duration(cfg["cpuCFSQuotaPeriod"])
    if period == 100 * 10**6:
        return []
    if not gates.enabled("CustomCPUCFSQuotaPeriod"):
        return [
            f"{_P}cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {cfg['cpuCFSQuotaPeriod']} requires feature gate "
            "CustomCPUCFSQuotaPeriod"
        ]
    if not 1_000 <= period <= _SECOND:
        return [
            f"{_P}cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {cfg['cpuCFSQuotaPeriod']} must be between 1usec "
            "and 1sec, inclusive"
        ]
    return []


def _gated(cfg: Config, gates: FeatureGates) -> list[str]:
    errs: list[str] = []
    if cfg["serverTLSBootstrap"] and not gates.enabled("RotateKubeletServerCertificate"):
        errs.append(
            f"{_P}serverTLSBootstrap {str(cfg['serverTLSBootstrap']).lower()} requires feature gate "
            "RotateKubeletServerCertificate"
        )
    policy, scope = cfg["topologyManagerPolicy"], cfg["topologyManagerScope"]
    policies = ["none", "best-effort", "restricted", "single-numa-node"]
    if policy not in policies:
        errs.append(
            f'{_P}topologyManagerPolicy (--topology-manager-policy) "{policy}" must be one of: '
            f'["none" "best-effort" "restricted" "single-numa-node"]'
        )
    if policy != "none" and not gates.enabled("TopologyManager"):
        errs.append(f"{_P}topologyManagerPolicy {policy} requires feature gate TopologyManager")
    if scope not in ("container", "pod"):
        errs.append(
            f'{_P}topologyManagerScope (--topology-manager-scope) "{scope}" must be one of: "container", or "pod"'
        )
    if scope != "container" and not gates.enabled("TopologyManager"):
        errs.append(f"{_P}topologyManagerScope {scope} requires feature gate TopologyManager")
    if cfg["hairpinMode"] not in ("promiscuous-bridge", "hairpin-veth", "none"):
        errs.append(
            f'{_P}option "{cfg["hairpinMode"]}" specified for hairpinMode (--hairpin-mode). Valid options '
            'are "promiscuous-bridge", "hairpin-veth" or "none"'
        )
    return errs


def _shutdown(cfg: Config, gates: FeatureGates) -> list[str]:
    errs: list[str] = []
    total, crit = (
        parse_go_duration(cfg["shutdownGracePeriod"]),
        parse_go_duration(cfg["shutdownGracePeriodCriticalPods"]),
    )
    if gates.enabled("GracefulNodeShutdown"):
        if total < 0 or crit < 0 or crit > total:
            errs.append(
                f"{_P}shutdownGracePeriod {cfg['shutdownGracePeriod']} must be >= 0, "
                f"shutdownGracePeriodCriticalPods {cfg['shutdownGracePeriodCriticalPods']} must be >= 0, and "
                f"shutdownGracePeriodCriticalPods {cfg['shutdownGracePeriodCriticalPods']} must be <= "
                f"shutdownGracePeriod {cfg['shutdownGracePeriod']}"
            )
        if 0 < total < _SECOND:
            errs.append(
                f"{_P}shutdownGracePeriod {cfg['shutdownGracePeriod']} must be either zero or otherwise >= 1 sec"
            )
        if 0 < crit < _SECOND:
            errs.append(
                f"{_P}shutdownGracePeriodCriticalPods {cfg['shutdownGracePeriodCriticalPods']} must be either "
                "zero or otherwise >= 1 sec"
            )
    elif total > 0 or crit > 0:
        errs.append(
            f"{_P}specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate "
            "GracefulNodeShutdown"
        )
    by_priority = cfg.get("shutdownGracePeriodByPodPriority") or []
    if by_priority and not gates.enabled("GracefulNodeShutdownBasedOnPodPriority"):
        errs.append(
            f"{_P}Specifying shutdownGracePeriodByPodPriority requires feature gate "
            "GracefulNodeShutdownBasedOnPodPriority"
        )
    elif by_priority and (total or crit):
        errs.append(
            f"{_P}Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time"
        )
    return errs


def _reserved(cfg: Config, _: FeatureGates) -> list[str]:
    errs: list[str] = []
    cpus = cfg.get("reservedSystemCPUs") or ""
    if cpus:
        try:
            parse_cpuset(cpus)
        except UnitError as exc:
            errs.append(f"{_P}unable to parse reservedSystemCPUs (--reserved-cpus) {cpus}, error: {exc}")
        if cfg.get("systemReservedCgroup") or cfg.get("kubeReservedCgroup"):
            errs.append(
                f"{_P}can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup "
                "(--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)"
            )
    errs.extend(_reserved_memory(cfg.get("reservedMemory") or []))
    return errs


def _reserved_memory(items: list[dict[str, Any]]) -> list[str]:
    errs: list[str] = []
    seen: set[tuple[int, str]] = set()
    for item in items:
        numa = item.get("numaNode") or 0
        for resource, quantity in (item.get("limits") or {}).items():
            if (numa, resource) in seen:
                errs.append(
                    f'{_P}the reserved memory has a duplicate value for NUMA node {numa} and resource "{resource}"'
                )
            seen.add((numa, resource))
            if resource != "memory" and not resource.startswith("hugepages-"):
                errs.append(
                    f'{_P}the limit type "{resource}" for NUMA node {numa} is not supported, only '
                    "[memory hugepages-<HugePageSize>] is accepted"
                )
            try:
                zero = parse_quantity(str(quantity)) == 0
            except UnitError:
                zero = False
            if zero:
                errs.append(f'{_P}reserved memory may not be zero for NUMA node {numa} and resource "{resource}"')
    return errs


def _memory(cfg: Config, gates: FeatureGates) -> list[str]:
    errs: list[str] = []
    behavior = (cfg.get("memorySwap") or {}).get("swapBehavior") or ""
    if behavior and not gates.enabled("NodeSwap"):
        errs.append(f"{_P}memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled")
    elif behavior not in ("", "LimitedSwap", "UnlimitedSwap"):
        errs.append(f'{_P}memorySwap.swapBehavior {behavior} must be one of: "", "LimitedSwap", or "UnlimitedSwap"')
    factor = cfg.get("memoryThrottlingFactor")
    if gates.enabled("MemoryQoS") and factor is None:
        errs.append(f"{_P}memoryThrottlingFactor is required when MemoryQoS feature flag is enabled")
    if factor is not None and not 0 < factor <= 1.0:
        errs.append(
            f"{_P}memoryThrottlingFactor {_go_float(factor)} must be greater than 0 and less than or equal to 1.0"
        )
    return errs


def _modern_swap(cfg: Config, gates: FeatureGates) -> list[str]:
    """1.30+: ``UnlimitedSwap`` is gone and ``NoSwap`` is the default behaviour."""
    behavior = (cfg.get("memorySwap") or {}).get("swapBehavior") or ""
    if behavior and not gates.enabled("NodeSwap"):
        return [f"{_P}memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled"]
    if behavior not in ("", "NoSwap", "LimitedSwap"):
        return [f'{_P}memorySwap.swapBehavior "{behavior}" must be one of: "", "LimitedSwap" or "NoSwap"']
    return []


def _modern_memory(cfg: Config, gates: FeatureGates) -> list[str]:
    """The 1.23 memory rules with the 1.30+ swap rule instead of the 1.23 one."""
    without_swap = {**cfg, "memorySwap": {}}
    return _modern_swap(cfg, gates) + _memory(without_swap, gates)


def _go_float(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _logging(cfg: Config, _: FeatureGates) -> list[str]:
    fmt = (cfg.get("logging") or {}).get("format") or "text"
    if fmt not in ("text", "json"):
        return [f'logging.format: Invalid value: "{fmt}": Unsupported log format']
    return []


def _show_hidden_metrics(cfg: Config, minor: int) -> list[str]:
    value = cfg.get("showHiddenMetricsForVersion") or ""
    allowed = f"1.{minor - 1}"
    if value and value != allowed:
        return [
            f"--show-hidden-metrics-for-version must be omitted or have the value '{allowed}'. "
            "Only the previous minor version is allowed"
        ]
    return []


def _later_fields(cfg: Config, _: FeatureGates) -> list[str]:
    """ValidateKubeletConfiguration's rules on fields added after 1.23 (1.31 source), each only
    when the config sets the field: kubesim keeps them as written, without their defaults."""
    errs: list[str] = []
    parallel = cfg.get("maxParallelImagePulls")
    if parallel is not None and parallel < 1:
        errs.append(f"{_P}maxParallelImagePulls {parallel} must be a positive number")
    if cfg.get("serializeImagePulls", True) and parallel is not None and parallel > 1:
        errs.append(f"{_P}maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls "
                    "(--serialize-image-pulls) is set to false")
    if cfg.get("containerRuntimeEndpoint") == "":
        errs.append(f"{_P}the containerRuntimeEndpoint was not specified or empty")
    workers = cfg.get("containerLogMaxWorkers")
    if workers is not None and workers < 1:
        errs.append(f"{_P}containerLogMaxWorkers must be greater than or equal to 1")
    interval = cfg.get("containerLogMonitorInterval")
    if interval is not None and parse_go_duration(interval) < 3 * 1_000_000_000:
        errs.append(f"{_P}containerLogMonitorInterval must be a positive time duration greater than or equal to 3s")
    return errs


_RULES: list[Callable[[Config, FeatureGates], list[str]]] = [
    _ranges,
    _cgroups,
    _non_negative,
    _cfs_quota,
    _gated,
    _shutdown,
    _reserved,
    _memory,
    _logging,
]
# 1.24+ kubelets (modern mode): the 1.23 rules, and those on the later fields the since table knows
_MODERN_RULES = [*(_modern_memory if rule is _memory else rule for rule in _RULES), _later_fields]
