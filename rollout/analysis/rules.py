"""The verdict rules of an analysis: a measurement, a check, a batch. Table-tested in
``tests/core/test_analysis_rules.py`` and, for ``compare:`` checks, ``test_analysis_compare.py``
(over histogram buckets: ``test_analysis_buckets.py``).

1. A measurement whose query failed, or whose Prometheus stayed out of reach past
   ``outageTolerance``, is **inconclusive**: nothing was measured.
2. A query that returns no sample (or only NaN: a quantile over no observations) is what the
   check's ``noData`` says (``fail``, ``inconclusive`` or ``pass``); the policy must say it.
3. A condition against ``control`` (without ``compare:``) compares the batch's median sample with
   the control cohort's value: the median of what the same query returns for the cohort in the
   same window. The median, not every sample: a config changes every node of a batch alike, while
   hosts differ on their own, so in a batch of ten one node among the control's tail would fail
   every other healthy batch; the nodes beyond the bound are named when the median fails. A
   control query without data falls under rule 2 too; with no cohort left (the last batch), the
   check is **skipped** for that batch and says so, as is a check whose query itself reads the
   cohort (``{{control}}``: a node's allocatable against what the control's nodes hold). So is
   any check against the cohort when fewer than ``CONTROL_FLOOR`` (5) of its nodes are left after
   the canary: the median of two or four hosts is no level (bench/README.md, "A floor under the
   control cohort"), and the batches before have judged the config against larger ones. A canary batch is judged against whatever cohort it has: on a
   small pool there is no larger one to come.
4. A check with ``compare:`` judges the batch's samples against the control cohort's as two
   samples (per pod where the query keeps them, per node otherwise; where it returns histogram
   buckets, samples with an ``le`` label, per observation: each series' cumulative counts become
   its observations, rounded, valued at their bucket's upper bound, the ``+Inf`` bucket's at the
   largest finite one, and a cohort of more than ``MAX_OBSERVATIONS`` is tested on that many, every
   bucket scaled alike; a set that is no histogram, counts that decrease or an ``le`` that is no
   number, is **inconclusive**, saying why): a one-sided Mann-Whitney U test in the harmful
   direction (the condition's operator: ``<= control``, higher is harmful; ``>= control``, lower
   is) and the Hodges-Lehmann estimate of the shift, a ratio on a log scale for a relative
   ``effect`` (``"20%"``: 1.2x, or 1/1.2x where lower is harmful), a difference for an amount. The
   measurement **fails** only when the test's p-value is at most 1 - ``confidence`` *and* the estimate's
   whole interval (two-sided, at ``effectConfidence``, by default ``confidence``) lies beyond the effect
   band, as Kayenta's judge asks; otherwise it **passes**. The interval's bound, not the point estimate:
   the test takes a node's pods as independent samples, and they are not quite (they share the
   host), so a canary on a slow host would fail several times more often than 1 - ``confidence``
   with the point estimate; the bound keeps that rare. Not rare enough on a fleet (measured:
   bench/judge_quality.py): a node's pod starts in a window are few and share their image pulls, so
   where the samples are clustered by node (more values than nodes, and the control cohort has
   at least ``HOST_SPREAD_NODES`` nodes), the batch's median node must also lie beyond *every*
   control node's own median by the band (the slowest control host where higher is harmful): a
   canary no slower than the control's slowest host fails nothing. Fewer than ``minSamples`` (5) values in
   either cohort (or too few for the test ever to reach the confidence) is what ``noData`` says; a
   relative effect over a negative value is **inconclusive**. The evidence names the test, U, the
   p-value, the estimate and its interval, both cohorts' n/median/p95 (of every observation, before
   any cap) and the batch nodes that drove it (those whose own median is beyond the band, else the
   worst one).
4b. A ``compare:`` check with ``baseline: before`` judges change, not level (a difference in
   differences): each node's values in the window are set against its own in a window as long
   before the batch's first write (the same query, each ``[{{window}}]`` range or subquery read
   that much earlier: ``check_before_queries``), the batch nodes' changes against the control's.
   A node's change is the mean of its values after minus the mean before, on the judged scale
   (a log for a relative ``effect``: the ratio of its geometric means; an amount otherwise), of
   each observation where the query returns histogram buckets (a node needs ``minSamples`` in each
   window), of each sample otherwise (one or more). The test is a one-sided two-sample t test, the
   node the unit (its pods share its host and its image pulls: not independent samples), the
   variance pooled (under "no harm" a batch node changes as a control node does, so a one-node
   canary is judged by the control's spread of changes: a prediction interval), and the interval
   of the difference of the mean changes is two-sided at ``effectConfidence``. It **fails** when both
   the p-value is at most 1 - ``confidence`` and the interval lies beyond the effect band, as rule 4;
   a host that was as slow before the write and a fleet-wide shift that moves the control's nodes
   too both cancel. A harm some of a canary's nodes show only (a starved runtime, where the pods
   keep the CPUs busy) is diluted by their mean: with ``worstNode``, where the pooled test passes
   a canary of several nodes, its worst node alone is judged so too (``Comparison.worst_node_alone``,
   Bonferroni). Only where asked: a node's change in pod starts is heavy-tailed, and the worst of a
   few harmless nodes falls outside the control's prediction interval far more often than that.
   No batch node or fewer than ``HOST_SPREAD_NODES`` control nodes with values in both windows is
   what ``noData`` says; the window before not measured, buckets that are no histogram, or a value
   of 0 or less under a relative effect are **inconclusive**. The evidence names the t test (pooled, or the worst node's), t, its degrees of
   freedom, the p-value, the difference of the changes with its interval and the band, both
   cohorts' node count and median change (the control's p95 too), and the batch nodes whose change
   is beyond the control's mean change by the band (else the worst).
5. Otherwise the measurement **fails** when any sample breaks the condition, naming the samples
   (by their ``node`` label where the query is per node), and **passes** when none does.
6. A check **fails** once its failed measurements exceed ``failureLimit``, is **inconclusive**
   once its inconclusive ones exceed ``inconclusiveLimit``, and **passes** when it has taken
   ``count`` measurements without either.
7. The batch's analysis **fails** as soon as one gating check fails; once every check has a
   verdict it is **inconclusive** if a gating one is, else **passed**. ``dryRun`` checks are
   measured to the end and reported, and never gate.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from rollout.analysis.stats import (Direction, Summary, bucket_observations, capped_counts, change_test,
                                    counts_quantile, difference, expanded, hodges_lehmann, log_scale,
                                    mann_whitney, merged_counts, smallest_p_value, summarize, summarize_counts)
from rollout.analysis.measurement import Comparison as Comparison
from rollout.analysis.measurement import Measurement as Measurement
from rollout.analysis.measurement import MeasurementVerdict as MeasurementVerdict
from rollout.analysis.measurement import Sample as Sample
from rollout.analysis.measurement import fmt
from rollout.journal import AnalysisVerdict
from rollout.policy import AnalysisCheck, Baseline, Compare, NoData

MAX_VALUES = 20  # samples kept per measurement, the worst first: the evidence stays small at 1,000 nodes
MAX_TEXT = 400
MAX_DRIVERS = 5  # batch nodes named as having driven a compared measurement
HOST_SPREAD_NODES = 5  # control nodes needed to measure how much hosts differ (rule 4)
CONTROL_FLOOR = HOST_SPREAD_NODES  # control nodes a batch after the canary is judged against, at least (rule 3)
# observations a cohort's histogram is tested on, at most: the test takes a few milliseconds
# whatever the fleet (1,000 nodes relisting every second give 60,000 a minute)
MAX_OBSERVATIONS = 5_000


class CheckVerdict(str, enum.Enum):
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    SKIPPED = "skipped"


def unreachable(check: AnalysisCheck, *, at: datetime, query: str, error: str) -> Measurement:
    """Rule 1: nothing could be measured."""
    return Measurement(check.name, at, MeasurementVerdict.INCONCLUSIVE, f"not measured: {error}"[:MAX_TEXT], query)


def _values(samples: Sequence[Sample]) -> list[tuple[str, float]]:
    return [(s.key, s.value) for s in samples if not math.isnan(s.value)]


def _no_data(check: AnalysisCheck, *, at: datetime, query: str, what: str, control_query: str = "") -> Measurement:
    verdict = {NoData.FAIL: MeasurementVerdict.FAIL, NoData.PASS: MeasurementVerdict.PASS,
               NoData.INCONCLUSIVE: MeasurementVerdict.INCONCLUSIVE}[check.no_data]
    return Measurement(check.name, at, verdict, f"{what} (noData: {check.no_data.value})"[:MAX_TEXT], query,
                       control_query=control_query, no_data=True)


NO_COHORT = "no control cohort left (every taking-part node is assigned): not compared"


def skipped_for_its_cohort(check: AnalysisCheck, *, at: datetime, query: str, control_nodes: int | None,
                           canary: bool) -> Measurement | None:
    """A check against the control cohort not compared in this batch (rule 3; ``control_nodes``
    None: not said), known before any query is asked; else None."""
    if control_nodes is None or not (check.reads_control or check.parsed_condition.compares_control):
        return None
    if control_nodes == 0:
        return Measurement(check.name, at, MeasurementVerdict.SKIPPED, NO_COHORT, query)
    if control_nodes < CONTROL_FLOOR and not canary:
        return Measurement(check.name, at, MeasurementVerdict.SKIPPED, f"{control_nodes} control node(s) left, "
                           f"fewer than {CONTROL_FLOOR}: their median is no level to judge a batch after the "
                           f"canary by; not compared", query)
    return None


def judge(check: AnalysisCheck, *, at: datetime, query: str, samples: Sequence[Sample],
          control_query: str = "", control_samples: Sequence[Sample] | None = None,
          before_samples: Sequence[Sample] | None = None,
          control_before_samples: Sequence[Sample] | None = None, control_nodes: int | None = None,
          canary: bool = False) -> Measurement:
    """Rules 2-5: one measurement's verdict. ``control_samples`` is None when no cohort is left;
    ``control_nodes``, the cohort's size, and ``canary``, whether the batch is a canary, say whether
    a check against the cohort is compared at all (``skipped_for_its_cohort``); ``before_samples`` and
    ``control_before_samples`` are what a ``baseline: before`` check's query returns for the window
    before (``check_before_queries``), None when not measured."""
    condition = check.parsed_condition
    skipped = skipped_for_its_cohort(check, at=at, query=query, control_nodes=control_nodes, canary=canary)
    if skipped is not None:
        return skipped
    values = _values(samples)
    if not values:
        return _no_data(check, at=at, query=query, what="the query returned no data", control_query=control_query)
    control: float | None = None
    if condition.compares_control:
        if control_samples is None:
            return Measurement(check.name, at, MeasurementVerdict.SKIPPED,
                               NO_COHORT, query,
                               tuple(values[:MAX_VALUES]))
        control_values = [v for _, v in _values(control_samples)]
        if not control_values:
            return _no_data(check, at=at, query=query, what="the control cohort's query returned no data",
                            control_query=control_query)
        if check.compare is not None and check.compare.baseline is Baseline.BEFORE:
            if before_samples is None or control_before_samples is None:
                return Measurement(check.name, at, MeasurementVerdict.INCONCLUSIVE,
                                   "baseline: before, and the window before was not measured", query,
                                   control_query=control_query)
            return _changed(check, check.compare, at=at, query=query, control_query=control_query,
                            cohorts=((samples, before_samples), (control_samples, control_before_samples)),
                            canary=canary)
        if check.compare is not None:
            return _compared(check, check.compare, at=at, query=query, samples=samples,
                             control_samples=control_samples, control_query=control_query)
        control = statistics.median(control_values)
    bound = condition.bound(control)
    assert bound is not None  # a constant, or the control's value just computed
    broken = sorted(((k, v) for k, v in values if not condition.holds(v, bound)), key=lambda kv: -abs(kv[1] - bound))
    kept = tuple((broken + [kv for kv in values if kv not in broken])[:MAX_VALUES])
    against = f"{fmt(bound)}" if control is None else f"{fmt(bound)} ({condition.text.split(None, 1)[1]}, " \
        f"control {fmt(control)})"
    median = statistics.median(v for _, v in values)
    if broken and control is not None and condition.holds(median, bound):  # rule 3: the batch's median node
        reason = f"the batch's median {fmt(median)} {condition.op} {against} ({len(broken)} of {len(values)} " \
            f"beyond it, e.g. {broken[0][0]}={fmt(broken[0][1])})"
        return Measurement(check.name, at, MeasurementVerdict.PASS, reason[:MAX_TEXT], query, kept, control_query,
                           control, bound)
    if broken:
        shown = ", ".join(f"{k}={fmt(v)}" for k, v in broken[:5]) + (f" and {len(broken) - 5} more"
                                                                       if len(broken) > 5 else "")
        median_text = f" (the batch's median {fmt(median)})" if control is not None and len(values) > 1 else ""
        reason = f"{shown}: not {condition.op} {against}{median_text}"
        nodes = tuple(sorted(s.labels["node"] for s in samples if "node" in s.labels
                             and (s.labels["node"], s.value) in broken))
        return Measurement(check.name, at, MeasurementVerdict.FAIL, reason[:MAX_TEXT], query, kept, control_query,
                           control, bound, nodes)
    worst = max(values, key=lambda kv: kv[1])
    reason = f"{len(values)} value(s) {condition.op} {against} (highest {worst[0]}={fmt(worst[1])})"
    return Measurement(check.name, at, MeasurementVerdict.PASS, reason[:MAX_TEXT], query, kept, control_query,
                       control, bound)


@dataclass(frozen=True)
class _Cohort:
    """One cohort as rule 4 tests it."""

    tested: list[float]  # the values the test takes (a histogram's observations, capped)
    summary: Summary  # of every value, before any cap
    medians: dict[str, float]  # each node's (or series')
    nodes: frozenset[str]  # which of those are nodes


def _cohort(samples: Sequence[Sample]) -> _Cohort:
    kept = [s for s in samples if not math.isnan(s.value)]
    values = [s.value for s in kept]
    return _Cohort(values, summarize(values), _medians(kept),
                   frozenset(s.labels["node"] for s in kept if "node" in s.labels))


def _histogram(samples: Sequence[Sample]) -> _Cohort:
    """A cohort whose samples are histogram buckets: each series' observations (raises ValueError,
    saying why, for a set that is no histogram)."""
    by_who, nodes = _bucket_counts(samples)
    every = merged_counts(by_who.values())
    return _Cohort(expanded(capped_counts(every, MAX_OBSERVATIONS)), summarize_counts(every),
                   {k: counts_quantile(c, 0.5) for k, c in by_who.items() if c}, frozenset(nodes))


def _bucket_counts(samples: Sequence[Sample]) -> tuple[dict[str, dict[float, int]], set[str]]:
    """Each node's (or series') observations from histogram buckets, and which of them are nodes
    (raises ValueError, saying why, for a set that is no histogram)."""
    series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    for s in samples:
        if "le" not in s.labels:
            raise ValueError(f"{s.key} has no le label, beside bucket series that have one")
        try:
            bound = float(s.labels["le"])
        except ValueError:
            raise ValueError(f"{s.key}: le={s.labels['le']!r} is not a number") from None
        who = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("le", "__name__")))
        series.setdefault(who, []).append((bound, s.value))
    by_who: dict[str, dict[float, int]] = {}
    nodes: set[str] = set()
    for who, buckets in series.items():
        labels = dict(who)
        name = labels.get("node") or ",".join(f"{k}={v}" for k, v in who) or "value"
        try:
            counts = bucket_observations(buckets)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        by_who[name] = merged_counts((by_who.get(name, {}), counts))  # a node's series together
        if "node" in labels:
            nodes.add(name)
    return by_who, nodes


def _compared(check: AnalysisCheck, compare: Compare, *, at: datetime, query: str, samples: Sequence[Sample],
              control_samples: Sequence[Sample], control_query: str) -> Measurement:
    """Rule 4: the batch's samples against the control cohort's, by the test and the band."""
    binned = any("le" in s.labels for s in (*samples, *control_samples))
    cohorts = []
    for which, given in (("batch", samples), ("control cohort", control_samples)):
        try:
            cohorts.append(_histogram(given) if binned else _cohort(given))
        except ValueError as exc:
            return Measurement(check.name, at, MeasurementVerdict.INCONCLUSIVE,
                               f"the {which}'s histogram buckets are malformed: {exc}"[:MAX_TEXT], query,
                               control_query=control_query)
    batch, control = cohorts
    xs, ys = batch.tested, control.tested
    n1, n2 = len(xs), len(ys)
    if min(n1, n2) < compare.min_samples or smallest_p_value(n1, n2) > 1 - compare.confidence:
        return _no_data(check, at=at, query=query, control_query=control_query,
                        what=f"too few values to compare: batch {n1}, control {n2} ({compare.test.value} needs at "
                             f"least {compare.min_samples} in each, and enough for a p-value of "
                             f"{1 - compare.confidence:.2g})")
    lowest = min(min(xs), min(ys))
    if compare.relative and lowest < 0:  # a ratio of a negative value means nothing
        return Measurement(check.name, at, MeasurementVerdict.INCONCLUSIVE,
                           f"a relative effect ({compare.effect}) needs values of at least 0, got {lowest:.4g}: say "
                           "the effect as an amount", query, control_query=control_query)
    harmful = Direction.LOWER if check.parsed_condition.op in (">", ">=") else Direction.HIGHER
    sign = 1 if harmful is Direction.HIGHER else -1
    scale = log_scale if compare.relative else float
    band = math.log(compare.band) if compare.relative else compare.band  # on the scale shifts are judged on
    test = mann_whitney(xs, ys, direction=harmful)
    shift = hodges_lehmann([scale(v) for v in xs], [scale(v) for v in ys], confidence=compare.interval_confidence)
    control_median = control.summary.median

    def harm(value: float) -> float:  # how far a value is beyond the control's median, the harmful way
        return sign * difference(scale(value), scale(control_median))

    by_node = sorted(((k, m) for k, m in batch.medians.items() if k in batch.nodes), key=lambda km: -harm(km[1]))
    drivers = tuple(k for k, m in by_node if harm(m) > band)[:MAX_DRIVERS] or tuple(k for k, _ in by_node[:1])
    natural = math.exp if compare.relative else float  # the shift as people read it: a ratio, or an amount
    comparison = Comparison(
        compare.test.value, test.method, harmful, test.u, test.p_value, compare.confidence, compare.relative,
        natural(shift.estimate), natural(shift.low), natural(shift.high), compare.interval_confidence,
        natural(sign * band), batch.summary, control.summary, drivers)
    kept = tuple(sorted(batch.medians.items(), key=lambda km: -harm(km[1]))[:MAX_VALUES])
    bound = natural(scale(control_median) + sign * band)  # the median beyond which a node drives the shift
    hosts = _beyond_hosts(batch, control, scale=scale, sign=sign, band=band)
    if comparison.fails and hosts is not None and not hosts[0]:
        why = f"the batch's median node is not beyond the spread of the control's hosts: {hosts[1]}"
        return Measurement(check.name, at, MeasurementVerdict.PASS, f"no harmful shift ({why}); "
                           f"{comparison.describe()}"[:MAX_TEXT], query, kept, control_query, control_median, bound,
                           comparison=comparison)
    if comparison.fails:
        spread = f"; {hosts[1]}" if hosts is not None else ""
        reason = f"{harmful.value} than the control beyond the band: {comparison.describe()}{spread}; driven by " \
            f"{', '.join(drivers) or '-'}"
        return Measurement(check.name, at, MeasurementVerdict.FAIL, reason[:MAX_TEXT], query, kept, control_query,
                           control_median, bound, drivers, comparison=comparison)
    why = "not wholly beyond the band" if comparison.significant else "not significant"
    return Measurement(check.name, at, MeasurementVerdict.PASS, f"no harmful shift ({why}): {comparison.describe()}"
                       [:MAX_TEXT], query, kept, control_query, control_median, bound, comparison=comparison)


def _node_values(samples: Sequence[Sample], binned: bool) -> dict[str, dict[float, int]]:
    """Each node's (or series') values, and how often each was seen: a histogram's observations,
    else its samples (a per-pod query keeps several a node). Raises ValueError for buckets that
    are no histogram."""
    if binned:
        return _bucket_counts(samples)[0]
    out: dict[str, dict[float, int]] = {}
    for s in samples:
        if not math.isnan(s.value):
            counts = out.setdefault(s.key, {})
            counts[s.value] = counts.get(s.value, 0) + 1
    return out


def _mean(counts: Mapping[float, int], scale: Callable[[float], float]) -> float:
    return sum(c * scale(v) for v, c in counts.items()) / sum(counts.values())


def _changed(check: AnalysisCheck, compare: Compare, *, at: datetime, query: str, control_query: str,
             cohorts: tuple[tuple[Sequence[Sample], Sequence[Sample]], ...], canary: bool = False) -> Measurement:
    """Rule 4b: each node's change from its window before (``cohorts``: the batch's samples and
    its before, the control's and its before), the batch nodes' changes against the control's."""
    binned = any("le" in s.labels for pair in cohorts for given in pair for s in given)
    least = compare.min_samples if binned else 1  # a node's values in each window: a mean of fewer is noise
    scale = log_scale if compare.relative else float
    changes: list[dict[str, float]] = []
    for which, (after, before) in zip(("batch", "control cohort"), cohorts):
        try:
            now, then = _node_values(after, binned), _node_values(before, binned)
        except ValueError as exc:
            return Measurement(check.name, at, MeasurementVerdict.INCONCLUSIVE,
                               f"the {which}'s histogram buckets are malformed: {exc}"[:MAX_TEXT], query,
                               control_query=control_query)
        lowest = min((v for counts in (*now.values(), *then.values()) for v in counts), default=1.0)
        if compare.relative and lowest <= 0:  # a mean on a log scale of a 0 is -inf: no ratio
            return Measurement(check.name, at, MeasurementVerdict.INCONCLUSIVE,
                               f"a relative effect ({compare.effect}) compares the nodes' changes as ratios, and the "
                               f"{which} has a value of {lowest:.4g}: say the effect as an amount"[:MAX_TEXT], query,
                               control_query=control_query)
        changes.append({who: _mean(now[who], scale) - _mean(then[who], scale) for who in sorted(now.keys() & then.keys())
                        if sum(now[who].values()) >= least and sum(then[who].values()) >= least})
    batch, control = changes
    if not batch or len(control) < HOST_SPREAD_NODES:
        return _no_data(check, at=at, query=query, control_query=control_query,
                        what=f"too few nodes with {least} or more value(s) in both windows to compare their changes: "
                             f"batch {len(batch)}, control {len(control)} (at least 1 and {HOST_SPREAD_NODES})")
    harmful = Direction.LOWER if check.parsed_condition.op in (">", ">=") else Direction.HIGHER
    sign = 1 if harmful is Direction.HIGHER else -1
    band = math.log(compare.band) if compare.relative else compare.band  # on the scale changes are judged on
    test = change_test(list(batch.values()), list(control.values()), direction=harmful,
                       confidence=compare.interval_confidence)  # the p-value does not depend on it
    natural = math.exp if compare.relative else float  # a change as people read it: a ratio, or an amount
    control_mean = statistics.fmean(control.values())

    def harm(change: float) -> float:  # how far a node's change is beyond the control's, the harmful way
        return sign * (change - control_mean)

    def summary(values: Sequence[float]) -> Summary:
        ordered = summarize(values)
        return Summary(ordered.n, natural(ordered.median), natural(ordered.p95))

    by_node = sorted(batch.items(), key=lambda kc: -harm(kc[1]))
    drivers = tuple(k for k, c in by_node if harm(c) > band)[:MAX_DRIVERS] or tuple(k for k, _ in by_node[:1])
    comparison = Comparison(
        "t", "pooled", harmful, test.t, test.p_value, compare.confidence, compare.relative, natural(test.estimate),
        natural(test.low), natural(test.high), compare.interval_confidence, natural(sign * band),
        summary(list(batch.values())), summary(list(control.values())), drivers)
    if compare.worst_node and canary and not comparison.fails and len(batch) > 1:  # their mean dilutes one node's harm
        comparison = comparison.worst_node_alone(*by_node[0], list(control.values()), natural) or comparison
    drivers = comparison.drivers
    kept = tuple((k, natural(c)) for k, c in by_node[:MAX_VALUES])  # each batch node's change, the worst first
    bound = natural(control_mean + sign * band)  # the change beyond which a batch node drives it
    if comparison.fails:
        reason = f"{harmful.value} than the control beyond the band: {comparison.describe()}; driven by " \
            f"{', '.join(drivers) or '-'}"
        return Measurement(check.name, at, MeasurementVerdict.FAIL, reason[:MAX_TEXT], query, kept, control_query,
                           natural(control_mean), bound, drivers, comparison=comparison)
    why = "not wholly beyond the band" if comparison.significant else "not significant"
    return Measurement(check.name, at, MeasurementVerdict.PASS, f"no harmful change ({why}): "
                       f"{comparison.describe()}"[:MAX_TEXT], query, kept, control_query, natural(control_mean), bound,
                       comparison=comparison)


