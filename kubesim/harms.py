"""The harm catalogue: kubelet config changes that keep a node Ready but hurt its workload, each with
the strength at which it clearly shows against fleet noise, a milder one, and the metric that
shows it from which kubelet version.

Why in code: the tests (tests/kubesim/test_noise_harms.py) step every entry against an unchanged
node with the same noise, a benchmark can draw canaries from it, and docs/kubesim.md's table is
this list in prose. The mechanisms live in ``kubesim.kubelet.workload``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

DEFAULT_EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
              "imagefs.available": "15%"}  # the default evictionHard map, which a partial one replaces whole
SYSTEM_SLICE = ["/", "/kubepods", "/system.slice"]  # cgroups a host needs to enforce system-reserved


@dataclass(frozen=True)
class Harm:
    """One harmful change. ``config`` is the documented strength, ``mild`` a milder one, ``base``
    what the unchanged nodes run (both are relative to it). ``metric``/``labels`` name the series
    that shows it; ``statistic`` says how: the ``increase`` of a counter over the window, a
    histogram's ``p95``, or a gauge's ``mean``; ``direction`` which way is harmful."""

    name: str
    config: dict[str, Any]
    mild: dict[str, Any]
    metric: str
    statistic: Literal["increase", "p95", "mean"]
    direction: Literal["up", "down"]
    since: int = 23  # first kubelet minor serving the metric (in kubesim, as in the kubelet)
    labels: tuple[tuple[str, str], ...] = ()
    base: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)  # pool host facts it needs to run at all
    also: tuple[str, ...] = ()  # other metrics that move


ENFORCE_SYSTEM = {"enforceNodeAllocatable": ["pods", "system-reserved"], "systemReservedCgroup": "/system.slice"}

HARMS: tuple[Harm, ...] = (
    Harm("eviction-hard", {"evictionHard": {**DEFAULT_EVICTION_HARD, "memory.available": "12Gi"}},
         {"evictionHard": {**DEFAULT_EVICTION_HARD, "memory.available": "8Gi"}},
         "kubelet_evictions", "increase", "up", labels=(("eviction_signal", "memory.available"),),
         also=("kube_pod_container_status_restarts_total", "kubelet_running_pods")),
    Harm("eviction-soft", {"evictionSoft": {"memory.available": "12Gi"},
                           "evictionSoftGracePeriod": {"memory.available": "30s"}},
         {"evictionSoft": {"memory.available": "12Gi"}, "evictionSoftGracePeriod": {"memory.available": "2m"}},
         "kubelet_evictions", "increase", "up", labels=(("eviction_signal", "memory.available"),),
         also=("kubelet_running_pods",)),
    Harm("reserved-memory", {"kubeReserved": {"memory": "11Gi"}, "systemReserved": {"memory": "3.5Gi"}},
         {"kubeReserved": {"memory": "10Gi"}, "systemReserved": {"memory": "3.5Gi"}},
         "kubelet_running_pods", "mean", "down",
         also=("kube_node_status_allocatable", "kubelet_admission_rejections_total")),
    Harm("max-pods", {"maxPods": 6}, {"maxPods": 9}, "kubelet_running_pods", "mean", "down",
         also=("kube_node_status_allocatable", "kubelet_admission_rejections_total")),
    Harm("pods-per-core", {"podsPerCore": 1}, {"podsPerCore": 2}, "kubelet_running_pods", "mean", "down",
         also=("kube_node_status_allocatable", "kubelet_admission_rejections_total")),
    Harm("pull-qps", {"registryPullQPS": 1, "registryBurst": 1}, {"registryPullQPS": 1, "registryBurst": 2},
         "kubelet_pod_start_duration_seconds", "p95", "up", base={"serializeImagePulls": False},
         also=("kube_pod_container_status_waiting_reason",)),
    Harm("serialized-pulls", {"serializeImagePulls": True}, {"serializeImagePulls": False, "maxParallelImagePulls": 2},
         "kubelet_pod_start_duration_seconds", "p95", "up", base={"serializeImagePulls": False}),
    Harm("max-parallel-pulls", {"serializeImagePulls": False, "maxParallelImagePulls": 1},
         {"serializeImagePulls": False, "maxParallelImagePulls": 2},
         "kubelet_pod_start_duration_seconds", "p95", "up", since=27, base={"serializeImagePulls": False}),
    Harm("image-gc", {"imageGCHighThresholdPercent": 10, "imageGCLowThresholdPercent": 5},
         {"imageGCHighThresholdPercent": 40, "imageGCLowThresholdPercent": 35},
         "kubelet_runtime_operations_total", "increase", "up", labels=(("operation_type", "remove_image"),),
         also=("kubelet_image_garbage_collected_total", "kubelet_runtime_operations_duration_seconds",
               "kubelet_pod_start_duration_seconds")),
    # A pool that already enforces system-reserved on the runtime's slice (systemReservedCgroup is a
    # reboot-class field: no rollout changes it), where a change lowers the slice's CPU.
    Harm("runtime-cpu-starved", {"systemReserved": {"cpu": "50m"}}, {"systemReserved": {"cpu": "150m"}},
         "kubelet_pleg_relist_duration_seconds", "p95", "up", host={"cgroups": SYSTEM_SLICE},
         base={**ENFORCE_SYSTEM, "systemReserved": {"cpu": "1"}},
         also=("kubelet_runtime_operations_duration_seconds",)),
    Harm("log-rotation", {"containerLogMaxSize": "1Mi"}, {"containerLogMaxSize": "4Mi"},
         "kubelet_runtime_operations_total", "increase", "up", labels=(("operation_type", "reopen_container_log"),),
         also=("kubelet_pleg_relist_duration_seconds",)),
)


def harm(name: str) -> Harm:
    """The catalogue entry called ``name``."""
    for entry in HARMS:
        if entry.name == name:
            return entry
    raise KeyError(f"no harm {name!r} (known: {', '.join(h.name for h in HARMS)})")
