"""The verdict rules of an analysis: a measurement, a check, a batch. Table-tested in
``tests/core/test_analysis_rules.py``.

1. A measurement whose query failed, or whose Prometheus stayed out of reach past
   ``outageTolerance``, is **inconclusive**: nothing was measured.
2. A query that returns no sample (or only NaN: a quantile over no observations) is what the
   check's ``noData`` says (``fail``, ``inconclusive`` or ``pass``); the policy must say it.
3. A condition against ``control`` compares every sample of the batch with the control cohort's
   value: the median of what the same query returns for the cohort in the same window. A control
   query without data falls under rule 2 too; with no cohort left (the last batch), the check is
   **skipped** for that batch and says so.
4. Otherwise the measurement **fails** when any sample breaks the condition, naming the samples
   (by their ``node`` label where the query is per node), and **passes** when none does.
5. A check **fails** once its failed measurements exceed ``failureLimit``, is **inconclusive**
   once its inconclusive ones exceed ``inconclusiveLimit``, and **passes** when it has taken
   ``count`` measurements without either.
6. The batch's analysis **fails** as soon as one gating check fails; once every check has a
   verdict it is **inconclusive** if a gating one is, else **passed**. ``dryRun`` checks are
   measured to the end and reported, and never gate.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from rollout.journal import AnalysisVerdict
from rollout.policy import AnalysisCheck, NoData

MAX_VALUES = 20  # samples kept per measurement, the worst first: the evidence stays small at 1,000 nodes
MAX_TEXT = 400


class MeasurementVerdict(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    SKIPPED = "skipped"  # compared against a control cohort that no longer exists


class CheckVerdict(str, enum.Enum):
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    SKIPPED = "skipped"


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


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def unreachable(check: AnalysisCheck, *, at: datetime, query: str, error: str) -> Measurement:
    """Rule 1: nothing could be measured."""
    return Measurement(check.name, at, MeasurementVerdict.INCONCLUSIVE, f"not measured: {error}"[:MAX_TEXT], query)


def _values(samples: Sequence[Sample]) -> list[tuple[str, float]]:
    return [(s.key, s.value) for s in samples if not math.isnan(s.value)]


def _no_data(check: AnalysisCheck, *, at: datetime, query: str, what: str, control_query: str = "") -> Measurement:
    verdict = {NoData.FAIL: MeasurementVerdict.FAIL, NoData.PASS: MeasurementVerdict.PASS,
               NoData.INCONCLUSIVE: MeasurementVerdict.INCONCLUSIVE}[check.no_data]
    return Measurement(check.name, at, verdict, f"{what} returned no data (noData: {check.no_data.value})", query,
                       control_query=control_query, no_data=True)


def judge(check: AnalysisCheck, *, at: datetime, query: str, samples: Sequence[Sample],
          control_query: str = "", control_samples: Sequence[Sample] | None = None) -> Measurement:
    """Rules 2-4: one measurement's verdict. ``control_samples`` is None when no cohort is left."""
    condition = check.parsed_condition
    values = _values(samples)
    if not values:
        return _no_data(check, at=at, query=query, what="the query", control_query=control_query)
    control: float | None = None
    if condition.compares_control:
        if control_samples is None:
            return Measurement(check.name, at, MeasurementVerdict.SKIPPED,
                               "no control cohort left (every taking-part node is assigned): not compared", query,
                               tuple(values[:MAX_VALUES]))
        control_values = [v for _, v in _values(control_samples)]
        if not control_values:
            return _no_data(check, at=at, query=query, what="the control cohort's query", control_query=control_query)
        control = statistics.median(control_values)
    bound = condition.bound(control)
    assert bound is not None  # a constant, or the control's value just computed
    broken = sorted(((k, v) for k, v in values if not condition.holds(v, bound)), key=lambda kv: -abs(kv[1] - bound))
    kept = tuple((broken + [kv for kv in values if kv not in broken])[:MAX_VALUES])
    against = f"{_fmt(bound)}" if control is None else f"{_fmt(bound)} ({condition.text.split(None, 1)[1]}, " \
        f"control {_fmt(control)})"
    if broken:
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in broken[:5]) + (f" and {len(broken) - 5} more"
                                                                       if len(broken) > 5 else "")
        reason = f"{shown}: not {condition.op} {against}"
        nodes = tuple(sorted(s.labels["node"] for s in samples if "node" in s.labels
                             and (s.labels["node"], s.value) in broken))
        return Measurement(check.name, at, MeasurementVerdict.FAIL, reason[:MAX_TEXT], query, kept, control_query,
                           control, bound, nodes)
    worst = max(values, key=lambda kv: kv[1])
    reason = f"{len(values)} value(s) {condition.op} {against} (highest {worst[0]}={_fmt(worst[1])})"
    return Measurement(check.name, at, MeasurementVerdict.PASS, reason[:MAX_TEXT], query, kept, control_query,
                       control, bound)