def _beyond_hosts(batch: _Cohort, control: _Cohort, *, scale: Callable[[float], float], sign: int,
                  band: float) -> tuple[bool, str] | None:
    """Rule 4's host guard: is the batch's median node beyond every control node's median by the
    band? None where it does not apply (values not clustered by node, or too few control nodes).
    Every node, not a robust spread: a host's window is slow now and then (a large image pulled
    while the pods behind it wait), the control's nodes show how slow, and a spread that ignores
    its tail would blame the canary for a slow window of its own."""
    batch_nodes = [scale(m) for k, m in batch.medians.items() if k in batch.nodes]
    control_nodes = [scale(m) for k, m in control.medians.items() if k in control.nodes]
    clustered = len(batch.tested) > len(batch_nodes) and len(control.tested) > len(control_nodes)
    if not batch_nodes or len(control_nodes) < HOST_SPREAD_NODES or not clustered:
        return None
    worst = max(sign * v for v in control_nodes)
    shift = sign * statistics.median(batch_nodes) - worst
    return shift > band, (f"hosts: the batch's median node {shift:+.3g} beyond the worst of {len(control_nodes)} "
                          f"control hosts, against the band {band:.3g} (on the judged scale)")


def _medians(samples: Sequence[Sample]) -> dict[str, float]:
    """Each series' or node's median (a per-pod query keeps many samples per node)."""
    grouped: dict[str, list[float]] = {}
    for s in samples:
        grouped.setdefault(s.key, []).append(s.value)
    return {k: statistics.median(v) for k, v in grouped.items()}


