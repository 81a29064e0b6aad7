"""A kubelet process's ``/metrics``: the real metric names and labels of its version.

Served through the API server's node proxy (``/api/v1/nodes/NODE/proxy/metrics``), the way many
clusters scrape kubelets. Names from ``pkg/kubelet/metrics`` (v1.23 and v1.30+):

* both: ``kubelet_running_pods``, ``kubelet_running_containers{container_state}``,
  ``kubelet_evictions{eviction_signal}``, ``kubelet_pod_start_duration_seconds``,
  ``kubelet_pleg_relist_duration_seconds``, ``kubelet_pleg_relist_interval_seconds``,
  ``kubelet_pleg_last_seen_seconds``, ``kubelet_runtime_operations_total{operation_type}`` and
  ``kubelet_runtime_operations_duration_seconds{operation_type}`` (the instrumented runtime
  service's ``pull_image``, ``start_container``, ``remove_image``, ``reopen_container_log``);
* every version: ``process_start_time_seconds`` (the process collector of component-base);
* 1.23 (DKC): ``kubelet_node_config_{assigned,active,last_known_good}`` (value 1, one label set
  at a time: ``node_config_source``, ``node_config_uid``, ``node_config_resource_version``,
  ``node_config_kubelet_key``) and ``kubelet_node_config_error``, updated by each status push;
* 1.27+: ``kubelet_pod_start_sli_duration_seconds``, ``kubelet_node_startup_duration_seconds``;
* 1.30+: ``kubelet_image_garbage_collected_total{reason}`` (1.29 had it without ``reason``; not
  served there);
* 1.32+: ``kubelet_admission_rejections_total{reason}`` (new in the v1.32 changelog);
* kube-state-metrics' series, served here beside the kubelet's (kubesim runs no
  kube-state-metrics; the scrape's ``node`` target label stands for the ``node`` label KSM sets):
  ``kube_pod_container_status_restarts_total{namespace,pod,container,uid}`` (container restarts),
  ``kube_pod_container_resource_requests{namespace,pod,container,uid,resource="memory",unit="byte"}``
  and ``kube_pod_status_phase{namespace,pod,uid,phase="Running"}`` (kubesim's pods all run; KSM
  also writes the other four phases at 0) for each pod,
  ``kube_pod_container_status_waiting_reason{namespace,pod,container,uid,reason="ImagePullBackOff"}``
  for each pod starting whose last image pull failed (refused by ``registryPullQPS`` or by the
  registry), ``kube_pod_info{namespace,pod,uid}`` for each pod bound to the node (KSM's puts the node in
  ``node``: queries join on it for the node of a pod's series), and
  ``kube_node_status_allocatable{resource,unit}`` (pods, memory in bytes, cpu in cores: the Node's
  ``status.allocatable``). They follow the pods and the node, not the kubelet process, so they
  survive restarts.

A registry lives as long as its process: counters and histograms start again at zero after a
kubelet restart, as on a real node (``rate``/``increase`` handle the reset).
"""

from __future__ import annotations

import time
from typing import Any, Optional

from kubesim.kubelet.exposition import DEF_BUCKETS, Registry, Sample, SeriesKey
from kubesim.kubelet.workload import Step, Workload

# 1.27+ pod start buckets (pkg/kubelet/metrics: PodStartDuration)
MODERN_POD_START_BUCKETS = (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900,
                            1200, 1800, 2700, 3600)
# RuntimeOperationsDuration: metrics.ExponentialBuckets(.005, 2.5, 14), as in the current source
RUNTIME_OPERATION_BUCKETS = tuple(0.005 * 2.5**i for i in range(14))
NODE_CONFIG_LABELS = ("node_config_source", "node_config_uid", "node_config_resource_version",
                      "node_config_kubelet_key")


