"""A ``compare:`` check over histogram buckets (rule 4 of rollout.analysis.rules): a query such as
``sum by (node, le) (increase(kubelet_pod_start_duration_seconds_bucket{...}[{{window}}]))``
returns each node's cumulative bucket counts, and the check tests the observations they hold (one
per pod start), so a one-node canary has as many values as it started pods. Tables for the
verdicts, the evidence, malformed sets and the cap; the bucket arithmetic itself
(rollout.analysis.stats) against hand-counted cases."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from datetime import datetime, timezone

import pytest

from rollout.analysis import Measurement, MeasurementVerdict, Sample, judge, rules
from rollout.analysis.stats import (
    bucket_observations,
    capped_counts,
    counts_quantile,
    expanded,
    quantile,
    summarize,
    summarize_counts,
)
from rollout.policy import AnalysisCheck

NOW = datetime(2026, 12, 1, 6, 0, tzinfo=timezone.utc)
# kubelet 1.27+'s pod start buckets, up to two minutes
BOUNDS = (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120)


def pod_starts(effect: str = "50%", no_data: str = "pass") -> AnalysisCheck:
    return AnalysisCheck.model_validate({
        "name": "pod-start-vs-control", "condition": "<= control", "noData": no_data,
        "query": 'sum by (node, le) (increase(kubelet_pod_start_duration_seconds_bucket{node=~"{{nodes}}"}'
                 '[{{window}}]))',
        "compare": {"confidence": 0.98, "effect": effect}})


def buckets(node: str, latencies: Sequence[float], *, stretch: float = 1.0,
            bounds: Sequence[float] = BOUNDS) -> list[Sample]:
    """One node's series as Prometheus returns them: cumulative counts per ``le``, ``stretch``ed
    as increase() extrapolates a window's counts."""
    return [Sample({"node": node, "le": f"{b:g}"}, stretch * sum(v <= b for v in latencies)) for b in bounds] + \
        [Sample({"node": node, "le": "+Inf"}, stretch * len(latencies))]


def fleet(seed: int, *, nodes: int, pods: int, prefix: str, factor: float = 1.0) -> list[Sample]:
    """Pod start latencies about 2.7 s (lognormal, a factor per host), binned, every node's
    window extrapolated by up to 10%."""
    rng = random.Random(seed)
    out = []
    for n in range(nodes):
        host = rng.gauss(0, 0.05)
        out += buckets(f"{prefix}-{n}", [factor * math.exp(1 + host + rng.gauss(0, 0.4)) for _ in range(pods)],
                       stretch=rng.uniform(1.0, 1.1))
    return out


def observed(samples: list[Sample]) -> int:
    """How many observations the series hold: their +Inf buckets, rounded."""
    return sum(round(s.value) for s in samples if s.labels.get("le") == "+Inf")


def measure(check: AnalysisCheck, batch: list[Sample], control: list[Sample]) -> Measurement:
    return judge(check, at=NOW, query="q", samples=batch, control_query="cq", control_samples=control)


CONTROL = fleet(1, nodes=20, pods=30, prefix="node")
SLOW_CANARY = fleet(2, nodes=1, pods=30, prefix="canary", factor=3.0)
SAME_CANARY = fleet(3, nodes=1, pods=30, prefix="canary")


# -- the verdicts ------------------------------------------------------------------------------

def test_a_one_node_canary_whose_pod_starts_are_three_times_slower_fails_naming_it() -> None:
    m = measure(pod_starts(), SLOW_CANARY, CONTROL)
    c = m.comparison
    assert (m.verdict, m.nodes) == (MeasurementVerdict.FAIL, ("canary-0",)), m.reason
    assert c is not None and c.drivers == ("canary-0",)
    # one value per pod start (30, extrapolated a little), not one per node
    assert (c.batch.n, c.control.n, c.method) == (observed(SLOW_CANARY), observed(CONTROL), "normal")
    assert c.batch.n >= 30 and c.control.n >= 600
    assert c.low > 1.5 and c.batch.median > 2.5 * c.control.median
    assert m.values == (("canary-0", c.batch.median),) and "driven by canary-0" in m.reason


