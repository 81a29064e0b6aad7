"""The pods of one simulated node and what the running kubelet config does to them.

Why: most harmful kubelet changes keep the node Ready. An eviction threshold above what a host has
free evicts pods all day; pull limits or serialized pulls slow every pod start; low image GC
thresholds delete images that are then pulled again; a larger ``kubeReserved``/``systemReserved``,
a lower ``maxPods`` or ``podsPerCore`` leaves fewer pods on the node; enforcing a tiny
``systemReserved.cpu`` starves the container runtime; a tiny ``containerLogMaxSize`` rotates logs
all the time. A canary that can see these needs a workload to suffer them by the kubelet's own
mechanisms, and metrics that show it (``kubesim.kubelet.metrics``). The harm catalogue in
docs/kubesim.md names, for each, the kubelet source it follows.

The pods are not API objects: a :class:`Workload` belongs to the node, lives across kubelet
restarts (containers keep running when the kubelet restarts) and advances one step of
``workload_period`` simulated seconds at a time, with the config the kubelet process runs. All
durations it reports are simulated seconds.

Noise (``kubesim.noise``, the cluster file's ``noise:`` section) makes nodes differ as a fleet's
do: a speed and a memory factor per host, pods arriving and completing at random, image cache
misses and heavy-tailed image sizes, memory and CPU use that wander (and swing over the day), and
fleet-wide shifts. Every draw comes from one ``random.Random`` per node, seeded by (seed, node
name): a run is reproducible from its seed. Without noise the node behaves as it always has.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Optional, Sequence

from kubesim.clusterfile import NodeSpec
from kubesim.kubelet.kubeletconfig import Config
from kubesim.kubelet.units import UnitError, parse_quantity
from kubesim.noise import NO_SHIFT, Factors, Shift, ShiftSource, factors, shift_from
from kubesim.timing import parse_duration

CONTAINER_START_S = 0.4  # create + start of a container once its image is there
RELIST_BASE_S, RELIST_PER_POD_S = 0.002, 0.0004  # PLEG relist: list sandboxes/containers, per-pod status
RELIST_PERIOD_S = 1.0  # the PLEG's relist period (pkg/kubelet/kubelet.go: genericPlegRelistPeriod)
# A new PLEG's first relist inspects every pod (GetPodStatus: a sandbox status and each container's
# over the CRI, several calls of about a millisecond each): an assumption, not a measurement
POD_STATUS_S = 0.005
REOPEN_LOG_S = 0.005  # the runtime's ReopenContainerLog
REMOVE_IMAGE_S = 0.05  # the runtime's RemoveImage
EVICTION_MONITORING_S = 10.0  # eviction manager's monitoring period (kubelet.go: evictionMonitoringPeriod)
IMAGE_GC_PERIOD_S = 300.0  # image GC loop (kubelet.go: ImageGCPeriod)
LOG_MONITOR_S = 10.0  # container log manager's check (containerLogMonitorInterval default)
BACKOFF_INITIAL_S, BACKOFF_MAX_S = 10.0, 300.0  # image pull back-off (kubelet.go: backOffPeriod, MaxContainerBackOff)
RUNTIME_CPU, KUBELET_CPU = 0.2, 0.1  # cores the container runtime and the kubelet want when busy
DEFAULT_SHARES = 1024  # cpu.shares of a slice nobody configured (system.slice, the kube-reserved slice)
DAY_S = 86400.0
MAX_SLOWDOWN = 50.0
OOM_MARGIN = 256 * 2**20  # memory.available below this: the kernel's OOM killer fires first


def _bytes(text: object) -> float:
    try:
        return float(parse_quantity(str(text)))
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


def _duration(value: object, default: float) -> float:
    try:
        return parse_duration(str(value)) if value not in (None, "") else default
    except ValueError:
        return default


def _reserved(cfg: Config, resource: str, *fields: str) -> float:
    return sum(_bytes((cfg.get(f) or {}).get(resource, "0")) for f in fields)


def _shares(cores: float) -> int:
    """``MilliCPUToShares``: cpu.shares for a CPU amount (at least 2)."""
    return max(2, int(cores * 1000) * 1024 // 1000)


def poisson(rng: random.Random, lam: float) -> int:
    """A Poisson draw (Knuth for small means, a normal approximation for large ones)."""
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


@dataclass
class Step:
    """What happened during one step: the kubelet's metrics observe it."""

    pod_starts: list[float] = field(default_factory=list)  # start latency of each pod started
    sli_starts: list[float] = field(default_factory=list)  # the same without the image pulls
    evicted: int = 0
    restarts: list[str] = field(default_factory=list)  # pods whose container the OOM killer restarted
    images_collected: int = 0
    pulls: int = 0  # PullImage calls that reached the runtime
    pull_seconds: list[float] = field(default_factory=list)  # each one's duration
    container_seconds: list[float] = field(default_factory=list)  # each StartContainer's duration
    rotations: int = 0  # container logs rotated (ReopenContainerLog)
    rotation_seconds: float = 0.0  # one ReopenContainerLog's duration this step
    rejected: dict[str, int] = field(default_factory=dict)  # admission rejections by reason
    throttled_pulls: int = 0  # pulls refused by registryPullQPS ("pull QPS exceeded")
    failed_pulls: int = 0  # pulls the registry failed (fleet noise: a 5xx, a timeout)
    relist_seconds: float = 0.0
    relist_interval: float = 1.0
    remove_image_seconds: float = REMOVE_IMAGE_S


