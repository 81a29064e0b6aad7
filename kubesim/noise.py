"""Fleet noise: how the nodes of a simulated fleet differ from one another and over time, and the
fleet-wide shifts that hit every node alike.

Why: a canary judge compares the nodes that got a new kubelet config with the nodes that did not.
On identical, deterministic nodes any difference is the config's; on a real fleet hosts differ
(hardware, neighbours, image caches), pods come and go at random, memory use wanders, and the
whole fleet sometimes moves at once (a deploy wave, a slow registry). Without that noise a false
halt can never show. The cluster file's ``noise:`` section (cluster-wide, with a per-pool
override) sets it; docs/kubesim.md ("Fleet noise") says what each key stands for.

Everything random derives from ``(seed, node name)``, so a run is reproducible from its seed and
different seeds give different runs. Without a ``noise:`` section nothing changes from before:
the ``none`` preset, randomness seeded by the node's name alone.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Literal, Optional, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kubesim.timing import parse_duration


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def _duration(value: Optional[str], *, positive: bool = False) -> Optional[str]:
    if value is None:
        return None
    seconds = parse_duration(str(value))  # ValueError names the bad input
    if positive and seconds <= 0:
        raise ValueError(f"must be a positive duration, got {value!r}")
    return str(value)


class ShiftSpec(_Strict):
    """A fleet-wide shift declared in the cluster file: from ``at`` (simulated time since the
    cluster started) for ``for``, every node's pod starts take ``podStart`` times as long, its
    pods use ``memory`` times the memory and ``cpu`` times the CPU, and pods come and go ``churn``
    times as often."""

    at: str = "0s"
    for_: str = Field(alias="for")
    pod_start: float = Field(default=1.0, alias="podStart", gt=0, le=100)
    memory: float = Field(default=1.0, gt=0, le=10)
    churn: float = Field(default=1.0, ge=0, le=100)
    cpu: float = Field(default=1.0, gt=0, le=100)

    @field_validator("at")
    @classmethod
    def _at(cls, value: str) -> str:
        return _duration(value) or "0s"

    @field_validator("for_")
    @classmethod
    def _for(cls, value: str) -> str:
        return _duration(value, positive=True) or ""

    def shift(self) -> "Shift":
        start = parse_duration(self.at)
        return Shift(start, start + parse_duration(self.for_), self.pod_start, self.memory, self.churn, self.cpu)


class NoiseSpec(_Strict):
    """The cluster file's ``noise:`` section (cluster-wide or a pool's override). Every key is
    optional: unset keys come from the pool's, else the cluster's, else the preset."""

    preset: Optional[Literal["none", "fleet"]] = None
    seed: Optional[int] = None
    host_speed_sigma: Optional[float] = Field(default=None, alias="hostSpeedSigma", ge=0, le=2)
    host_memory_sigma: Optional[float] = Field(default=None, alias="hostMemorySigma", ge=0, le=2)
    churn: Optional[Literal["steady", "poisson"]] = None
    churn_per_minute: Optional[float] = Field(default=None, alias="churnPerMinute", ge=0)
    image_cache_hit: Optional[float] = Field(default=None, alias="imageCacheHit", ge=0, le=1)
    image_size_sigma: Optional[float] = Field(default=None, alias="imageSizeSigma", ge=0, le=3)
    pull_jitter_sigma: Optional[float] = Field(default=None, alias="pullJitterSigma", ge=0, le=3)
    pull_error_rate: Optional[float] = Field(default=None, alias="pullErrorRate", ge=0, le=1)
    pod_memory_sigma: Optional[float] = Field(default=None, alias="podMemorySigma", ge=0, le=2)
    memory_walk_sigma: Optional[float] = Field(default=None, alias="memoryWalkSigma", ge=0, le=2)
    memory_walk_period: Optional[str] = Field(default=None, alias="memoryWalkPeriod")
    diurnal: Optional[float] = Field(default=None, ge=0, lt=1)
    cpu_walk_sigma: Optional[float] = Field(default=None, alias="cpuWalkSigma", ge=0, le=2)
    log_rate_sigma: Optional[float] = Field(default=None, alias="logRateSigma", ge=0, le=3)
    relist_jitter: Optional[str] = Field(default=None, alias="relistJitter")
    shifts: tuple[ShiftSpec, ...] = ()

    @field_validator("memory_walk_period")
    @classmethod
    def _period(cls, value: Optional[str]) -> Optional[str]:
        return _duration(value, positive=True)

    @field_validator("relist_jitter")
    @classmethod
    def _jitter(cls, value: Optional[str]) -> Optional[str]:
        return _duration(value)

    def explicit(self) -> dict[str, Any]:
        """The keys this section sets (snake_case), shifts and preset aside."""
        return {k: v for k, v in self.model_dump(exclude={"shifts", "preset"}).items() if v is not None}


class Noise(_Strict):
    """One node's resolved noise (every value concrete); see docs/kubesim.md for the meaning."""

    preset: str = "none"
    seed: Optional[int] = None  # None: seeded by the node's name alone (no noise section)
    host_speed_sigma: float = 0.0
    host_memory_sigma: float = 0.0
    churn: str = "steady"
    churn_per_minute: Optional[float] = None  # None: the workload's startsPerMinute
    image_cache_hit: float = 1.0
    image_size_sigma: float = 0.0
    pull_jitter_sigma: float = 0.0
    pull_error_rate: float = 0.0
    pod_memory_sigma: float = 0.0
    memory_walk_sigma: float = 0.0
    memory_walk_period: str = "30m"
    diurnal: float = 0.0
    cpu_walk_sigma: float = 0.0
    log_rate_sigma: float = 0.0
    relist_jitter: str = "3ms"
    shifts: tuple[ShiftSpec, ...] = ()

    def rng(self, node: str) -> random.Random:
        """The node's random source: every draw of its workload derives from (seed, node name)."""
        return random.Random(node if self.seed is None else f"{self.seed}/{node}")


