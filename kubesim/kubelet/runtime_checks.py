"""Host runtime checks: what makes a *valid* config fail once the kubelet starts running it.

Why: DKC only rolls back load/validation failures at Bootstrap. Everything checked here happens
later in the real kubelet (``run()``, ``NewMainKubelet``, ``ContainerManager.Start``), so a failing
config crash-loops the node with no rollback and no promotion (reference sections 6.8, 11.2 and
the ``runtime:`` entries of the field reference). Each check returns the fatal log line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

from kubesim.clusterfile import HostFacts
from kubesim.kubelet.kubeletconfig import Config
from kubesim.kubelet.units import UnitError, parse_cpuset, parse_go_duration, parse_quantity

TLS_CIPHERS = frozenset(
    """
TLS_RSA_WITH_AES_128_CBC_SHA TLS_RSA_WITH_AES_256_CBC_SHA TLS_RSA_WITH_AES_128_GCM_SHA256
TLS_RSA_WITH_AES_256_GCM_SHA384 TLS_AES_128_GCM_SHA256 TLS_AES_256_GCM_SHA384 TLS_CHACHA20_POLY1305_SHA256
TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA
TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305 TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305
TLS_RSA_WITH_RC4_128_SHA TLS_RSA_WITH_3DES_EDE_CBC_SHA TLS_RSA_WITH_AES_128_CBC_SHA256
TLS_ECDHE_ECDSA_WITH_RC4_128_SHA TLS_ECDHE_RSA_WITH_RC4_128_SHA TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA
TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256 TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256
""".split()
)
TLS_VERSIONS = frozenset({"VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"})
EVICTION_SIGNALS = frozenset(
    {
        "memory.available",
        "allocatableMemory.available",
        "nodefs.available",
        "nodefs.inodesFree",
        "imagefs.available",
        "imagefs.inodesFree",
        "pid.available",
    }
)
RESERVABLE = frozenset({"cpu", "memory", "ephemeral-storage", "pid"})
CPU_STATE_FILE = "cpu_manager_state"  # /var/lib/kubelet/cpu_manager_state on a real node
MEMORY_STATE_FILE = "memory_manager_state"


def _tls(cfg: Config, host: HostFacts, node_dir: Path) -> Optional[str]:
    for name in cfg.get("tlsCipherSuites") or []:
        if name not in TLS_CIPHERS:
            return f"Cipher suite {name} not supported or doesn't exist"
    version = cfg.get("tlsMinVersion") or ""
    if version and version not in TLS_VERSIONS:
        return f'unknown tls version "{version}"'
    return None


def _reserved(cfg: Config, host: HostFacts, node_dir: Path) -> Optional[str]:
    for field in ("kubeReserved", "systemReserved"):
        for resource, value in (cfg.get(field) or {}).items():
            if resource not in RESERVABLE:
                return f'failed to run Kubelet: cannot reserve "{resource}" resource'
            try:
                quantity = parse_quantity(value)
            except UnitError as exc:
                return f"failed to run Kubelet: {exc}"
            if quantity < 0:
                return f'failed to run Kubelet: resource quantity for "{resource}" cannot be negative: {value}'
    return None


def _swap(cfg: Config, host: HostFacts, node_dir: Path) -> Optional[str]:
    if host.swap and cfg.get("failSwapOn", True):
        return (
            "failed to run Kubelet: running with swap on is not supported, please disable swap! or set "
            "--fail-swap-on flag to false. /proc/swaps contained: [Filename\t\t\t\tType\t\tSize\tUsed\tPriority "
            "/dev/dm-1                               partition\t4194300\t0\t-2]"
        )
    return None


def _eviction(cfg: Config, host: HostFacts, node_dir: Path) -> Optional[str]:
    soft_grace = cfg.get("evictionSoftGracePeriod") or {}
    for field in ("evictionHard", "evictionSoft"):
        for signal, value in (cfg.get(field) or {}).items():
            problem = _threshold_problem(signal, value)
            if problem:
                return f"failed to run Kubelet: {problem}"
            if field == "evictionSoft" and signal not in soft_grace:
                return f"failed to run Kubelet: threshold for {signal} requires a grace period"
    for signal, value in soft_grace.items():
        if signal not in EVICTION_SIGNALS:
            return f"failed to run Kubelet: unsupported eviction signal {signal}"
        try:
            parse_go_duration(value)
        except UnitError as exc:
            return f"failed to run Kubelet: {exc}"
    for signal, value in (cfg.get("evictionMinimumReclaim") or {}).items():
        problem = _threshold_problem(signal, value)
        if problem:
            return f"failed to run Kubelet: {problem}"
    return None


def _threshold_problem(signal: str, value: str) -> Optional[str]:
    if signal not in EVICTION_SIGNALS:
        return f"unsupported eviction signal {signal}"
    if value.endswith("%"):
        try:
            percent = float(value[:-1])
        except ValueError:
            return f'strconv.ParseFloat: parsing "{value[:-1]}": invalid syntax'
        if percent < 0:
            return f"eviction percentage threshold {signal} must be positive: {value}"
        if percent > 100:
            return f"eviction percentage threshold {signal} must not exceed 100%: {value}"
        return None
    try:
        quantity = parse_quantity(value)
    except UnitError as exc:
        return str(exc)
    if quantity <= 0:
        return f"eviction threshold {signal} must be positive: {value}"
    return None


def _cpu_manager(cfg: Config, host: HostFacts, node_dir: Path) -> Optional[str]:
    policy = cfg.get("cpuManagerPolicy") or "none"
    if policy not in ("none", "static"):
        return f'failed to run Kubelet: failed to initialize cpu manager: unknown policy: "{policy}"'
    if policy == "static" and not _reserved_cpu(cfg):
        return "failed to run Kubelet: [cpumanager] unable to determine reserved CPU resources for static policy"
    return _state_file_conflict(node_dir / CPU_STATE_FILE, policy, "cpu")


def _reserved_cpu(cfg: Config) -> bool:
    if cfg.get("reservedSystemCPUs"):
        return bool(parse_cpuset(cfg["reservedSystemCPUs"]))
    total = sum(parse_quantity((cfg.get(f) or {}).get("cpu", "0")) for f in ("kubeReserved", "systemReserved"))
    return total > 0


def _memory_manager(cfg: Config, host: HostFacts, node_dir: Path) -> Optional[str]:
    policy = cfg.get("memoryManagerPolicy") or "None"
    if policy not in ("None", "Static"):
        return f'failed to run Kubelet: failed to initialize memory manager: unknown policy: "{policy}"'
    return _state_file_conflict(node_dir / MEMORY_STATE_FILE, policy, "memory")


def _state_file_conflict(path: Path, policy: str, kind: str) -> Optional[str]:
    """A policy change without deleting the manager's checkpoint file fails the start."""
    try:
        recorded = json.loads(path.read_text()).get("policyName")
    except (OSError, ValueError):
        return None
    if recorded and recorded != policy:
        return (
            f"failed to run Kubelet: could not initialize checkpoint manager: could not restore state from "
            f'checkpoint: configured policy "{policy}" differs from state checkpoint policy "{recorded}", please '
            f"drain this node and delete the {kind.upper() if kind == 'cpu' else 'memory'} manager checkpoint "
            f'file "/var/lib/kubelet/{path.name}" before restarting Kubelet'
        )
    return None