@dataclass(slots=True)
class Pod:
    name: str
    image: int
    restarts: int = 0
    memory: float = 0.0  # what it uses at its app's walk's zero (bytes)
    log_rate: float = 0.0  # bytes per second written to its container log
    log_bytes: float = 0.0  # in the current log file at ``log_at``
    log_at: float = 0.0


# what a starting pod waits for next (the kind of its event on the pod workers' heap)
WANTS_PULL, RUNNING, PULLED = 0, 1, 2  # its image pulled; its container started; its pull to return


@dataclass(slots=True)
class _Start:
    """A pod the kubelet is starting: pulling its image (with back-off), then its container."""

    pod: Pod
    arrived: float
    backoff: float = 0.0
    pulling_from: float = -1.0  # when the first pull attempt began
    pull_seconds: float = 0.0  # how long its image pull took (the kubelet times it as it returns)
    container: float = 0.0  # how long its container took to start
    backing_off: bool = False  # its last pull failed: waiting ``ImagePullBackOff`` until the next


@dataclass(frozen=True)
class _View:
    """What the workload needs of a config, computed once per config (not per step)."""

    hard: float
    soft: float
    soft_grace: float
    transition: float
    by_memory: int
    by_count: int
    allocatable_memory: float  # bytes: capacity - kubeReserved - systemReserved - evictionHard
    allocatable_cpu: float  # cores: capacity - kubeReserved - systemReserved
    qps: float
    burst: int
    pullers: Optional[int]  # None: unlimited parallel pulls
    gc_high: float
    gc_low: float
    gc_min_age: float
    log_max_size: float
    system_shares: int
    kube_shares: int
    pod_shares: int


class _LocalShifts:
    """Shifts of a workload stepped on its own (no cluster): its clock is the fleet's."""

    def __init__(self, workload: "Workload") -> None:
        self.workload = workload
        self.shifts: list[Shift] = []

    def now(self) -> float:
        return self.workload.clock

    def active_shifts(self) -> Sequence[Shift]:
        return self.shifts