@dataclass(frozen=True)
class CheckStatus:
    """A check's verdict so far, and the measurement that decided it."""

    verdict: CheckVerdict
    reason: str = ""
    nodes: tuple[str, ...] = ()


def check_verdict(check: AnalysisCheck, *, taken: int, failures: int, inconclusive: int, skipped: int,
                  last: Measurement | None) -> CheckStatus:
    """Rule 5, from the check's counts and its last measurement."""
    why = last.reason if last is not None else ""
    if failures > check.failure_limit:
        nodes = last.nodes if last is not None else ()
        return CheckStatus(CheckVerdict.FAILED, f"{failures} of {taken} measurement(s) failed "
                           f"(failureLimit {check.failure_limit}); last: {why}", nodes)
    if inconclusive > check.inconclusive_limit:
        return CheckStatus(CheckVerdict.INCONCLUSIVE, f"{inconclusive} of {taken} measurement(s) inconclusive "
                           f"(inconclusiveLimit {check.inconclusive_limit}); last: {why}")
    if taken >= check.count:
        if skipped == taken:
            return CheckStatus(CheckVerdict.SKIPPED, why)
        return CheckStatus(CheckVerdict.PASSED, f"{taken - failures - inconclusive - skipped} of {taken} "
                           f"measurement(s) passed; last: {why}")
    return CheckStatus(CheckVerdict.RUNNING, f"{taken}/{check.count} measured")


@dataclass(frozen=True)
class BatchAnalysis:
    """Rule 6: the batch's analysis (``verdict`` None while it runs)."""

    verdict: AnalysisVerdict | None
    reason: str
    nodes: tuple[str, ...] = ()


def batch_analysis(checks: Sequence[AnalysisCheck], statuses: Mapping[str, CheckStatus]) -> BatchAnalysis:
    gating = [c for c in checks if not c.dry_run]
    failed = [c.name for c in gating if statuses[c.name].verdict is CheckVerdict.FAILED]
    if failed:
        nodes = tuple(sorted({n for name in failed for n in statuses[name].nodes}))
        reason = "; ".join(f"check {name} failed: {statuses[name].reason}" for name in failed)
        return BatchAnalysis(AnalysisVerdict.FAILED, reason[:MAX_TEXT], nodes)
    running = [c.name for c in checks if statuses[c.name].verdict is CheckVerdict.RUNNING]
    if running:  # dry-run checks too: they are measured to the end, and reported
        return BatchAnalysis(None, "measuring " + ", ".join(running))
    unsure = [c.name for c in gating if statuses[c.name].verdict is CheckVerdict.INCONCLUSIVE]
    if unsure:
        reason = "; ".join(f"check {name} inconclusive: {statuses[name].reason}" for name in unsure)
        return BatchAnalysis(AnalysisVerdict.INCONCLUSIVE, reason[:MAX_TEXT])
    passed = ", ".join(f"{c.name} {statuses[c.name].verdict.value}" for c in gating) or "no gating check"
    return BatchAnalysis(AnalysisVerdict.PASSED, f"every check passed ({passed})"[:MAX_TEXT])