# What the presets set; an explicit key (cluster-wide, then the pool's) wins over its preset.
PRESETS: dict[str, dict[str, Any]] = {
    # today's deterministic nodes: identical hosts, a fixed replacement rate, every image cached
    "none": {},
    # a fleet: hosts differ, pods arrive and complete at random, caches miss, memory wanders
    "fleet": {
        "host_speed_sigma": 0.15,
        "host_memory_sigma": 0.08,
        "churn": "poisson",
        "image_cache_hit": 0.85,
        "image_size_sigma": 0.8,
        "pull_jitter_sigma": 0.3,
        "pull_error_rate": 0.005,
        "pod_memory_sigma": 0.4,
        "memory_walk_sigma": 0.35,
        "memory_walk_period": "20m",
        "diurnal": 0.1,
        "cpu_walk_sigma": 0.2,
        "log_rate_sigma": 1.0,
    },
}


def resolve(cluster: Optional[NoiseSpec], pool: Optional[NoiseSpec]) -> Noise:
    """A pool's noise: its preset (the pool's, else the cluster's, else ``none``), then the
    cluster's explicit keys, then the pool's. Shifts are fleet-wide: the cluster's only."""
    if cluster is None and pool is None:
        return Noise()
    preset = (pool.preset if pool is not None else None) or (cluster.preset if cluster is not None else None) or "none"
    values: dict[str, Any] = {"preset": preset, "seed": 0, **PRESETS[preset]}
    for spec in (cluster, pool):
        if spec is not None:
            values.update(spec.explicit())
    values["shifts"] = cluster.shifts if cluster is not None else ()
    return Noise(**values)


# ------------------------------------------------------------------------------ shifts at run time


@dataclass(frozen=True)
class Shift:
    """A fleet-wide shift active from ``start`` to ``end`` (simulated seconds on the fleet's clock)."""

    start: float
    end: float
    pod_start: float = 1.0
    memory: float = 1.0
    churn: float = 1.0
    cpu: float = 1.0

    def to_dict(self) -> dict[str, float]:
        return {"start": self.start, "end": self.end, "podStart": self.pod_start, "memory": self.memory,
                "churn": self.churn, "cpu": self.cpu}


def shift_from(change: dict[str, Any], now: float) -> Shift:
    """A shift injected at run time: ``{"for": "10m", "at": "0s" (from now), "podStart": 2.0, ...}``.
    Raises ``ValueError`` naming the bad key."""
    known = {"for", "at", "podStart", "memory", "churn", "cpu"}
    unknown = set(change) - known
    if unknown:
        raise ValueError(f"unknown shift key(s): {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
    if "for" not in change:
        raise ValueError("a shift needs 'for' (how long it lasts, e.g. 10m)")
    spec = ShiftSpec.model_validate({k: (str(v) if k in ("for", "at") else v) for k, v in change.items()})
    relative = spec.shift()
    return Shift(now + relative.start, now + relative.end, spec.pod_start, spec.memory, spec.churn, spec.cpu)


@dataclass(frozen=True)
class Factors:
    """What the shifts active at one moment multiply."""

    pod_start: float = 1.0
    memory: float = 1.0
    churn: float = 1.0
    cpu: float = 1.0


NO_SHIFT = Factors()


def factors(shifts: Sequence[Shift], now: float) -> Factors:
    """The product of every shift active at ``now``."""
    active = [s for s in shifts if s.start <= now < s.end]
    if not active:
        return NO_SHIFT
    return Factors(
        math.prod(s.pod_start for s in active),
        math.prod(s.memory for s in active),
        math.prod(s.churn for s in active),
        math.prod(s.cpu for s in active),
    )


class ShiftSource(Protocol):
    """Where a workload finds the shifts injected at run time and the fleet's clock."""

    def now(self) -> float: ...

    def active_shifts(self) -> Sequence[Shift]: ...