def test_the_same_distribution_on_both_cohorts_passes() -> None:
    m = measure(pod_starts(), SAME_CANARY, CONTROL)
    assert (m.verdict, m.nodes) == (MeasurementVerdict.PASS, ()), m.reason
    assert m.comparison is not None
    assert (m.comparison.batch.n, m.comparison.control.n) == (observed(SAME_CANARY), observed(CONTROL))


def test_tied_bins_take_the_normal_approximation_with_tie_correction() -> None:
    # five pod starts in the 2 s bucket against five in the 1 s one and five in the 2 s one
    batch = buckets("a", [2] * 5, bounds=(1, 2))
    control = buckets("b", [1] * 5 + [2] * 5, bounds=(1, 2))
    m = measure(pod_starts(), batch, control)
    c = m.comparison
    assert c is not None and (c.method, c.u) == ("normal", 37.5)
    # the textbook normal approximation with the tie term (5^3 - 5 + 10^3 - 10) / (15 * 14) and a
    # continuity correction; without the tie term p would be 0.0708
    n1, n2, n = 5, 10, 15
    sd = math.sqrt(n1 * n2 / 12 * ((n + 1) - (5 ** 3 - 5 + 10 ** 3 - 10) / (n * (n - 1))))
    assert c.p_value == pytest.approx(1 - 0.5 * (1 + math.erf((37.5 - n1 * n2 / 2 - 0.5) / sd / math.sqrt(2))))
    assert c.p_value == pytest.approx(0.03625, abs=1e-5)


def test_a_pod_start_longer_than_every_bound_counts_at_the_largest_one() -> None:
    # every canary pod start above 120 s: valued 120, still far above the control's
    m = measure(pod_starts(), buckets("canary-0", [500] * 10), CONTROL)
    assert m.verdict is MeasurementVerdict.FAIL and m.comparison is not None
    assert m.comparison.batch.median == 120


def test_no_pod_started_in_the_window_is_what_no_data_says() -> None:
    m = measure(pod_starts(no_data="pass"), buckets("canary-0", []), CONTROL)
    assert (m.verdict, m.no_data) == (MeasurementVerdict.PASS, True)
    assert f"too few values to compare: batch 0, control {observed(CONTROL)}" in m.reason


@pytest.mark.parametrize(("batch", "reason"), [
    pytest.param([Sample({"node": "a", "le": "1"}, 6), Sample({"node": "a", "le": "2"}, 3),
                  Sample({"node": "a", "le": "+Inf"}, 6)],
                 "the batch's histogram buckets are malformed: a: cumulative counts decrease: le=2 counts 3, "
                 "fewer than the 6 of a bucket below it", id="cumulative counts that decrease"),
    pytest.param([Sample({"node": "a", "le": "fast"}, 5), Sample({"node": "a", "le": "+Inf"}, 5)],
                 "the batch's histogram buckets are malformed: a: le='fast' is not a number", id="le not a number"),
    pytest.param([Sample({"node": "a", "le": "1"}, 5), Sample({"node": "b"}, 5)],
                 "the batch's histogram buckets are malformed: b has no le label", id="a series without le"),
    pytest.param([Sample({"node": "a", "le": "+Inf"}, 5)], "a: no finite bucket bound", id="only +Inf"),
    pytest.param([Sample({"node": "a", "le": "1"}, 5), Sample({"node": "a", "le": "1.0"}, 5)],
                 "a: the bucket le=1 appears twice", id="a bound twice"),
    pytest.param([Sample({"node": "a", "le": "1"}, -2)], "a: the bucket le=1 counts -2: not a count",
                 id="a negative count"),
])
def test_a_malformed_set_of_buckets_is_inconclusive_saying_why(batch: list[Sample], reason: str) -> None:
    m = measure(pod_starts(), batch, CONTROL)
    assert m.verdict is MeasurementVerdict.INCONCLUSIVE and not m.no_data
    assert reason in m.reason, m.reason


def test_the_control_cohort_s_malformed_buckets_are_named_as_its() -> None:
    broken = [Sample({"node": "x", "le": "1"}, 5), Sample({"node": "x", "le": "2"}, 1)]
    m = measure(pod_starts(), SLOW_CANARY, CONTROL + broken)
    assert m.verdict is MeasurementVerdict.INCONCLUSIVE
    assert m.reason.startswith("the control cohort's histogram buckets are malformed: x: cumulative counts "
                               "decrease"), m.reason


