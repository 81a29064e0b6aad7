"""The two-sample statistics of a ``compare:`` check (rollout.analysis.stats) against known values:
R's documented ``wilcox.test`` example, brute force over every ranking or pair, and values
scipy 1.17 gives for the same samples (checked once, outside the repository: scipy is no
dependency); the interval's bounds were also checked there by inverting the exact test."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from rollout.analysis import stats
from rollout.analysis.stats import Direction, hodges_lehmann, mann_whitney, quantile, smallest_p_value, summarize

# R's ?wilcox.test: "Hollander & Wolfe (1973), 69f.", permeability constants of the human chorioamnion
R_X = [0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46]
R_Y = [1.15, 0.88, 0.90, 0.74, 1.21]
TIED_X = [1, 2, 2, 3, 3, 3, 4, 5, 5, 7]
TIED_Y = [0, 1, 1, 2, 2, 2, 3, 4]


def test_the_exact_test_gives_r_s_documented_value() -> None:
    test = mann_whitney(R_X, R_Y, direction=Direction.HIGHER)
    assert (test.u, test.method) == (35, "exact")
    assert test.p_value == pytest.approx(0.1272, abs=5e-5)  # R: W = 35, p-value = 0.1272


def test_the_hodges_lehmann_estimate_gives_r_s_documented_value() -> None:
    shift = hodges_lehmann(R_X, R_Y, confidence=0.95)
    assert shift.estimate == pytest.approx(0.305)  # R: difference in location 0.305
    assert shift.low <= shift.estimate <= shift.high


@pytest.mark.parametrize(("direction", "p"), [
    (Direction.HIGHER, 0.0257774719775838),  # scipy.stats.mannwhitneyu(x, y, alternative="greater", method="asymptotic")
    (Direction.LOWER, 0.9791940998808212),
])
def test_ties_take_the_normal_approximation_with_tie_and_continuity_correction(direction: Direction, p: float) -> None:
    test = mann_whitney(TIED_X, TIED_Y, direction=direction)
    assert (test.u, test.method) == (62, "normal")
    assert test.p_value == pytest.approx(p, rel=1e-9)


def test_fifty_values_or_more_take_the_normal_approximation() -> None:
    rng = random.Random(1)
    x, y = [rng.random() for _ in range(50)], [rng.random() for _ in range(10)]
    assert mann_whitney(x, y, direction=Direction.HIGHER).method == "normal"
    assert mann_whitney(x[:49], y, direction=Direction.HIGHER).method == "exact"


@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (1, 5), (3, 4), (4, 3), (5, 5)])
def test_the_exact_p_value_is_the_share_of_rankings_at_least_as_extreme(n1: int, n2: int) -> None:
    rng = random.Random(n1 * 10 + n2)
    x, y = [rng.gauss(0.5, 1) for _ in range(n1)], [rng.gauss(0, 1) for _ in range(n2)]
    pooled = x + y
    u = mann_whitney(x, y, direction=Direction.HIGHER).u
    us = [sum(a > b for a in (pooled[i] for i in picked) for b in (pooled[j] for j in range(n1 + n2) if j not in picked))
          for picked in itertools.combinations(range(n1 + n2), n1)]
    assert mann_whitney(x, y, direction=Direction.HIGHER).p_value == pytest.approx(sum(v >= u for v in us) / len(us))
    assert mann_whitney(x, y, direction=Direction.LOWER).p_value == pytest.approx(sum(v <= u for v in us) / len(us))


def test_every_value_equal_is_no_evidence_either_way() -> None:
    assert mann_whitney([1.0] * 60, [1.0] * 60, direction=Direction.HIGHER).p_value == 1.0


def test_the_smallest_p_value_says_when_the_test_can_never_reject() -> None:
    assert smallest_p_value(1, 20) == pytest.approx(1 / 21)  # one value against 20: never below 0.02
    assert smallest_p_value(4, 4) == pytest.approx(1 / 70)
    x, y = [100.0], [float(i) for i in range(20)]  # the highest possible: still 1 in 21
    assert mann_whitney(x, y, direction=Direction.HIGHER).p_value == pytest.approx(1 / 21)


def test_the_estimate_is_the_median_of_every_pairwise_difference() -> None:
    rng = random.Random(2)
    for _ in range(50):
        x = [rng.lognormvariate(0, 1) for _ in range(rng.randint(1, 30))]
        y = [rng.lognormvariate(0, 1) for _ in range(rng.randint(1, 30))]
        assert hodges_lehmann(x, y, confidence=0.9).estimate == pytest.approx(
            statistics.median(a - b for a in x for b in y))


@pytest.mark.parametrize("tied", [False, True], ids=["continuous", "tied"])
def test_bisection_finds_the_same_order_statistics_as_sorting_every_pair(tied: bool, monkeypatch) -> None:
    rng = random.Random(3)
    for _ in range(40):
        draw = (lambda: float(rng.randint(0, 4))) if tied else (lambda: rng.gauss(0, 1))
        x, y = [draw() for _ in range(rng.randint(1, 60))], [draw() for _ in range(rng.randint(1, 60))]
        if rng.random() < 0.4:  # a log scale with zeros: -inf
            x = [stats.log_scale(abs(v)) for v in x]
            y = [stats.log_scale(abs(v)) for v in y]
        sorted_pairs = hodges_lehmann(x, y, confidence=0.95)
        monkeypatch.setattr(stats, "SORTED_PAIRS_UP_TO", 0)
        bisected = hodges_lehmann(x, y, confidence=0.95)
        monkeypatch.undo()
        for a, b in zip((sorted_pairs.estimate, sorted_pairs.low, sorted_pairs.high),
                        (bisected.estimate, bisected.low, bisected.high)):
            assert a == b or a == pytest.approx(b, abs=1e-9), (x, y)


def test_zeros_on_a_log_scale_are_equal_to_each_other_and_below_any_ratio() -> None:
    zero = stats.log_scale(0)
    assert hodges_lehmann([zero] * 3, [zero] * 3, confidence=0.9).estimate == 0  # no shift: all the same
    assert hodges_lehmann([zero] * 5, [0.0] * 5, confidence=0.9).estimate == -math.inf
    assert hodges_lehmann([0.0] * 5, [zero] * 5, confidence=0.9).estimate == math.inf


@pytest.mark.parametrize(("n1", "n2"), [(8, 8), (30, 200)])
def test_the_interval_holds_the_true_shift_as_often_as_its_confidence_says(n1: int, n2: int) -> None:
    rng = random.Random(4)
    trials, held = 400, 0
    for _ in range(trials):
        x = [rng.gauss(0.7, 1) for _ in range(n1)]
        y = [rng.gauss(0, 1) for _ in range(n2)]
        shift = hodges_lehmann(x, y, confidence=0.9)
        held += shift.low <= 0.7 <= shift.high
    assert 0.86 <= held / trials <= 0.95  # 0.9 nominal; the exact interval is conservative


def test_a_large_cohort_is_fast_enough() -> None:
    rng = random.Random(5)
    x, y = [rng.lognormvariate(0, 1) for _ in range(1_000)], [rng.lognormvariate(0, 1) for _ in range(5_000)]
    shift = hodges_lehmann(x, y, confidence=0.98)  # 5 million pairs: by bisection
    assert shift.low < shift.estimate < shift.high
    assert mann_whitney(x, y, direction=Direction.HIGHER).method == "normal"


def test_summaries_interpolate_quantiles_as_r_and_numpy_do() -> None:
    summary = summarize([4, 1, 3, 2])
    assert (summary.n, summary.median, summary.p95) == (4, 2.5, pytest.approx(3.85))
    assert quantile([5.0], 0.95) == 5.0 and math.isnan(quantile([], 0.5))


def test_with_no_shift_the_test_rejects_about_as_often_as_its_level() -> None:
    rng = random.Random(6)
    runs = 2000
    exact = sum(mann_whitney([rng.random() for _ in range(8)], [rng.random() for _ in range(8)],
                             direction=Direction.HIGHER).p_value <= 0.05 for _ in range(runs))
    normal = sum(mann_whitney([rng.random() for _ in range(60)], [rng.random() for _ in range(60)],
                              direction=Direction.LOWER).p_value <= 0.05 for _ in range(runs))
    assert 0.035 <= exact / runs <= 0.06 and 0.035 <= normal / runs <= 0.06


# -- the t test of the nodes' changes ----------------------------------------------------------

@pytest.mark.parametrize("t", [-30.0, -2.5, -0.3, 0.0, 0.7, 4.0, 100.0])
def test_the_t_distribution_is_the_closed_forms_of_one_and_two_degrees_of_freedom(t: float) -> None:
    assert stats.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)  # Cauchy
    assert stats.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


@pytest.mark.parametrize(("p", "df", "t"), [
    (0.99, 18, 2.552380), (0.975, 10, 2.228139), (0.99, 1, 31.820516), (0.95, 30, 1.697261), (0.01, 18, -2.552380),
])  # qt(p, df): the tables' values
def test_the_t_quantiles_are_r_s(p: float, df: int, t: float) -> None:
    assert stats.t_quantile(p, df) == pytest.approx(t, abs=1e-6)
    assert stats.t_cdf(stats.t_quantile(p, df), df) == pytest.approx(p, abs=1e-12)


def test_the_change_test_is_the_pooled_two_sample_t_test() -> None:
    # the textbook's (R's t.test(..., var.equal = TRUE)), from its parts
    batch, control = [3.1, 2.5], [1.0, 1.4, 0.8, 1.2, 1.1]
    test = stats.change_test(batch, control, direction=Direction.HIGHER, confidence=0.98)
    m1, m2 = statistics.fmean(batch), statistics.fmean(control)
    pooled = (sum((v - m1) ** 2 for v in batch) + sum((v - m2) ** 2 for v in control)) / 5
    se = math.sqrt(pooled * (1 / 2 + 1 / 5))
    assert (test.df, test.estimate) == (5, pytest.approx(m1 - m2))
    assert test.t == pytest.approx((m1 - m2) / se)
    assert test.p_value == pytest.approx(1 - stats.t_cdf(test.t, 5))
    half = stats.t_quantile(0.99, 5) * se
    assert (test.low, test.high) == (pytest.approx(m1 - m2 - half), pytest.approx(m1 - m2 + half))
    lower = stats.change_test(batch, control, direction=Direction.LOWER, confidence=0.98)
    assert lower.p_value == pytest.approx(1 - test.p_value)


def test_one_canary_node_is_judged_by_the_control_s_spread_and_nodes_changed_alike_are_exact() -> None:
    one = stats.change_test([2.0], [0.0, 1.0, -1.0], direction=Direction.HIGHER, confidence=0.9)
    assert (one.df, one.estimate, one.t) == (2, 2.0, pytest.approx(2.0 / math.sqrt(1 + 1 / 3)))
    alike = stats.change_test([0.5], [0.5, 0.5], direction=Direction.HIGHER, confidence=0.98)
    assert (alike.p_value, alike.estimate, alike.low, alike.high) == (1.0, 0.0, 0.0, 0.0)
    apart = stats.change_test([0.7], [0.5, 0.5], direction=Direction.HIGHER, confidence=0.98)
    assert (apart.t, apart.p_value) == (math.inf, 0.0)
    with pytest.raises(ValueError):
        stats.change_test([1.0], [0.0], direction=Direction.HIGHER, confidence=0.98)
