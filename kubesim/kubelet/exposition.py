"""A tiny metrics registry that writes the Prometheus text format (version 0.0.4), as a kubelet's
``/metrics`` does.

Why not ``prometheus_client``: kubesim imports nothing beyond its own needs, and a kubelet's
registry has a few quirks worth reproducing exactly: component-base prefixes every HELP with its
stability level (``[ALPHA]``), a gauge vector holds one label set at a time for the DKC metrics
(the previous one is deleted), and counters reset when the process restarts (a new registry per
process life).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Union

Labels = tuple[tuple[str, str], ...]

# prometheus.DefBuckets, what 1.23's histograms use
DEF_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels, extra: tuple[tuple[str, str], ...] = ()) -> str:
    pairs = (*sorted(labels), *extra)  # client_golang sorts label pairs by name; ``le`` comes last
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


@dataclass(frozen=True)
class HistogramSnapshot:
    """One histogram series now: cumulative ``(le, count)`` buckets ending with ``+Inf``, its sum
    and count - what ``_bucket``/``_sum``/``_count`` expose."""

    buckets: tuple[tuple[float, int], ...]
    sum: float
    count: int

    def quantile(self, q: float) -> float:
        """``histogram_quantile(q, ...)`` as Prometheus computes it (linear within a bucket; the
        highest finite bound when it falls in ``+Inf``); NaN without observations."""
        if self.count == 0:
            return math.nan
        rank, lower, below = q * self.count, 0.0, 0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(bound):
                    return lower
                inside = cumulative - below
                return lower + (bound - lower) * ((rank - below) / inside if inside else 0.0)
            lower, below = bound, cumulative
        return lower


SeriesKey = tuple[str, Labels]
Sample = Union[float, HistogramSnapshot]


@dataclass
class Family:
    """One metric family: name, type, help, and its series by label set."""

    name: str
    kind: str  # counter | gauge | histogram
    help: str
    buckets: tuple[float, ...] = ()
    values: dict[Labels, float] = field(default_factory=dict)
    # histograms: per label set, the cumulative-free bucket counts (+Inf last), then sum and count
    observations: dict[Labels, list[Any]] = field(default_factory=dict)

    def set(self, value: float, labels: Labels = ()) -> None:
        self.values[labels] = float(value)

    def only(self, value: float, labels: Labels) -> None:
        """A gauge vector that keeps one label set (the DKC gauges delete the previous one)."""
        self.values = {labels: float(value)}

    def inc(self, amount: float = 1.0, labels: Labels = ()) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def observe(self, value: float, labels: Labels = ()) -> None:
        series = self.observations.get(labels)
        if series is None:
            series = self.observations[labels] = [[0] * (len(self.buckets) + 1), 0.0, 0]
        series[0][bisect_left(self.buckets, value)] += 1
        series[1] += value
        series[2] += 1

    def snapshot(self) -> dict[SeriesKey, Sample]:
        """Every series' current value: a float, or a :class:`HistogramSnapshot`."""
        if self.kind != "histogram":
            return {(self.name, tuple(sorted(k))): v for k, v in self.values.items()}
        out: dict[SeriesKey, Sample] = {}
        for labels, (counts, total, count) in self.observations.items():
            running, buckets = 0, []
            for bound, n in zip(self.buckets, counts):
                running += n
                buckets.append((float(bound), running))
            buckets.append((math.inf, count))
            out[(self.name, tuple(sorted(labels)))] = HistogramSnapshot(tuple(buckets), total, count)
        return out

    def render(self) -> list[str]:
        if not self.values and not self.observations:
            return []  # a vector with no child is not exposed at all (client_golang)
        lines = [f"# HELP {self.name} [ALPHA] {self.help}", f"# TYPE {self.name} {self.kind}"]
        if self.kind != "histogram":
            lines += [f"{self.name}{_labels(k)} {_number(v)}" for k, v in sorted(self.values.items())]
            return lines
        for labels, (counts, total, count) in sorted(self.observations.items()):
            running = 0
            for bound, n in zip(self.buckets, counts):
                running += n
                lines.append(f"{self.name}_bucket{_labels(labels, (('le', _number(bound)),))} {running}")
            lines.append(f"{self.name}_bucket{_labels(labels, (('le', '+Inf'),))} {count}")
            lines.append(f"{self.name}_sum{_labels(labels)} {_number(total)}")
            lines.append(f"{self.name}_count{_labels(labels)} {count}")
        return lines


class Registry:
    """The families of one kubelet process, in registration order."""

    def __init__(self) -> None:
        self.families: dict[str, Family] = {}

    def add(self, name: str, kind: str, help: str, buckets: tuple[float, ...] = ()) -> Family:
        family = Family(name, kind, help, buckets)
        self.families[name] = family
        return family

    def get(self, name: str) -> Family | None:
        return self.families.get(name)

    def snapshot(self) -> dict[SeriesKey, Sample]:
        """Every series of every family now, keyed by ``(metric name, sorted label pairs)``: what
        a scrape would read, without the text format (``kubesim.standalone`` reads it so)."""
        out: dict[SeriesKey, Sample] = {}
        for family in self.families.values():
            out.update(family.snapshot())
        return out

    def text(self) -> str:
        lines: list[str] = []
        for family in self.families.values():
            lines += family.render()
        return "\n".join(lines) + "\n"