class Workload:
    """One node's pods, images and memory; :meth:`step` advances them under a config."""

    def __init__(self, spec: NodeSpec, *, shifts: Optional[ShiftSource] = None) -> None:
        self.spec = spec
        facts, host, noise = spec.workload, spec.host, spec.noise
        self.noise = noise
        self.rng = rng = noise.rng(spec.name)
        self._local_shifts = _LocalShifts(self)
        self.shift_source: ShiftSource = shifts if shifts is not None else self._local_shifts
        self._file_shifts = [s.shift() for s in noise.shifts]
        # the host: how much slower than nominal it is (pulls, container starts, relists) and how
        # much more memory its pods use (different hardware, kernels, neighbours)
        self.slowness = math.exp(rng.gauss(0.0, noise.host_speed_sigma)) if noise.host_speed_sigma else 1.0
        self.memory_factor = math.exp(rng.gauss(0.0, noise.host_memory_sigma)) if noise.host_memory_sigma else 1.0
        self.cores = _bytes(spec.capacity.get("cpu", "4")) or 4.0
        self.memory_total = _bytes(spec.capacity.get("memory", "16Gi"))
        self.system_memory = _bytes(host.system_memory)
        self.pod_memory = _bytes(facts.pod_memory)
        self.pod_request = _bytes(facts.pod_request)
        self.pod_cpu = _bytes(facts.pod_cpu)
        self.log_rate = _bytes(facts.log_rate)
        self.image_size = _bytes(facts.image_size)
        self.image_sizes = [self.image_size * (math.exp(rng.gauss(0.0, noise.image_size_sigma))
                                               if noise.image_size_sigma else 1.0) for _ in range(facts.images)]
        self.image_disk = _bytes(host.image_disk)
        self.other_images = int(_bytes(host.image_disk_used) // max(self.image_size, 1.0))
        self.pull_latency = parse_duration(host.pull_latency)
        self.bandwidth = max(_bytes(host.pull_bandwidth), 1.0)
        self.relist_jitter = _duration(noise.relist_jitter, 0.003)
        self.walk_tau = _duration(noise.memory_walk_period, 1800.0)
        self.churn_rate = noise.churn_per_minute if noise.churn_per_minute is not None else facts.starts_per_minute
        self.poisson = noise.churn == "poisson"
        self.cached: set[int] = set(range(facts.images))  # a node that has run its pods before
        self._cached_bytes = sum(self.image_sizes)
        self._stale: list[tuple[float, float]] = []  # (bytes, since): old versions of images, unused
        self._last_used = [0.0] * facts.images
        # the memory use of each app (image) here wanders: load, caches, leaks; its pods follow it
        self.app_walk = [0.0] * facts.images
        self.clock = 0.0  # simulated seconds since the node booted
        self._view_of: Optional[Config] = None
        self._view: Optional[_View] = None
        self._log_check = LOG_MONITOR_S  # the log manager's next check
        self._log_next = 0.0  # no pod's log reaches containerLogMaxSize before this
        # a node that was running its pods before kubesim started: no start-up burst of pulls
        self._serial = 0
        self.pods = [self._new_pod(i % facts.images, initial=True) for i in range(facts.pods)]
        self.desired = facts.pods  # pods the controllers want here (poisson churn moves it)
        self._starting: list[tuple[float, int, int, _Start]] = []  # (time, seq, kind, start)
        self._seq = 0
        self._starts_owed = 0.0
        self._tokens = 0.0
        self._bucket_at = 0.0
        self._pullers: list[float] = []
        self._admitted: Optional[tuple[int, int]] = None
        self.memory_pressure = False
        self._pressure_seen_at = 0.0  # simulated seconds: when a memory threshold was last met
        self._soft_since: Optional[float] = None
        # the kubelet started at some moment of its own: each node's image GC passes fall anywhere in
        # the period (a fleet whose nodes collected at the same instants compared badly with a batch)
        self._next_gc = noise.rng(f"{spec.name}/image-gc").random() * IMAGE_GC_PERIOD_S
        self.cpu_walk = 0.0
        self._dayf = 1.0  # the diurnal swing this step
        self._throttle = 1.0  # how much slower the runtime and the kubelet run this step (CPU)
        self._first_relist = False  # the next relist is a new kubelet process's first
        self.pending = 0

    # -- facts the metrics and the node status read ----------------------------------------

    @property
    def throttle(self) -> float:
        """How much slower the container runtime and the kubelet ran in the last step for want of
        CPU (1.0: not at all): what a starved runtime's symptoms (slow relists) come from."""
        return self._throttle

    @property
    def running(self) -> int:
        return len(self.pods)

    @property
    def starting(self) -> int:
        return len(self._starting)

    def bound(self) -> list[Pod]:
        """Every pod bound to the node: running, and starting (pulling, waiting, backing off)."""
        return [*self.pods, *(item.pod for _, _, _, item in self._starting)]

    def backing_off(self) -> list[Pod]:
        """The pods whose last image pull failed, waiting out its back-off (``ImagePullBackOff``)."""
        return [item.pod for _, _, kind, item in self._starting if kind == WANTS_PULL and item.backing_off]

    def pod_usage(self, pod: Pod, f: Factors = NO_SHIFT) -> float:
        walk = self.app_walk[pod.image]
        return pod.memory * (math.exp(walk) if walk else 1.0) * self._dayf * f.memory

    def used_memory(self, f: Optional[Factors] = None) -> float:
        """Memory the pods use now (their working sets)."""
        f = f if f is not None else self.factors()
        if not self.noise.memory_walk_sigma and not self.noise.pod_memory_sigma and not self.noise.diurnal \
                and self.memory_factor == 1.0:
            return self.pod_memory * len(self.pods) * f.memory
        return sum(self.pod_usage(p, f) for p in self.pods)

    @property
    def free_memory(self) -> float:
        """``memory.available``: capacity minus the system daemons and the pods' working sets."""
        return self.memory_total - self.system_memory - self.used_memory()

    def allocatable(self) -> dict[str, float]:
        """``Node.status.allocatable`` under the config last stepped (pods, memory in bytes, cpu in
        cores; ``GetNodeAllocatableAbsolute``, as ``kubesim.kubelet.nodeobject`` writes it); empty
        before the first step."""
        view = self._view
        if view is None:
            return {}
        return {"pods": float(view.by_count), "memory": view.allocatable_memory, "cpu": view.allocatable_cpu}

    def image_usage_percent(self) -> float:
        used = self.other_images * self.image_size + self._cached_bytes + sum(b for b, _ in self._stale)
        return 100.0 * used / max(self.image_disk, 1.0)

    def factors(self) -> Factors:
        """What the fleet-wide shifts active now multiply."""
        now = self.shift_source.now()
        file_f = factors(self._file_shifts, now) if self._file_shifts else NO_SHIFT
        run = self.shift_source.active_shifts()
        run_f = factors(run, now) if run else NO_SHIFT
        if run_f is NO_SHIFT:
            return file_f
        if file_f is NO_SHIFT:
            return run_f
        return Factors(file_f.pod_start * run_f.pod_start, file_f.memory * run_f.memory,
                       file_f.churn * run_f.churn, file_f.cpu * run_f.cpu)

    def shift(self, *, pod_start: float = 1.0, memory: float = 1.0, churn: float = 1.0, cpu: float = 1.0,
              for_: str = "10m", at: str = "0s") -> Shift:
        """A fleet-wide shift from ``at`` after now (this workload's clock) for ``for_`` - for a
        workload stepped on its own; in a cluster shifts go through ``Cluster.faults.shift``."""
        if self.shift_source is not self._local_shifts:
            raise RuntimeError("this workload runs in a cluster: shift the fleet through Cluster.faults.shift()")
        change = {"for": for_, "at": at, "podStart": pod_start, "memory": memory, "churn": churn, "cpu": cpu}
        shift = shift_from(change, self.clock)
        self._local_shifts.shifts.append(shift)
        return shift

    # -- one step --------------------------------------------------------------------------

    def step(self, cfg: Config, seconds: float) -> Step:
        """Advance ``seconds`` of simulated time under ``cfg`` (the running kubelet's config)."""
        view = self._config_view(cfg)
        start = self.clock
        self.clock += seconds
        f = self.factors()
        if self.noise.diurnal:
            self._dayf = 1.0 + self.noise.diurnal * math.sin(2 * math.pi * self.shift_source.now() / DAY_S)
        self._throttle = self.runtime_slowdown(view, f)
        out = Step()
        self._admit(view, out)
        self._wander(seconds)
        self._evict(view, seconds, f, out)
        self._collect_images(view, out)
        self._churn(seconds, f, start)
        self._schedule(view, seconds, start)
        self._run_starts(view, f, out)
        self._rotate_logs(view, seconds, out)
        self._relist(view, seconds, f, out)
        return out

    # -- the config ------------------------------------------------------------------------

    def _config_view(self, cfg: Config) -> _View:
        if cfg is self._view_of and self._view is not None:
            return self._view
        hard = _threshold((cfg.get("evictionHard") or {}).get("memory.available"), self.memory_total)
        soft = _threshold((cfg.get("evictionSoft") or {}).get("memory.available"), self.memory_total)
        allocatable = self.memory_total - _reserved(cfg, "memory", "kubeReserved", "systemReserved") - hard
        max_pods = int(cfg.get("maxPods") or 110)
        per_core = int(cfg.get("podsPerCore") or 0)
        if per_core > 0:  # GetMaxPods: min(maxPods, podsPerCore * cores)
            max_pods = min(max_pods, per_core * int(self.cores))
        serial = cfg.get("serializeImagePulls", True) is not False
        parallel = cfg.get("maxParallelImagePulls")
        enforce = cfg.get("enforceNodeAllocatable") or []
        pod_cores = self.cores - _reserved(cfg, "cpu", "kubeReserved", "systemReserved")
        view = _View(
            hard=hard,
            soft=soft,
            soft_grace=_duration((cfg.get("evictionSoftGracePeriod") or {}).get("memory.available"), 0.0),
            transition=_duration(cfg.get("evictionPressureTransitionPeriod"), 300.0),
            by_memory=int(max(allocatable, 0.0) // max(self.pod_request, 1.0)),
            by_count=max_pods,
            allocatable_memory=max(allocatable, 0.0),
            allocatable_cpu=max(pod_cores, 0.0),
            qps=float(cfg.get("registryPullQPS") or 0),
            burst=int(cfg.get("registryBurst") or 10),
            pullers=1 if serial else (int(parallel) if isinstance(parallel, int) and parallel > 0 else None),
            gc_high=float(cfg.get("imageGCHighThresholdPercent") or 85),
            gc_low=float(cfg.get("imageGCLowThresholdPercent") or 80),
            gc_min_age=_duration(cfg.get("imageMinimumGCAge"), 120.0),
            log_max_size=_bytes(cfg.get("containerLogMaxSize") or "10Mi") or 10 * 2**20,
            system_shares=(_shares(_reserved(cfg, "cpu", "systemReserved")) if "system-reserved" in enforce
                           else DEFAULT_SHARES),
            kube_shares=_shares(_reserved(cfg, "cpu", "kubeReserved")) if "kube-reserved" in enforce else DEFAULT_SHARES,
            pod_shares=_shares(max(pod_cores, 0.0)),
        )
        if self._view is None or view != self._view:  # a kubelet started on another config
            self._tokens, self._bucket_at = float(view.burst), self.clock  # a new rate limiter
            self._pullers = [self.clock] * view.pullers if view.pullers else []
            self._log_next = 0.0  # another containerLogMaxSize: check every pod again
        self._view_of, self._view = cfg, view
        return view

    def fits(self, view: _View) -> int:
        """How many pods the scheduler places here: allocatable memory by request, and the pod limit."""
        return min(view.by_memory, view.by_count)

    def _admit(self, view: _View, out: Step) -> None:
        """A kubelet that starts re-admits the pods it runs, oldest first (``HandlePodAdditions``,
        ``canAdmitPod``): those beyond its pod limit or its allocatable are rejected (``OutOfpods``,
        ``OutOfmemory``) and their controllers place them elsewhere."""
        limits = (view.by_memory, view.by_count)
        if limits == self._admitted:
            return
        self._admitted = limits
        excess = len(self.pods) - self.fits(view)
        if excess <= 0:
            return
        reason = "OutOfpods" if view.by_count <= view.by_memory else "OutOfmemory"
        del self.pods[len(self.pods) - excess:]  # the newest pods come last
        out.rejected[reason] = out.rejected.get(reason, 0) + excess
        if self.poisson:
            self.desired = max(0, self.desired - excess)

    # -- memory and CPU wander -------------------------------------------------------------

    def _wander(self, seconds: float) -> None:
        """The memory use of each app (all its pods on the node) follows a slow mean-reverting walk
        (Ornstein-Uhlenbeck in log space, stationary sigma ``memoryWalkSigma``, correlation time
        ``memoryWalkPeriod``); so does the node's CPU use."""
        keep = math.exp(-seconds / self.walk_tau)
        spread = math.sqrt(max(0.0, 1 - keep * keep))
        sigma = self.noise.memory_walk_sigma
        if sigma:
            gauss, walks = self.rng.gauss, self.app_walk
            for i, walk in enumerate(walks):
                walks[i] = walk * keep + sigma * spread * gauss(0.0, 1.0)
        if self.noise.cpu_walk_sigma:
            self.cpu_walk = self.cpu_walk * keep + self.noise.cpu_walk_sigma * spread * self.rng.gauss(0.0, 1.0)

    def cpu_demand(self, f: Factors = NO_SHIFT) -> float:
        """Cores the pods want now."""
        demand = len(self.pods) * self.pod_cpu * f.cpu
        if self.cpu_walk:
            demand *= math.exp(self.cpu_walk)
        return demand * self._dayf

    def runtime_slowdown(self, view: _View, f: Factors = NO_SHIFT) -> float:
        """How much slower the container runtime (system.slice) and the kubelet (the kube-reserved
        slice) run when the pods compete for CPU. The CFS gives each busy slice CPU in proportion to
        its cpu.shares; with ``system-reserved`` (``kube-reserved``) in ``enforceNodeAllocatable``
        the kubelet sets that slice's shares from ``systemReserved.cpu`` (``kubeReserved.cpu``)
        (``enforceExistingCgroup``), instead of the 1024 an unconfigured slice has."""
        demand = self.cpu_demand(f)
        idle = self.cores - demand
        if idle >= RUNTIME_CPU + KUBELET_CPU:
            return 1.0
        total = view.system_shares + view.kube_shares + view.pod_shares
        worst = 1.0
        for want, shares in ((RUNTIME_CPU, view.system_shares), (KUBELET_CPU, view.kube_shares)):
            gets = max(self.cores * shares / total, idle, want / MAX_SLOWDOWN)
            worst = max(worst, want / min(want, gets))
        return worst

    # -- evictions -------------------------------------------------------------------------

    def _evict(self, view: _View, seconds: float, f: Factors, out: Step) -> None:
        """The eviction manager (``synchronize``), every monitoring period: a threshold met sets
        MemoryPressure at once; a hard one evicts at once, a soft one only once it has held for its
        grace period; one pod per pass, the one using most above its request
        (``rankMemoryPressure``). MemoryPressure clears ``evictionPressureTransitionPeriod`` after
        the last time a threshold was met. Memory really short (under 256Mi available), the
        kernel's OOM killer gets there first: the largest container restarts."""
        passes = max(1, int(seconds // EVICTION_MONITORING_S))
        met = False
        for _ in range(passes):
            free = self.memory_total - self.system_memory - self.used_memory(f)
            if free < OOM_MARGIN and self.pods:  # really out of memory: the kernel kills the largest
                hit = max(self.pods, key=lambda p: self.pod_usage(p, f))
                hit.restarts += 1
                out.restarts.append(hit.name)
            hard = view.hard > 0 and free < view.hard
            soft = view.soft > 0 and free < view.soft
            if soft:
                if self._soft_since is None:
                    self._soft_since = self.clock
            else:
                self._soft_since = None
            if not (hard or soft):
                break
            met = True
            soft_due = soft and self._soft_since is not None and self.clock - self._soft_since >= view.soft_grace
            if not (hard or soft_due) or not self.pods:
                break
            victim = max(range(len(self.pods)), key=lambda i: self.pod_usage(self.pods[i], f))
            self.pods.pop(victim)
            out.evicted += 1
        if met:
            self.memory_pressure = True
            self._pressure_seen_at = self.clock
        elif self.memory_pressure and self.clock - self._pressure_seen_at >= view.transition:
            self.memory_pressure = False

    # -- images ----------------------------------------------------------------------------

    def _collect_images(self, view: _View, out: Step) -> None:
        """Image GC (``realImageGCManager.GarbageCollect``, every five minutes): above the high
        threshold, delete unused images, least recently used first and none used within
        ``imageMinimumGCAge``, down to the low one."""
        if self.clock < self._next_gc:
            return
        self._next_gc = self.clock + IMAGE_GC_PERIOD_S
        if self.image_usage_percent() <= view.gc_high:
            return
        in_use = {p.image for p in self.pods} | {s.pod.image for _, _, _, s in self._starting}
        while self.image_usage_percent() > view.gc_low:
            if self.other_images > 0:  # images no pod here has used for long: the least recently used
                self.other_images -= 1
            elif self._stale:  # superseded versions: unused since their successor was pulled
                self._stale.pop(0)
            else:
                old = self.clock - view.gc_min_age
                unused = [i for i in self.cached if i not in in_use and self._last_used[i] <= old]
                if not unused:
                    break  # everything left is in use or too young ("wanted to free ..., but freed ...")
                oldest = min(unused, key=lambda i: self._last_used[i])
                self.cached.discard(oldest)
                self._cached_bytes -= self.image_sizes[oldest]
            out.images_collected += 1

    def _pull_seconds(self, image: int, f: Factors) -> float:
        """A PullImage: the registry round trip (``imagePullPolicy: Always``) plus, when the image
        is not on the node, its layers."""
        latency = self.pull_latency
        if self.noise.pull_jitter_sigma:
            latency *= math.exp(self.rng.gauss(0.0, self.noise.pull_jitter_sigma))
        if image not in self.cached:
            latency += self.image_sizes[image] / self.bandwidth
            self.cached.add(image)
            self._cached_bytes += self.image_sizes[image]
        return latency * self.slowness * f.pod_start

    # -- pods come and go ------------------------------------------------------------------

    def _new_pod(self, image: int, initial: bool = False) -> Pod:
        self._serial += 1
        noise, rng = self.noise, self.rng
        memory = self.pod_memory * self.memory_factor
        if noise.pod_memory_sigma:
            memory *= math.exp(rng.gauss(0.0, noise.pod_memory_sigma))
        rate = self.log_rate * (math.exp(rng.gauss(0.0, noise.log_rate_sigma)) if noise.log_rate_sigma else 1.0)
        # a pod already running when kubesim started has written part of its current log file
        written = rng.random() * 10 * 2**20 if initial and noise.log_rate_sigma else 0.0
        pod = Pod(f"{self.spec.name}-pod-{self._serial}", image, memory=memory, log_rate=rate, log_bytes=written,
                  log_at=self.clock)
        if self._view is not None and rate > 0:
            self._log_next = min(self._log_next, self.clock + (self._view.log_max_size - written) / rate)
        return pod

    def _churn(self, seconds: float, f: Factors, start: float) -> None:
        """Pods finishing and new ones arriving. Steady (no noise): ``startsPerMinute`` pods are
        replaced, at a fixed rate. Poisson: pods arrive at ``churnPerMinute`` and each completes at
        ``churnPerMinute / pods`` a minute, so the count wanders around the workload's ``pods``."""
        rate = self.churn_rate * f.churn * seconds / 60.0
        if not self.poisson:
            self._starts_owed += rate
            replaced = min(int(self._starts_owed), len(self.pods))
            self._starts_owed -= int(self._starts_owed)
            for _ in range(replaced):
                self.pods.pop(int(self.rng.random() * len(self.pods)))
            return
        target = max(self.spec.workload.pods, 1)
        done = min(self.desired, poisson(self.rng, rate * self.desired / target))
        waiting = max(0, self.desired - len(self.pods) - len(self._starting))
        finished = max(0, min(done - min(done, waiting), len(self.pods)))
        for _ in range(finished):
            self.pods.pop(int(self.rng.random() * len(self.pods)))
        self.desired += poisson(self.rng, rate) - done

    def _schedule(self, view: _View, seconds: float, start: float) -> None:
        """Start the pods that fit. MemoryPressure stops BestEffort pods only (``podRequest: 0``):
        the node's ``memory-pressure`` taint is tolerated by every Burstable or Guaranteed pod
        (the DefaultTolerationSeconds/PodTolerationRestriction admission adds the toleration) and
        the kubelet's eviction manager admits them (``managerImpl.Admit``)."""
        target = self.desired if self.poisson else self.spec.workload.pods
        placed = len(self.pods) + len(self._starting)
        wanted = min(target, self.fits(view))
        if not (self.memory_pressure and self.pod_request <= 0):
            images, hit = self.spec.workload.images, self.noise.image_cache_hit
            for _ in range(max(0, wanted - placed)):
                image = int(self.rng.random() * images)
                if hit < 1.0 and self.rng.random() >= hit and image in self.cached:
                    # a new version of the image (a rollout): the old one stays until image GC
                    self.cached.discard(image)
                    self._cached_bytes -= self.image_sizes[image]
                    self._stale.append((self.image_sizes[image], self.clock))
                arrived = start + (self.rng.random() * seconds if self.poisson else 0.0)
                self._push(arrived, WANTS_PULL, _Start(self._new_pod(image), arrived))
        self.pending = max(0, target - len(self.pods) - len(self._starting))

    def kubelet_restarted(self) -> None:
        """A new kubelet process sees the pods still starting for the first time now: its
        ``kubelet_pod_start_duration_seconds`` runs from the pod's ``kubernetes.io/config.seen``,
        which each process sets when its config source first sees the pod. Without this a restarted
        node (every canary) reported its in-flight starts as slow as the restart made them.

        Image GC starts again with the process (``StartGarbageCollection``: ``wait.Until`` runs the
        first pass at once, then every ``ImageGCPeriod``), and that first pass frees nothing: the new
        image manager has just detected every image, and none is older than ``imageMinimumGCAge``
        to it (``freeSpace`` skips them; the kubelet logs "Image garbage collection failed once").
        So a GC threshold's harm shows five minutes after the restart, not before.

        The new PLEG's first relist finds every container new to it and inspects every pod
        (``pkg/kubelet/pleg/generic.go``: ``Relist`` updates the pod cache of each pod with an event):
        one slow relist on every restarted node, none on a node left alone."""
        self._first_relist = True
        for when, _, kind, item in self._starting:
            item.arrived = max(item.arrived, self.clock)
            if item.pulling_from >= 0:  # RecordImageStartedPulling again, in the new process
                item.pulling_from = max(item.pulling_from, self.clock)
            if kind == PULLED:
                # its image still downloading: the new process's pod worker asks for it again
                # (imagePullPolicy: Always) and the runtime joins the pull in flight, so the new
                # process times the rest of it as a pull_image operation
                item.pull_seconds = when - self.clock
        self._next_gc = self.clock + IMAGE_GC_PERIOD_S

    def _push(self, when: float, kind: int, item: _Start) -> None:
        self._seq += 1
        heapq.heappush(self._starting, (when, self._seq, kind, item))

    def _run_starts(self, view: _View, f: Factors, out: Step) -> None:
        """The pod workers until now: each pod's image is pulled (``imagePullPolicy: Always``) by
        the image puller - one at a time when ``serializeImagePulls``, else at most
        ``maxParallelImagePulls`` at once - through the ``registryPullQPS``/``registryBurst`` token
        bucket, which refuses a pull when empty (``pull QPS exceeded``: ``ErrImagePull``, then
        back-off 10 s doubling to 5 min); then the container starts."""
        slow = self.slowness * f.pod_start * self._throttle
        while self._starting and self._starting[0][0] < self.clock:
            when, _, kind, item = heapq.heappop(self._starting)
            if kind == PULLED:  # the runtime returned the image: the kubelet times the PullImage call
                out.pulls += 1
                out.pull_seconds.append(item.pull_seconds)
                self._push(when + item.container, RUNNING, item)
                continue
            if kind == RUNNING:
                out.container_seconds.append(item.container)  # StartContainer returned
                self.pods.append(item.pod)
                total = when - item.arrived
                out.pod_starts.append(total)
                pulling = when - item.container - item.pulling_from  # first pull began .. last ended
                out.sli_starts.append(max(total - pulling, 0.0))
                continue
            if item.pulling_from < 0:
                item.pulling_from = when  # RecordImageStartedPulling: the SLI leaves this out
            begin = max(when, self._pullers[0]) if self._pullers else when
            if begin > when:  # waits for the puller
                self._push(begin, WANTS_PULL, item)
                continue
            if view.qps > 0:
                self._tokens = min(float(view.burst), self._tokens + view.qps * max(0.0, begin - self._bucket_at))
                self._bucket_at = max(self._bucket_at, begin)
                if self._tokens < 1.0:  # TryAccept failed
                    out.throttled_pulls += 1
                    self._back_off(item, begin)
                    continue
                self._tokens -= 1.0
            duration = self._pull_seconds(item.pod.image, f)
            if self._pullers:
                heapq.heapreplace(self._pullers, begin + duration)
            item.backing_off = False
            if self.noise.pull_error_rate and self.rng.random() < self.noise.pull_error_rate:
                out.failed_pulls += 1  # the registry failed it once it had taken its time
                self._back_off(item, begin + duration)
                continue
            self._last_used[item.pod.image] = begin
            item.pull_seconds = duration
            item.container = CONTAINER_START_S * slow
            self._push(begin + duration, PULLED, item)

    def _back_off(self, item: _Start, failed_at: float) -> None:
        """A failed pull: ``ErrImagePull``, then the image back-off (10 s, doubling to 5 min)."""
        item.backoff = min(BACKOFF_MAX_S, item.backoff * 2 if item.backoff else BACKOFF_INITIAL_S)
        item.backing_off = True
        self._push(failed_at + item.backoff, WANTS_PULL, item)

    # -- logs and relists ------------------------------------------------------------------

    def _rotate_logs(self, view: _View, seconds: float, out: Step) -> None:
        """The container log manager (``containerLogManager.rotateLogs``), every 10 s: a log at
        ``containerLogMaxSize`` or more is renamed, the runtime reopens it (``ReopenContainerLog``)
        and the old file is compressed; ``containerLogMaxFiles`` only bounds how many are kept."""
        out.rotation_seconds = REOPEN_LOG_S * self.slowness
        checks = 0
        while self._log_check <= self.clock:
            self._log_check += LOG_MONITOR_S
            checks += 1
        if not checks or self.clock < self._log_next:
            return  # nothing to rotate yet: no pod's log has reached the limit
        limit, now, due = view.log_max_size, self.clock, math.inf
        for pod in self.pods:
            size = pod.log_bytes + pod.log_rate * (now - pod.log_at)
            if size >= limit:  # once per check at most
                turns = min(checks, int(size // limit))
                out.rotations += turns
                size -= turns * limit if turns < checks else size
            pod.log_bytes, pod.log_at = size, now
            if pod.log_rate > 0:
                due = min(due, now + (limit - size) / pod.log_rate)
        self._log_next = due

    def _relist(self, view: _View, seconds: float, f: Factors, out: Step) -> None:
        """PLEG relist: list the sandboxes and containers, inspect the pods that changed - every call
        a runtime call, slower on a slow host, slower still when the runtime is starved of CPU; log
        rotations keep the runtime busy too."""
        base = RELIST_BASE_S + RELIST_PER_POD_S * len(self.pods) + 0.001 * out.rotations * LOG_MONITOR_S / seconds
        throttle = self._throttle
        slow = self.slowness * throttle
        steady = base * slow
        out.relist_seconds = steady + self.rng.random() * self.relist_jitter
        if self._first_relist:  # one of the step's relists (one per RELIST_PERIOD_S): their mean observed
            first = (RELIST_BASE_S + POD_STATUS_S * len(self.pods)) * slow
            out.relist_seconds += max(0.0, first - steady) * min(1.0, RELIST_PERIOD_S / seconds)
            self._first_relist = False
        out.relist_interval = 1.0 + out.relist_seconds
        out.rotation_seconds *= throttle
        out.remove_image_seconds = REMOVE_IMAGE_S * self.slowness * throttle