def _cgroup_driver(cfg: Config, host: HostFacts, node_dir: Path) -> Optional[str]:
    driver = cfg.get("cgroupDriver") or "cgroupfs"
    if driver != host.cgroup_driver:
        runtime = "docker" if host.container_runtime.startswith("docker") else "container runtime"
        return (
            f'failed to run Kubelet: misconfiguration: kubelet cgroup driver: "{driver}" is different from '
            f'{runtime} cgroup driver: "{host.cgroup_driver}"'
        )
    return None


def _cgroup_name(path: str, driver: str) -> str:
    """``CgroupName`` as Go's %q renders it: systemd ``/system.slice`` -> ``["system"]``."""
    base = path.strip("/").split("/")[-1] if path.strip("/") else ""
    if driver == "systemd" and base.endswith(".slice"):
        parts = base[: -len(".slice")].split("-")
        return "[" + " ".join(f'"{p}"' for p in parts if p) + "]"
    parts = [p for p in path.split("/") if p]
    return "[" + " ".join(f'"{p}"' for p in parts) + "]"


def _enforce_allocatable(cfg: Config, host: HostFacts, node_dir: Path) -> Optional[str]:
    enforce = cfg.get("enforceNodeAllocatable") or []
    driver = cfg.get("cgroupDriver") or "cgroupfs"
    for key, field, label in (
        ("system-reserved", "systemReservedCgroup", "System"),
        ("kube-reserved", "kubeReservedCgroup", "Kube"),
    ):
        cgroup = cfg.get(field) or ""
        if key in enforce and cgroup not in host.cgroups:
            return (
                f"Failed to start ContainerManager Failed to enforce {label} Reserved Cgroup Limits on "
                f'"{cgroup}": {_cgroup_name(cgroup, driver)} cgroup does not exist'
            )
    return None


# Order of the real start-up path: TLS options and reserved resources in run(), swap and the
# managers in NewContainerManager, the runtime's cgroup driver, eviction in NewMainKubelet, and
# node-allocatable enforcement when the ContainerManager starts.
CHECKS: list[Callable[[Config, HostFacts, Path], Optional[str]]] = [
    _tls,
    _reserved,
    _swap,
    _cpu_manager,
    _memory_manager,
    _cgroup_driver,
    _eviction,
    _enforce_allocatable,
]


def runtime_failure(cfg: Config, host: HostFacts, node_dir: Path) -> Optional[str]:
    """The fatal error a real kubelet would exit with on this host, or None if it can run."""
    for check in CHECKS:
        problem = check(cfg, host, node_dir)
        if problem:
            return problem
    return None


def record_manager_state(cfg: Config, node_dir: Path) -> None:
    """Write the CPU/memory manager checkpoints a running kubelet leaves behind."""
    for name, policy in (
        (CPU_STATE_FILE, cfg.get("cpuManagerPolicy") or "none"),
        (MEMORY_STATE_FILE, cfg.get("memoryManagerPolicy") or "None"),
    ):
        body: dict[str, Any] = {"policyName": policy, "checksum": 0}
        try:
            (node_dir / name).write_text(json.dumps(body))
        except OSError:
            pass
