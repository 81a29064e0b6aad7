"""Two-sample statistics for judging a batch against its control cohort: the Mann-Whitney U test
and the Hodges-Lehmann estimate of the shift between them, with its distribution-free interval.

Why these: a metric's values across nodes or pods are skewed, heavy-tailed and full of ties
(latencies, counts), so a test on means would be led by a few outliers; a rank test is not, and
it stays valid whatever the distribution. Kayenta, the canary judge most teams copy, does the
same: a Mann-Whitney U test (98% confidence) plus an effect size from the Hodges-Lehmann
estimate, so that a statistically clear but tiny difference does not fail a canary.

Why by hand rather than scipy: scipy is a large compiled dependency (tens of MB) for about 150
lines; its exact U distribution ignores ties and it has no Hodges-Lehmann estimate or interval,
which would be hand-written anyway. The rules follow R's ``wilcox.test`` (the reference
implementation of both): the exact null distribution when both samples have fewer than 50
values and no ties, else the normal approximation with tie correction and continuity correction;
the interval from order statistics of the pairwise differences. ``tests/core/test_analysis_stats.py``
checks them against textbook values and brute force.

Binned values: the kubelet's latencies are histograms, whose buckets hold one observation per
pod start or relist; ``bucket_observations`` turns a histogram's cumulative counts into values at
the bucket bounds (ties everywhere: the normal approximation, tie corrected), and
``capped_counts`` keeps a cohort's to a size the test is quick with.

Pure: no I/O; standard library only (``statistics.NormalDist`` for the normal distribution).
"""

from __future__ import annotations

import enum
import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

EXACT_BELOW = 50  # as R's wilcox.test: the exact distribution below 50 values per sample (and no ties)
# Beyond this many pairs the k-th pairwise difference is found by bisection (counting pairs in
# O(n log n)) instead of sorting them all: 1,000 pods against 10,000 would be 10 million pairs.
SORTED_PAIRS_UP_TO = 100_000
_NORMAL = NormalDist()


class Direction(str, enum.Enum):
    """Which way a shift of the batch against the control is harmful."""

    HIGHER = "higher"  # the batch's values above the control's: latencies, errors, evictions
    LOWER = "lower"  # below: throughput, free memory


@dataclass(frozen=True)
class RankTest:
    """A one-sided Mann-Whitney U test of "the batch is not shifted the harmful way"."""

    u: float  # pairs (batch, control) where the batch's value is higher, ties counted half
    p_value: float
    method: str  # "exact" or "normal"


@dataclass(frozen=True)
class ShiftEstimate:
    """The Hodges-Lehmann shift batch - control: the median of every pairwise difference, and its
    two-sided interval at ``confidence``."""

    estimate: float
    low: float
    high: float
    confidence: float


@dataclass(frozen=True)
class Summary:
    """A cohort's values as the evidence names them."""

    n: int
    median: float
    p95: float


