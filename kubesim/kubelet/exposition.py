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


@dataclass
class Family:
    """One metric family: name, type, help, and its series by label set."""

    name: str
    kind: str  # counter | gauge | histogram
    help: str
    buckets: tuple[float, ...] = ()
    values: dict[Labels, float] = field(default_factory=dict)
    # histograms: per label set, the cumulative-free bucket counts, then sum and count
    observations: dict[Labels, tuple[list[int], float, int]] = field(default_factory=dict)

    def set(self, value: float, labels: Labels = ()) -> None:
        self.values[labels] = float(value)

    def only(self, value: float, labels: Labels) -> None:
        """A gauge vector that keeps one label set (the DKC gauges delete the previous one)."""
        self.values = {labels: float(value)}

    def inc(self, amount: float = 1.0, labels: Labels = ()) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def observe(self, value: float, labels: Labels = ()) -> None:
        counts, total, count = self.observations.get(labels) or ([0] * len(self.buckets), 0.0, 0)
        index = bisect_left(self.buckets, value)
        if index < len(counts):
            counts[index] += 1
        self.observations[labels] = (counts, total + value, count + 1)

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

    def text(self) -> str:
        lines: list[str] = []
        for family in self.families.values():
            lines += family.render()
        return "\n".join(lines) + "\n"
