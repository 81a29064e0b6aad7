"""The pods of one simulated node and what the running kubelet config does to them.

Why: most harmful kubelet changes keep the node Ready. An ``evictionHard`` threshold above what a
host has free evicts pods all day; a low ``registryPullQPS`` (or serialized pulls) slows every pod
start; low image GC thresholds delete images that are then pulled again; a larger
``kubeReserved``/``systemReserved`` shrinks allocatable until pods no longer fit. A canary that
can see these needs a workload to suffer them and metrics to show it (``kubesim.kubelet.metrics``).

The pods are not API objects: a :class:`Workload` belongs to the node, lives across kubelet
restarts (containers keep running when the kubelet restarts) and advances one step of
``workload_period`` simulated seconds at a time, with the config the kubelet process runs. All
durations it reports are simulated seconds. Randomness is seeded by the node's name, so a node
behaves the same in every run.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from kubesim.clusterfile import NodeSpec
from kubesim.kubelet.kubeletconfig import Config
from kubesim.kubelet.units import UnitError, parse_quantity
from kubesim.timing import parse_duration

CONTAINER_START_S = 0.4  # create + start of a container once its image is there


def _bytes(text: str) -> float:
    try:
        return float(parse_quantity(text))
    except UnitError:
        return 0.0


def _threshold(value: object, total: float) -> float:
    """An eviction threshold (``12Gi`` or ``20%``) in bytes; 0 when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return 0.0
    if value.endswith("%"):
        try:
            return total * float(value[:-1]) / 100
        except ValueError:
            return 0.0
    return _bytes(value)


def _reserved(cfg: Config, resource: str) -> float:
    return sum(_bytes(str((cfg.get(f) or {}).get(resource, "0"))) for f in ("kubeReserved", "systemReserved"))


@dataclass
class Step:
    """What happened during one step: the kubelet's metrics observe it."""

    pod_starts: list[float] = field(default_factory=list)  # start latency of each pod started
    evicted: int = 0
    restarts: list[str] = field(default_factory=list)  # pods whose container the OOM killer restarted
    images_collected: int = 0
    pulls: int = 0
    relist_seconds: float = 0.0


@dataclass
class Pod:
    name: str
    image: int
    restarts: int = 0