def summarize(values: Sequence[float]) -> Summary:
    ordered = sorted(values)
    return Summary(len(ordered), quantile(ordered, 0.5), quantile(ordered, 0.95))


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated linearly (R's and numpy's default)."""
    if not ordered:
        return math.nan
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    if ordered[below] == ordered[above]:  # also spares inf - inf
        return ordered[below]
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


# -- binned values: a histogram's buckets --------------------------------------------------

# A bucket may come out below the one under it: Prometheus' increase() extrapolates each bucket
# series on its own towards the window's edges, stopping where a series would reach zero, so one
# histogram's cumulative counts need not agree, by up to the share of the window extrapolated (a
# third with four scrapes to a window; measured: 8.2 against 9 in a 1-minute window of 10 s
# scrapes, 4 of 60 harmless canaries inconclusive with half an observation allowed). Within that
# the counts are evened out, as Prometheus' histogram_quantile does (ensureMonotonic); beyond it
# the set is no histogram.
BUCKET_ROUNDING = 0.5
BUCKET_SLACK = 1 / 3


def bucket_observations(cumulative: Sequence[tuple[float, float]]) -> dict[float, int]:
    """A histogram's observations from its cumulative bucket counts, ``(le, count)`` pairs in any
    order: how many fell in each bucket (the counts rounded: an increase() is extrapolated, not
    whole), each valued at the bucket's upper bound. Those in the ``+Inf`` bucket are valued at the
    largest finite bound: all that is known is that they lie above it, and a rank test then ties
    them with the top bucket's (it can only understate a shift). Raises ValueError, saying why,
    for a set that is no histogram: a bound that is NaN or given twice, no finite bound, a count
    that is negative or not finite, cumulative counts that decrease."""
    bounds = [b for b, _ in cumulative]
    if any(math.isnan(b) or b == -math.inf for b in bounds):
        raise ValueError("a bucket bound (le) is NaN or -Inf")
    twice = sorted({b for b in bounds if bounds.count(b) > 1})
    if twice:
        raise ValueError(f"the bucket le={_le(twice[0])} appears twice")
    finite = [b for b in bounds if math.isfinite(b)]
    if not finite:
        raise ValueError("no finite bucket bound (only le=+Inf): nothing to value the observations at")
    top = max(finite)
    counts: dict[float, int] = {}
    highest, below = 0.0, 0  # the largest cumulative count so far, and its rounded value
    for bound, count in sorted(cumulative):
        if not math.isfinite(count) or count < 0:
            raise ValueError(f"the bucket le={_le(bound)} counts {count:g}: not a count")
        if count < highest * (1 - BUCKET_SLACK) - BUCKET_ROUNDING:
            raise ValueError(f"cumulative counts decrease: le={_le(bound)} counts {count:.4g}, fewer than the "
                             f"{highest:.4g} of a bucket below it")
        whole = max(below, round(count))
        if whole > below:
            value = bound if math.isfinite(bound) else top
            counts[value] = counts.get(value, 0) + whole - below
        highest, below = max(highest, count), whole
    return counts


def merged_counts(many: Iterable[Mapping[float, int]]) -> dict[float, int]:
    out: dict[float, int] = {}
    for counts in many:
        for value, count in counts.items():
            out[value] = out.get(value, 0) + count
    return out


def capped_counts(counts: Mapping[float, int], cap: int) -> dict[float, int]:
    """At most ``cap`` observations in the same proportions: each count scaled by cap / total and
    rounded by largest remainder (equal remainders: the lower value first), so the same counts
    always give the same sample."""
    total = sum(counts.values())
    if total <= cap:
        return dict(counts)
    shares = {value: count * cap / total for value, count in counts.items()}
    whole = {value: math.floor(share) for value, share in shares.items()}
    left = cap - sum(whole.values())
    for value in sorted(shares, key=lambda v: (whole[v] - shares[v], v))[:left]:
        whole[value] += 1
    return {value: count for value, count in whole.items() if count}


def expanded(counts: Mapping[float, int]) -> list[float]:
    """Each value as many times as it was observed, in order."""
    return [value for value in sorted(counts) for _ in range(counts[value])]


def counts_quantile(counts: Mapping[float, int], q: float) -> float:
    """:func:`quantile` of the expanded values, without expanding them."""
    ordered = sorted((v, c) for v, c in counts.items() if c > 0)
    n = sum(c for _, c in ordered)
    if not n:
        return math.nan
    position = q * (n - 1)
    below = math.floor(position)

    def at(index: int) -> float:
        seen = 0
        for value, count in ordered:
            seen += count
            if index < seen:
                return value
        return ordered[-1][0]

    low, high = at(below), at(min(below + 1, n - 1))
    return low if low == high else low + (high - low) * (position - below)


def summarize_counts(counts: Mapping[float, int]) -> Summary:
    """:func:`summarize` of the expanded values."""
    return Summary(sum(counts.values()), counts_quantile(counts, 0.5), counts_quantile(counts, 0.95))


def _le(bound: float) -> str:
    return "+Inf" if bound == math.inf else f"{bound:g}"


# -- the Mann-Whitney U test -----------------------------------------------------------------


def mann_whitney(batch: Sequence[float], control: Sequence[float], *, direction: Direction) -> RankTest:
    """One-sided: the p-value of the batch's U if the two cohorts came from one distribution,
    in the harmful ``direction``."""
    n1, n2 = len(batch), len(control)
    if not n1 or not n2:
        raise ValueError("both cohorts need at least one value")
    ranks = _midranks([*batch, *control])
    u = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    ties = [t for t in Counter([*batch, *control]).values() if t > 1]
    if not ties and n1 < EXACT_BELOW and n2 < EXACT_BELOW:
        counts = _u_counts(n1, n2)
        total = sum(counts)
        at = round(u)  # an integer without ties
        tail = sum(counts[at:]) if direction is Direction.HIGHER else sum(counts[: at + 1])
        return RankTest(u, tail / total, "exact")
    sd = _u_sd(n1, n2, ties)
    if sd == 0:  # every value equal: nothing says either cohort is higher
        return RankTest(u, 1.0, "normal")
    mean = n1 * n2 / 2
    if direction is Direction.HIGHER:
        p = _NORMAL.cdf(-(u - mean - 0.5) / sd)
    else:
        p = _NORMAL.cdf((u - mean + 0.5) / sd)
    return RankTest(u, min(1.0, p), "normal")


def smallest_p_value(n1: int, n2: int) -> float:
    """The smallest p-value the test can give samples this size (the exact one, without ties):
    below 1 - confidence or the test can never reject, whatever the values."""
    return 1 / math.comb(n1 + n2, n1)


def _midranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, tied values sharing the average of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start:end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def _u_sd(n1: int, n2: int, ties: Sequence[int]) -> float:
    n = n1 + n2
    tie_term = sum(t ** 3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
    return math.sqrt(max(0.0, n1 * n2 / 12 * ((n + 1) - tie_term)))


@lru_cache(maxsize=64)
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """How many of the C(n1+n2, n1) rankings give each U = 0 .. n1*n2: the coefficients of the
    Gaussian binomial [n1+n2 choose n1]_q, built as the product of (1 - q^(n2+i)) / (1 - q^i)."""
    m, n = min(n1, n2), max(n1, n2)  # the distribution is the same both ways round; fewer steps
    poly = [1]
    for i in range(1, m + 1):
        grown = poly + [0] * (n + i)
        for k in range(len(poly)):  # times (1 - q^(n+i))
            grown[k + n + i] -= poly[k]
        for k in range(i, len(grown)):  # divided by (1 - q^i): exact, the quotient is a polynomial
            grown[k] += grown[k - i]
        poly = grown[: i * n + 1]
    return tuple(poly)


def _exact_quantile(n1: int, n2: int, p: float) -> int:
    """The smallest u with P(U <= u) >= p (R's qwilcox)."""
    counts = _u_counts(n1, n2)
    total = sum(counts)
    running = 0
    for u, c in enumerate(counts):
        running += c
        if running >= p * total:
            return u
    return len(counts) - 1


# -- the Hodges-Lehmann estimate ---------------------------------------------------------------


def hodges_lehmann(batch: Sequence[float], control: Sequence[float], *, confidence: float) -> ShiftEstimate:
    """The median of the differences batch - control over every pair, and the interval between
    two of their order statistics that holds the true shift with probability ``confidence``
    (exactly without ties and below 50 values per sample, else by the normal approximation).

    Values may be ``-inf`` (the log of a zero, for a ratio): two of them differ by 0 (equal),
    ``-inf`` minus a number is ``-inf``, a number minus ``-inf`` is ``inf``."""
    n1, n2 = len(batch), len(control)
    if not n1 or not n2:
        raise ValueError("both cohorts need at least one value")
    pairs = n1 * n2
    alpha = 1 - confidence
    ties = [t for t in Counter([*batch, *control]).values() if t > 1]
    if not ties and n1 < EXACT_BELOW and n2 < EXACT_BELOW:
        k = max(1, _exact_quantile(n1, n2, alpha / 2))
    else:
        k = max(1, round(pairs / 2 - _NORMAL.inv_cdf(1 - alpha / 2) * _u_sd(n1, n2, ties)))
    k = min(k, (pairs + 1) // 2)
    kth = _PairwiseDifferences(batch, control)
    middle = _mean(kth(pairs // 2 + 1), kth((pairs + 1) // 2))
    return ShiftEstimate(middle, kth(k), kth(pairs - k + 1), confidence)


def difference(x: float, y: float) -> float:
    """x - y, where two equal values differ by 0 (also -inf against -inf: two zeros on a log scale)."""
    return 0.0 if x == y else x - y


def log_scale(value: float) -> float:
    """A value >= 0 on the log scale ratios are judged on (0 is -inf: below any ratio)."""
    return math.log(value) if value > 0 else -math.inf


def _mean(a: float, b: float) -> float:
    if a == b:
        return a
    if math.isinf(a) and math.isinf(b):  # -inf and inf: as far below as above
        return 0.0
    return (a + b) / 2


class _PairwiseDifferences:
    """The k-th smallest (1-based) of the differences x - y over every pair."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        self.xs = sorted(xs)
        self.ys = sorted(ys)
        # each distinct x once, with how many there are: binned values (a histogram's bucket
        # bounds) repeat thousands of times, and a bisection step then counts a few dozen
        self.distinct_x = sorted(Counter(self.xs).items())
        self.sorted: list[float] | None = None
        if len(xs) * len(ys) <= SORTED_PAIRS_UP_TO:
            self.sorted = sorted(difference(x, y) for x in self.xs for y in self.ys)

    def __call__(self, k: int) -> float:
        if self.sorted is not None:
            return self.sorted[k - 1]
        return self._bisect(k)

    def _count_at_most(self, d: float) -> int:
        """How many differences are <= d (d finite)."""
        ys = self.ys
        count = sum(times * (len(ys) - bisect_left(ys, x - d)) for x, times in self.distinct_x)  # y >= x - d
        # -inf against -inf counted above whatever d (x - d is -inf): it is a 0
        return count - (self._zero_pairs if d < 0 else 0)

    @property
    def _zero_pairs(self) -> int:
        return bisect_right(self.xs, -math.inf) * bisect_right(self.ys, -math.inf)

    def _bisect(self, k: int) -> float:
        low_x, low_y = bisect_right(self.xs, -math.inf), bisect_right(self.ys, -math.inf)
        finite_x, finite_y = self.xs[low_x:], self.ys[low_y:]
        if k <= low_x * len(finite_y):  # the -inf differences come first
            return -math.inf
        if k > len(self.xs) * len(self.ys) - len(finite_x) * low_y:  # the inf ones last
            return math.inf
        ends = [0.0]
        if finite_x and finite_y:
            ends += [finite_x[0] - finite_y[-1], finite_x[-1] - finite_y[0]]
        lo, hi = min(ends) - 1.0, max(ends)  # fewer than k differences at or below lo, k or more at hi
        tolerance = (hi - lo) * 1e-12
        while hi - lo > tolerance:
            mid = lo + (hi - lo) / 2
            if self._count_at_most(mid) >= k:
                hi = mid
            else:
                lo = mid
        return self._next_above(lo)

    def _next_above(self, lo: float) -> float:
        """The smallest difference above ``lo``: the k-th, to 1e-12 of the values' range."""
        found = 0.0 if self._zero_pairs and lo < 0 else math.inf
        for x, _ in self.distinct_x:
            j = bisect_left(self.ys, x - lo) - 1  # the largest y with x - y > lo
            if j >= 0 and math.isfinite(x):
                found = min(found, x - self.ys[j])
        return found


# -- the change of each node: before against after (a difference in differences) ----------------


@dataclass(frozen=True)
class ChangeTest:
    """A one-sided two-sample t test of "the batch's nodes changed no more the harmful way than
    the control's": the batch nodes' mean change against the control nodes' (each node's change
    its after window against its own before window), with the pooled variance, and the
    difference's two-sided interval at ``confidence``."""

    t: float
    df: int
    p_value: float  # one-sided, in the harmful direction
    estimate: float  # the batch nodes' mean change - the control nodes'
    low: float
    high: float
    confidence: float


def change_test(batch: Sequence[float], control: Sequence[float], *, direction: Direction,
                confidence: float) -> ChangeTest:
    """The batch nodes' changes against the control nodes' (at least one batch node, two control
    nodes). Pooled, not Welch: under "no harm" a batch node changes as a control node does, so
    the control's spread is the batch's too, and a one-node canary (no spread of its own) is
    judged by it: the test is then the canary's change against the control's prediction interval."""
    n1, n2 = len(batch), len(control)
    if n1 < 1 or n2 < 2:
        raise ValueError("needs a batch node and two control nodes")
    m1, m2 = sum(batch) / n1, sum(control) / n2
    squares = sum((v - m1) ** 2 for v in batch) + sum((v - m2) ** 2 for v in control)
    df = n1 + n2 - 2
    se = math.sqrt(squares / df * (1 / n1 + 1 / n2))
    estimate = m1 - m2
    if se == 0:  # every node changed alike: the difference is known exactly
        harmful = estimate > 0 if direction is Direction.HIGHER else estimate < 0
        return ChangeTest(math.copysign(math.inf, estimate) if estimate else 0.0, df,
                          0.0 if harmful else 1.0, estimate, estimate, estimate, confidence)
    t = estimate / se
    p = 1 - t_cdf(t, df) if direction is Direction.HIGHER else t_cdf(t, df)
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    return ChangeTest(t, df, p, estimate, estimate - half, estimate + half, confidence)


def t_cdf(t: float, df: int) -> float:
    """Student's t distribution with ``df`` degrees of freedom: P(T <= t)."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1 - tail if t > 0 else tail


def t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p (0 < p < 1), by bisection on :func:`t_cdf`."""
    if not 0 < p < 1:
        raise ValueError(f"a probability strictly between 0 and 1, got {p}")
    low, high = -1.0, 1.0
    while t_cdf(low, df) > p:
        low *= 2
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, abs(middle)):
            break
    return (low + high) / 2


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz's
    method, as Numerical Recipes' betai), on the side where it converges quickly."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return result