@pytest.mark.parametrize(("batch", "verdict"), [
    pytest.param(SLOW_CANARY, MeasurementVerdict.FAIL, id="a one-node canary three times slower"),
    pytest.param(SAME_CANARY, MeasurementVerdict.PASS, id="a one-node canary alike"),
    pytest.param(fleet(4, nodes=200, pods=30, prefix="b", factor=3.0), MeasurementVerdict.FAIL,
                 id="200 nodes three times slower"),
    pytest.param(fleet(5, nodes=200, pods=30, prefix="b"), MeasurementVerdict.PASS, id="200 nodes alike"),
])
def test_the_cap_keeps_the_verdict_and_the_evidence_counts_every_observation(
        batch: list[Sample], verdict: MeasurementVerdict, monkeypatch: pytest.MonkeyPatch) -> None:
    control = fleet(6, nodes=1000, pods=30, prefix="node")  # 30,000 pod starts, more extrapolated
    capped = measure(pod_starts(), batch, control)
    monkeypatch.setattr(rules, "MAX_OBSERVATIONS", 10 ** 9)
    whole = measure(pod_starts(), batch, control)
    assert capped.verdict is whole.verdict is verdict, (capped.reason, whole.reason)
    assert capped.nodes == whole.nodes
    assert capped.comparison is not None and whole.comparison is not None
    assert capped.comparison.control == whole.comparison.control and capped.comparison.control.n == observed(control)
    assert capped.comparison.batch == whole.comparison.batch
    assert capped.comparison.u < whole.comparison.u  # tested on fewer observations: 5,000 of the control's


def test_without_le_a_per_node_query_is_judged_as_before() -> None:
    per_node = [Sample({"node": f"n-{i}"}, 1.0 + i / 100) for i in range(10)]
    m = measure(pod_starts(), [Sample({"node": "b-0"}, 1.0)], per_node)
    assert m.no_data and "too few values to compare: batch 1, control 10" in m.reason


# -- the bucket arithmetic ---------------------------------------------------------------------

@pytest.mark.parametrize(("cumulative", "counts"), [
    pytest.param([(1, 2), (2, 5), (math.inf, 6)], {1: 2, 2: 4}, id="the +Inf bucket at the largest finite bound"),
    pytest.param([(math.inf, 6), (2, 5), (1, 2)], {1: 2, 2: 4}, id="in any order"),
    pytest.param([(1, 2.2), (2, 5.4), (math.inf, 6.6)], {1: 2, 2: 5}, id="extrapolated counts rounded"),
    pytest.param([(1, 3.3), (2, 3.1), (math.inf, 3.3)], {1: 3}, id="a bucket a fraction below the one under it"),
    # increase() extrapolates each bucket on its own: seen in a 1-minute window of 10 s scrapes
    pytest.param([(4, 9.0), (6, 8.167), (math.inf, 10.2)], {4: 9, 6: 1}, id="extrapolated apart, evened out"),
    pytest.param([(1, 0), (2, 0), (math.inf, 0)], {}, id="nothing observed"),
])
def test_bucket_observations(cumulative: list[tuple[float, float]], counts: dict[float, int]) -> None:
    assert bucket_observations(cumulative) == counts


def test_the_cap_scales_every_bucket_alike_to_exactly_the_cap_and_always_the_same() -> None:
    counts = {0.5: 7, 1.0: 12_001, 2.0: 9_000, 4.0: 2_992, 8.0: 1}
    capped = capped_counts(counts, 5_000)
    assert sum(capped.values()) == 5_000 and capped == capped_counts(dict(reversed(counts.items())), 5_000)
    total = sum(counts.values())
    assert all(abs(capped.get(v, 0) - c * 5_000 / total) < 1 for v, c in counts.items())
    assert capped_counts({1.0: 3, 2.0: 4}, 5_000) == {1.0: 3, 2.0: 4}


def test_quantiles_of_counts_are_those_of_the_values_they_stand_for() -> None:
    rng = random.Random(7)
    for _ in range(200):
        counts = {float(rng.randint(0, 9)): rng.randint(0, 6) for _ in range(rng.randint(1, 6))}
        values = expanded(counts)
        for q in (0.0, 0.3, 0.5, 0.95, 1.0):
            assert counts_quantile(counts, q) == pytest.approx(quantile(values, q), nan_ok=True)
        if values:
            assert summarize_counts(counts) == summarize(values)