@dataclass(frozen=True)
class CheckStatus:
    """A check's verdict so far, and the measurement that decided it."""

    verdict: CheckVerdict
    reason: str = ""
    nodes: tuple[str, ...] = ()


def check_verdict(check: AnalysisCheck, *, taken: int, failures: int, inconclusive: int, skipped: int,
                  last: Measurement | None) -> CheckStatus:
    """Rule 6, from the check's counts and its last measurement; one whose last measurement failed is
    measured again (at most ``failureLimit`` more times) until one does not: a harm begun late is confirmed."""
    why = last.reason if last is not None else ""
    if failures > check.failure_limit:
        nodes = last.nodes if last is not None else ()
        return CheckStatus(CheckVerdict.FAILED, f"{failures} of {taken} measurement(s) failed "
                           f"(failureLimit {check.failure_limit}); last: {why}", nodes)
    if inconclusive > check.inconclusive_limit:
        return CheckStatus(CheckVerdict.INCONCLUSIVE, f"{inconclusive} of {taken} measurement(s) inconclusive "
                           f"(inconclusiveLimit {check.inconclusive_limit}); last: {why}")
    if taken >= check.count and last is not None and last.verdict is MeasurementVerdict.FAIL:
        return CheckStatus(CheckVerdict.RUNNING, f"{taken}/{check.count} measured, the last failed: measured again")
    if taken >= check.count:
        if skipped == taken:
            return CheckStatus(CheckVerdict.SKIPPED, why)
        return CheckStatus(CheckVerdict.PASSED, f"{taken - failures - inconclusive - skipped} of {taken} "
                           f"measurement(s) passed; last: {why}")
    return CheckStatus(CheckVerdict.RUNNING, f"{taken}/{check.count} measured")


@dataclass(frozen=True)
class BatchAnalysis:
    """Rule 7: the batch's analysis (``verdict`` None while it runs)."""

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
