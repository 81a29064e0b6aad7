"""One simulated node without a cluster: its workload and its kubelet's metrics, stepped directly.

Why: judging a canary well is a statistical question - how often does a harmless change look
harmful against fleet noise, how often is a harmful one missed - and answering it takes thousands
of simulated canaries. A cluster (API server, heartbeats, Prometheus) is far too slow for that;
the node's :class:`~kubesim.kubelet.workload.Workload` and its
:class:`~kubesim.kubelet.metrics.KubeletMetrics` are all a judge reads. This module builds them
from the same facts a cluster file gives (pool keys, ``noise:``, a seed), steps them under a
kubelet config, shifts them, and reads the registry as a scrape would, without the text format::

    from kubesim.standalone import StandaloneNode

    control = StandaloneNode.build("node-1", noise={"preset": "fleet"}, seed=7)
    canary = StandaloneNode.build("node-2", noise={"preset": "fleet"}, seed=7)
    canary.configure({"containerLogMaxSize": "1Mi"})      # the kubelet restarts onto it
    for node in (control, canary):
        node.shift(pod_start=2.0, for_="10m")           # a fleet-wide shift hits both alike
        node.run("30m")                                  # 180 steps of 10 s
    ops = canary.snapshot()[("kubelet_runtime_operations_total", (("operation_type", "reopen_container_log"),))]
    p95 = canary.snapshot()[("kubelet_pod_start_duration_seconds", ())].quantile(0.95)

Everything is deterministic from (seed, node name); nothing reads a clock (the registry's
``kubelet_pleg_last_seen_seconds`` is the node's simulated clock). Configs are decoded and
defaulted as the kubelet's v1beta1 defaulting does, not validated.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any, Mapping, Optional, Union

from kubesim.clusterfile import ClusterFile, NodeSpec, expand
from kubesim.kubelet.exposition import Sample, SeriesKey
from kubesim.kubelet.kubeletconfig import Config, decode_body
from kubesim.kubelet.metrics import KubeletMetrics
from kubesim.kubelet.process import kubelet_minor
from kubesim.kubelet.workload import Step, Workload
from kubesim.noise import Shift
from kubesim.timing import parse_duration

DEFAULT_VERSION = "1.31"


def node_spec(
    name: str = "node-1",
    *,
    pool: Optional[Mapping[str, Any]] = None,
    noise: Optional[Mapping[str, Any]] = None,
    seed: Optional[int] = None,
    kubelet_version: str = DEFAULT_VERSION,
) -> NodeSpec:
    """One node as a cluster file makes it: ``pool`` holds a pool's keys (``capacity``, ``host``,
    ``workload``, ``noise``), ``noise`` the cluster's ``noise:`` section; ``seed`` overrides its
    seed. Raises ``pydantic.ValidationError`` for bad keys, as the cluster file would."""
    section = dict(noise or {})
    if seed is not None:
        section["seed"] = seed
    version = kubelet_version if kubelet_version.startswith("v") else f"v{kubelet_version}.0"
    body: dict[str, Any] = {
        "pools": [{**dict(pool or {}), "name": "pool", "count": 1,
                   "kubelet": {**dict((pool or {}).get("kubelet") or {}), "version": version}}],
    }
    if section:
        body["noise"] = section
    spec = expand(ClusterFile.model_validate(body))[0]
    return spec.model_copy(update={"name": name, "labels": {**spec.labels, "kubernetes.io/hostname": name}})


def kubelet_config(body: Optional[Mapping[str, Any]] = None, *, minor: int = 31) -> Config:
    """A KubeletConfiguration body (``{"maxPods": 6}``) with the v1beta1 defaults filled in, as a
    kubelet of ``minor`` runs it. Decoded once per distinct body: nodes on the same config share one dict."""
    return _decoded(json.dumps(dict(body or {}), sort_keys=True, default=str), minor)


@functools.lru_cache(maxsize=256)
def _decoded(text: str, minor: int) -> Config:
    cfg, _unknown = decode_body(json.loads(text), minor)
    return cfg


class StandaloneNode:
    """One node's workload and its running kubelet's metrics registry, stepped directly."""

    def __init__(self, spec: NodeSpec, *, config: Optional[Mapping[str, Any]] = None,
                 kubelet_version: Optional[str] = None) -> None:
        self.spec = spec
        self.minor = kubelet_minor(kubelet_version or spec.kubelet.version)
        self.workload = Workload(spec)
        self.config: Config = kubelet_config(config, minor=self.minor)
        self.metrics = KubeletMetrics(self.minor, dkc=False, started_at=self.workload.clock)

    @classmethod
    def build(
        cls,
        name: str = "node-1",
        *,
        pool: Optional[Mapping[str, Any]] = None,
        noise: Optional[Mapping[str, Any]] = None,
        seed: Optional[int] = None,
        kubelet_version: str = DEFAULT_VERSION,
        config: Optional[Mapping[str, Any]] = None,
    ) -> "StandaloneNode":
        """A node from cluster-file facts (see :func:`node_spec`), running ``config``."""
        spec = node_spec(name, pool=pool, noise=noise, seed=seed, kubelet_version=kubelet_version)
        return cls(spec, config=config)

    @property
    def clock(self) -> float:
        """Simulated seconds since the node booted."""
        return self.workload.clock

    @property
    def runtime_slowdown(self) -> float:
        """How much slower the runtime ran in the last step for want of CPU (1.0: not starved)."""
        return self.workload.throttle

    def configure(self, config: Optional[Mapping[str, Any]]) -> None:
        """The kubelet restarts onto ``config`` (a KubeletConfiguration body, defaults filled in):
        a new metrics registry (counters and histograms from zero, as after a real restart); the
        pods keep running, and the next step re-admits them under the new limits."""
        self.config = kubelet_config(config, minor=self.minor)
        self.metrics = KubeletMetrics(self.minor, dkc=False, started_at=self.workload.clock)
        self.workload.kubelet_restarted()

    def step(self, seconds: float = 10.0) -> Step:
        """Advance ``seconds`` of simulated time and record them in the registry."""
        step = self.workload.step(self.config, seconds)
        self.metrics.observe(step, now=self.workload.clock)
        return step

    def run(self, duration: Union[str, float], period: float = 10.0) -> None:
        """Steps of ``period`` seconds (kubesim's ``--workload-period``) for ``duration``."""
        total = parse_duration(duration) if isinstance(duration, str) else float(duration)
        for _ in range(max(0, round(total / period))):
            self.step(period)

    def shift(self, *, pod_start: float = 1.0, memory: float = 1.0, churn: float = 1.0, cpu: float = 1.0,
              for_: str = "10m", at: str = "0s") -> Shift:
        """A fleet-wide shift on this node from ``at`` after now for ``for_``: apply the same one to
        every node of the simulated fleet (changed and unchanged)."""
        return self.workload.shift(pod_start=pod_start, memory=memory, churn=churn, cpu=cpu, for_=for_, at=at)

    def snapshot(self) -> dict[SeriesKey, Sample]:
        """Every series of the registry now: ``{(name, sorted label pairs): value}``, a
        ``HistogramSnapshot`` (cumulative buckets, sum, count, ``quantile(q)``) for histograms."""
        return self.metrics.snapshot(self.workload)

    def value(self, name: str, **labels: str) -> float:
        """One counter's or gauge's value now (0 when the series does not exist yet)."""
        sample = self.snapshot().get((name, tuple(sorted(labels.items()))), 0.0)
        return float(sample) if isinstance(sample, (int, float)) else float(sample.count)

    def copy_config(self) -> Config:
        """The running config (a copy: the one in use is shared with other nodes)."""
        return copy.deepcopy(self.config)