class Workload:
    """One node's pods, images and memory; :meth:`step` advances them under a config."""

    def __init__(self, spec: NodeSpec) -> None:
        self.spec = spec
        facts, host = spec.workload, spec.host
        self.rng = random.Random(spec.name)
        self.memory_total = _bytes(spec.capacity.get("memory", "16Gi"))
        self.system_memory = _bytes(host.system_memory)
        self.pod_memory = _bytes(facts.pod_memory)
        self.pod_request = _bytes(facts.pod_request)
        self.image_size = _bytes(facts.image_size)
        self.image_disk = _bytes(host.image_disk)
        self.other_images = int(_bytes(host.image_disk_used) // max(self.image_size, 1.0))
        self.pull_latency = parse_duration(host.pull_latency)
        self.pull_seconds = self.image_size / max(_bytes(host.pull_bandwidth), 1.0)
        self.cached: set[int] = set(range(facts.images))  # a node that has run its pods before
        # a node that was running its pods before kubesim started: no start-up burst of pulls
        self.pods = [Pod(f"{spec.name}-pod-{i}", i % facts.images) for i in range(1, facts.pods + 1)]
        self._serial = facts.pods
        self._starts_owed = 0.0
        self._tokens = 0.0
        self.memory_pressure = False
        self._pressure_cleared_at = 0.0  # simulated seconds: when free memory was last short
        self.clock = 0.0  # simulated seconds since the node booted
        self.pending = 0

    # -- facts the metrics and the node status read ----------------------------------------

    @property
    def running(self) -> int:
        return len(self.pods)

    @property
    def free_memory(self) -> float:
        return self.memory_total - self.system_memory - self.pod_memory * len(self.pods)

    def image_usage_percent(self) -> float:
        used = (self.other_images + len(self.cached)) * self.image_size
        return 100.0 * used / max(self.image_disk, 1.0)

    # -- one step --------------------------------------------------------------------------

    def step(self, cfg: Config, seconds: float) -> Step:
        """Advance ``seconds`` of simulated time under ``cfg`` (the running kubelet's config)."""
        self.clock += seconds
        out = Step(relist_seconds=0.002 + 0.0004 * len(self.pods) + self.rng.random() * 0.003)
        self._refill_tokens(cfg, seconds)
        self._evict(cfg, out)
        self._collect_images(cfg, out)
        self._replace_pods(seconds, out)
        self._schedule(cfg, out)
        return out

    def _fits(self, cfg: Config) -> int:
        """How many pods the scheduler places here: allocatable memory by request, and maxPods."""
        hard = _threshold((cfg.get("evictionHard") or {}).get("memory.available"), self.memory_total)
        allocatable = self.memory_total - _reserved(cfg, "memory") - hard
        by_memory = int(max(allocatable, 0.0) // max(self.pod_request, 1.0))
        return min(by_memory, int(cfg.get("maxPods") or 110))

    def _evict(self, cfg: Config, out: Step) -> None:
        """The eviction manager: below the hard threshold, evict until above it (MemoryPressure)."""
        threshold = _threshold((cfg.get("evictionHard") or {}).get("memory.available"), self.memory_total)
        short = threshold - self.free_memory
        if short > 0 and self.pods:
            count = min(len(self.pods), max(1, math.ceil(short / max(self.pod_memory, 1.0))))
            for _ in range(count):
                self.pods.pop(self.rng.randrange(len(self.pods)))
            out.evicted = count
            if self.pods:  # the OOM killer gets there first for some containers
                victim = self.pods[self.rng.randrange(len(self.pods))]
                victim.restarts += 1
                out.restarts.append(victim.name)
        if short > 0:
            self.memory_pressure = True
            self._pressure_cleared_at = self.clock
        elif self.memory_pressure:
            transition = parse_duration(str(cfg.get("evictionPressureTransitionPeriod") or "5m0s"))
            if self.clock - self._pressure_cleared_at >= transition:
                self.memory_pressure = False

    def _collect_images(self, cfg: Config, out: Step) -> None:
        """Image GC: above the high threshold, delete unused images down to the low one."""
        high = float(cfg.get("imageGCHighThresholdPercent") or 85)
        low = float(cfg.get("imageGCLowThresholdPercent") or 80)
        if self.image_usage_percent() <= high:
            return
        in_use = {p.image for p in self.pods}
        while self.image_usage_percent() > low:
            if self.other_images > 0:
                self.other_images -= 1
            else:
                unused = sorted(self.cached - in_use)
                if not unused:
                    break  # everything left is in use ("wanted to free ..., but freed ...")
                self.cached.discard(unused[0])
            out.images_collected += 1

    def _replace_pods(self, seconds: float, out: Step) -> None:
        """Pods replaced elsewhere in the cluster (rolling updates, finished jobs) start again here."""
        self._starts_owed += self.spec.workload.starts_per_minute * seconds / 60.0
        replaced = min(int(self._starts_owed), len(self.pods))
        self._starts_owed -= int(self._starts_owed)
        for _ in range(replaced):
            self.pods.pop(self.rng.randrange(len(self.pods)))

    def _schedule(self, cfg: Config, out: Step) -> None:
        """Start the pods that fit (none while the node reports MemoryPressure: it is tainted)."""
        wanted = min(self.spec.workload.pods, self._fits(cfg))
        self.pending = self.spec.workload.pods - wanted
        if self.memory_pressure:
            self.pending = self.spec.workload.pods - len(self.pods)
            return
        starting = max(0, wanted - len(self.pods))
        out.pod_starts = self._pull_and_start(cfg, starting)
        out.pulls = starting
        self.pending = self.spec.workload.pods - len(self.pods)

    def _refill_tokens(self, cfg: Config, seconds: float) -> None:
        qps, burst = float(cfg.get("registryPullQPS") or 0), int(cfg.get("registryBurst") or 10)
        self._tokens = min(float(burst), self._tokens + qps * seconds) if qps > 0 else float(burst)

    def _pull_and_start(self, cfg: Config, count: int) -> list[float]:
        """Start ``count`` pods now: each pulls its image within ``registryPullQPS``/``registryBurst``,
        one after the other when ``serializeImagePulls``; returns each pod's start latency."""
        qps = float(cfg.get("registryPullQPS") or 0)
        serial = cfg.get("serializeImagePulls", True) is not False
        registry_free, latencies = 0.0, []
        images = self.spec.workload.images
        for _ in range(count):
            image = self.rng.randrange(images)
            wait = 0.0
            if qps > 0:  # the rate limiter's Accept() blocks until a token comes: a deficit is a wait
                self._tokens -= 1
                wait = max(0.0, -self._tokens / qps)
            start = max(wait, registry_free) if serial else wait
            duration = self.pull_latency + (0.0 if image in self.cached else self.pull_seconds)
            if serial:
                registry_free = start + duration
            self.cached.add(image)
            latencies.append(start + duration + CONTAINER_START_S)
            self._serial += 1
            self.pods.append(Pod(f"{self.spec.name}-pod-{self._serial}", image))
        return latencies