def _source_labels(source: Optional[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """``configLabels``: the ConfigMap's path, uid, resourceVersion and key; ``local`` when none."""
    cm = (source or {}).get("configMap") or {}
    if not cm:
        values = ("local", "", "", "")
    else:
        path = f"/api/v1/namespaces/{cm.get('namespace', '')}/configmaps/{cm.get('name', '')}"
        values = (path, str(cm.get("uid", "")), str(cm.get("resourceVersion", "")), str(cm.get("kubeletConfigKey", "")))
    return tuple(zip(NODE_CONFIG_LABELS, values))


class KubeletMetrics:
    """The metric families of one kubelet process of version ``1.minor``."""

    def __init__(self, minor: int, *, dkc: bool, started_at: Optional[float] = None) -> None:
        """``started_at``: the process's start, Unix seconds (the wall clock unless given)."""
        self.minor = minor
        self.registry = r = Registry()
        self.dkc = dkc
        # the process collector every Kubernetes component registers (component-base/metrics): a
        # query tells a counter that started again with the process from one that went on
        r.add("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.").set(
            time.time() if started_at is None else started_at)
        if dkc:
            self.assigned = r.add("kubelet_node_config_assigned", "gauge",
                                  "The node's understanding of intended config. The count is always 1.")
            self.active = r.add("kubelet_node_config_active", "gauge",
                                "The config source the node is actively using. The count is always 1.")
            self.last_known_good = r.add("kubelet_node_config_last_known_good", "gauge",
                                         "The config source the node will fall back to when it encounters certain "
                                         "errors. The count is always 1.")
            self.error = r.add("kubelet_node_config_error", "gauge",
                               "This metric is true (1) if the node is experiencing a configuration-related error, "
                               "false (0) otherwise.")
        self.running_pods = r.add("kubelet_running_pods", "gauge",
                                  "Number of pods that have a running pod sandbox")
        self.running_containers = r.add("kubelet_running_containers", "gauge",
                                        "Number of containers currently running")
        self.evictions = r.add("kubelet_evictions", "counter",
                               "Cumulative number of pod evictions by eviction signal")
        buckets = MODERN_POD_START_BUCKETS if minor >= 27 else DEF_BUCKETS
        self.pod_start = r.add("kubelet_pod_start_duration_seconds", "histogram",
                               "Duration in seconds from kubelet seeing a pod for the first time to the pod starting "
                               "to run", buckets)
        self.pod_start_sli = (r.add("kubelet_pod_start_sli_duration_seconds", "histogram",
                                    "Duration in seconds to start a pod, excluding time to pull images and run init "
                                    "containers, measured from pod creation timestamp to when all its containers are "
                                    "reported as started and observed via watch", MODERN_POD_START_BUCKETS)
                              if minor >= 27 else None)
        self.relist = r.add("kubelet_pleg_relist_duration_seconds", "histogram",
                            "Duration in seconds for relisting pods in PLEG.", DEF_BUCKETS)
        self.relist_interval = r.add("kubelet_pleg_relist_interval_seconds", "histogram",
                                     "Interval in seconds between relisting in PLEG.", DEF_BUCKETS)
        self.last_seen = r.add("kubelet_pleg_last_seen_seconds", "gauge",
                               "Timestamp in seconds when PLEG was last seen active.")
        self.operations = r.add("kubelet_runtime_operations_total", "counter",
                                "Cumulative number of runtime operations by operation type.")
        self.operations_duration = r.add("kubelet_runtime_operations_duration_seconds", "histogram",
                                         "Duration in seconds of runtime operations. Broken down by operation type.",
                                         RUNTIME_OPERATION_BUCKETS)
        self.images_collected = (r.add("kubelet_image_garbage_collected_total", "counter",
                                       "Total number of images garbage collected by the kubelet, whether through "
                                       "disk usage or image age.")
                                 if minor >= 30 else None)
        self.startup = (r.add("kubelet_node_startup_duration_seconds", "gauge",
                              "Duration in seconds of node startup in total.") if minor >= 27 else None)
        self.admission_rejections = (r.add("kubelet_admission_rejections_total", "counter",
                                           "Cumulative number pod admission rejections by the Kubelet.")
                                     if minor >= 32 else None)
        self.restarts = r.add("kube_pod_container_status_restarts_total", "counter",
                              "The number of container restarts per container.")
        self.requests = r.add("kube_pod_container_resource_requests", "gauge",
                              "The number of requested request resource by a container.")
        self.phase = r.add("kube_pod_status_phase", "gauge", "The pods current phase.")
        self.info = r.add("kube_pod_info", "gauge", "Information about pod.")
        self.waiting = r.add("kube_pod_container_status_waiting_reason", "gauge",
                             "Describes the reason the container is currently in waiting state.")
        self.allocatable = r.add("kube_node_status_allocatable", "gauge",
                                 "The allocatable for different resources of a node that are available for scheduling.")
        # A labelled counter (kubelet_evictions, kubelet_image_garbage_collected_total) is created at
        # its first increment, as client_golang's vectors are: a healthy node serves no series at all.

    def started(self, seconds: float) -> None:
        if self.startup is not None:
            self.startup.set(seconds)

    def config_status(self, status: dict[str, Any]) -> None:
        """The status push's ``metrics.Set*Config`` calls (1.23): one label set per gauge."""
        if not self.dkc:
            return
        self.assigned.only(1, _source_labels(status.get("assigned")))
        self.active.only(1, _source_labels(status.get("active")))
        self.last_known_good.only(1, _source_labels(status.get("lastKnownGood")))
        self.error.set(1 if status.get("error") else 0)

    def observe(self, step: Step, relist_interval: Optional[float] = None, now: Optional[float] = None) -> None:
        """Record one workload step. ``now``: the Unix time for ``kubelet_pleg_last_seen_seconds``
        (the wall clock unless given)."""
        for latency in step.pod_starts:
            self.pod_start.observe(latency)
        if self.pod_start_sli is not None:  # the SLI leaves the image pulls out
            for latency in step.sli_starts:
                self.pod_start_sli.observe(latency)
        if step.evicted:
            self.evictions.inc(step.evicted, (("eviction_signal", "memory.available"),))
        ops, durations = self.operations, self.operations_duration
        if step.pulls:
            ops.inc(step.pulls, _PULL)
            for seconds in step.pull_seconds:
                durations.observe(seconds, _PULL)
        if step.container_seconds:
            ops.inc(len(step.container_seconds), _START)
            for seconds in step.container_seconds:
                durations.observe(seconds, _START)
        if step.images_collected:
            ops.inc(step.images_collected, _REMOVE)
            for _ in range(step.images_collected):
                durations.observe(step.remove_image_seconds, _REMOVE)
            if self.images_collected is not None:
                self.images_collected.inc(step.images_collected, (("reason", "space"),))
        if step.rotations:
            ops.inc(step.rotations, _REOPEN)
            for _ in range(min(step.rotations, 100)):
                durations.observe(step.rotation_seconds, _REOPEN)
        if step.rejected and self.admission_rejections is not None:
            for reason, count in step.rejected.items():
                self.admission_rejections.inc(count, (("reason", reason),))
        self.relist.observe(step.relist_seconds)
        self.relist_interval.observe(step.relist_interval if relist_interval is None else relist_interval)
        self.last_seen.set(time.time() if now is None else now)

    def refresh(self, workload: Workload) -> None:
        """Set the gauges read from the workload now (a scrape does this first)."""
        self.running_pods.set(workload.running)
        self.running_containers.set(workload.running, (("container_state", "running"),))
        self.restarts.values = {_container(pod.name): float(pod.restarts) for pod in workload.pods}
        request = workload.pod_request
        self.requests.values = {(*_container(pod.name), *_MEMORY_BYTES): request for pod in workload.pods}
        self.phase.values = {(("namespace", "default"), ("phase", "Running"), ("pod", pod.name), ("uid", pod.name)): 1.0
                             for pod in workload.pods}
        self.info.values = {(("namespace", "default"), ("pod", pod.name), ("uid", pod.name)): 1.0
                            for pod in workload.bound()}
        self.waiting.values = {(*_container(pod.name), ("reason", "ImagePullBackOff")): 1.0
                               for pod in workload.backing_off()}
        self.allocatable.values = {((("resource", resource), ("unit", _UNITS[resource]))): value
                                   for resource, value in workload.allocatable().items()}

    def text(self, workload: Workload) -> str:
        """The exposition, with the gauges read from the workload now."""
        self.refresh(workload)
        return self.registry.text()

    def snapshot(self, workload: Workload) -> dict[SeriesKey, Sample]:
        """Every series now, as ``{(name, labels): float | HistogramSnapshot}`` (no text format)."""
        self.refresh(workload)
        return self.registry.snapshot()


_UNITS = {"pods": "integer", "memory": "byte", "cpu": "core"}  # kube-state-metrics' unit label
_MEMORY_BYTES = (("resource", "memory"), ("unit", "byte"))


def _container(pod: str) -> tuple[tuple[str, str], ...]:
    """kube-state-metrics' labels of a pod's one container (kubesim's pods run one, ``app``)."""
    return (("container", "app"), ("namespace", "default"), ("pod", pod), ("uid", pod))


_PULL = (("operation_type", "pull_image"),)
_START = (("operation_type", "start_container"),)
_REMOVE = (("operation_type", "remove_image"),)
_REOPEN = (("operation_type", "reopen_container_log"),)
