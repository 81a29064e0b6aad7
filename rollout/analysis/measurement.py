"""What one measurement of a check is, as the rules give it and the evidence keeps it: the samples a
query returns, the verdict, and a ``compare:`` check's test and estimate (``Comparison``). Split
from ``rollout.analysis.rules`` (which re-exports them), where the verdicts are decided.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from rollout.analysis.stats import Direction, Summary, change_test


class MeasurementVerdict(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    SKIPPED = "skipped"  # compared against a control cohort that no longer exists


@dataclass(frozen=True)
class Sample:
    """One element of a PromQL instant vector."""

    labels: Mapping[str, str]
    value: float

    @property
    def key(self) -> str:
        """Who the value is about: its node where the query kept the label, else its labels."""
        if "node" in self.labels:
            return self.labels["node"]
        return ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()) if k != "__name__") or "value"


@dataclass(frozen=True)
class Comparison:
    """How a ``compare:`` measurement judged the batch against the control cohort (rule 4)."""

    test: str  # "mann-whitney", or "t" (baseline: before: the nodes' changes, rule 4b)
    method: str  # the p-value's: "exact" or "normal"; "pooled" for the t test (its variance), or "worst node"
    harmful: Direction
    u: float  # the test's statistic: U, or t
    p_value: float  # one-sided, in the harmful direction
    confidence: float
    relative: bool  # the shift is the ratio batch / control (judged on a log scale), else batch - control
    shift: float  # the Hodges-Lehmann estimate
    low: float  # its interval at ``interval_confidence``
    high: float
    interval_confidence: float  # the check's effectConfidence, else its confidence (Compare.interval_confidence)
    band: float  # the largest shift tolerated: a ratio (1.2, or 1/1.2 where lower is harmful) or an amount
    batch: Summary  # the t test: of the nodes' changes (n nodes), as ratios or amounts
    control: Summary
    drivers: tuple[str, ...] = ()  # batch nodes whose median is beyond the band, worst first (else the worst)

    @property
    def of_changes(self) -> bool:
        """Rule 4b: the nodes' changes from their window before, not the cohorts' values."""
        return self.test == "t"

    def amount(self, value: float) -> str:
        """A shift as the evidence writes it: x1.43 (a ratio) or +0.42 (an amount)."""
        return f"x{value:.3g}" if self.relative else f"{value:+.3g}"

    @property
    def significant(self) -> bool:
        """The test rejects "no harmful shift" at the confidence."""
        return self.p_value <= 1 - self.confidence

    @property
    def beyond_band(self) -> bool:
        """The shift's whole interval lies beyond the band, the harmful way."""
        return self.low > self.band if self.harmful is Direction.HIGHER else self.high < self.band

    @property
    def fails(self) -> bool:
        """Rule 4: both."""
        return self.significant and self.beyond_band

    def worst_node_alone(self, node: str, change: float, control: list[float],
                         natural: Callable[[float], float]) -> Comparison | None:
        """Rule 4b's ``worstNode`` test of this pooled one's batch: its worst ``node`` (its ``change``,
        on the judged scale) alone against the control's prediction interval, the confidence shared
        among the batch's nodes (Bonferroni: the p-value times their number, the interval at
        1 - (1 - its confidence) / their number); that Comparison where it fails, else None."""
        nodes = self.batch.n
        level = 1 - (1 - self.interval_confidence) / nodes
        test = change_test([change], control, direction=self.harmful, confidence=level)
        alone = dataclasses.replace(
            self, method="worst node", u=test.t, p_value=min(1.0, test.p_value * nodes),
            shift=natural(test.estimate), low=natural(test.low), high=natural(test.high), drivers=(node,),
            interval_confidence=level)
        return alone if alone.fails else None

    def describe(self) -> str:
        """The test, its statistic, the shift against the band, both cohorts (the measurement's reason)."""
        if self.of_changes:  # rule 4b: the pooled t test, or worstNode's of one node (Bonferroni)
            alone = self.method == "worst node"
            subject, bonferroni, df, how, whose, level = (
                (f"the worst of {self.batch.n} nodes' change from its window before ({self.drivers[0]})",
                 f" (x{self.batch.n}, Bonferroni)", self.control.n - 1, "the control's prediction interval", "its",
                 f"{self.interval_confidence:.3g}") if alone else
                ("the nodes' changes from their window before", "", self.batch.n + self.control.n - 2, self.method,
                 "the batch's", f"{self.interval_confidence:g}"))
            return (f"t test of {subject}: p={self.p_value:.2g}{bonferroni} {'<=' if self.significant else '>'} "
                    f"{1 - self.confidence:.2g} (t={self.u:.3g}, {df} df, {how}); {whose} change beyond the "
                    f"control's {self.amount(self.shift)} ({level} interval {self.amount(self.low)}.."
                    f"{self.amount(self.high)}) {'beyond' if self.beyond_band else 'not wholly beyond'} the band "
                    f"{self.amount(self.band)}; batch {self.batch.n} node(s) changed median "
                    f"{self.amount(self.batch.median)}, control {self.control.n} median "
                    f"{self.amount(self.control.median)} p95 {self.amount(self.control.p95)}")
        return (f"{self.test} p={self.p_value:.2g} {'<=' if self.significant else '>'} {1 - self.confidence:.2g} "
                f"(U={self.u:g}, {self.method}); shift {self.amount(self.shift)} ({self.interval_confidence:g} interval "
                f"{self.amount(self.low)}..{self.amount(self.high)}) "
                f"{'beyond' if self.beyond_band else 'not wholly beyond'} the band {self.amount(self.band)}; "
                f"batch n={self.batch.n} median {fmt(self.batch.median)} p95 {fmt(self.batch.p95)}, "
                f"control n={self.control.n} median {fmt(self.control.median)} p95 {fmt(self.control.p95)}")


@dataclass(frozen=True)
class Measurement:
    """One measurement of one check, as kept in the evidence."""

    check: str
    at: datetime
    verdict: MeasurementVerdict
    reason: str
    query: str
    values: tuple[tuple[str, float], ...] = ()  # (who, value), the worst first
    control_query: str = ""
    control: float | None = None
    bound: float | None = None
    nodes: tuple[str, ...] = ()  # the nodes whose value broke the condition
    no_data: bool = False
    comparison: Comparison | None = None  # a compare: check's test and estimate


def fmt(value: float) -> str:
    return f"{value:.4g}"
