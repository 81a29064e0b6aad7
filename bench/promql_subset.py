"""The part of PromQL the shipped analysis checks use, evaluated over scrapes held in memory.

Why: the judge's error rates need thousands of simulated canaries, and thousands will not fit
through a real Prometheus on one machine. So the benchmark scrapes kubesim's kubelet registries
itself (one scrape = every series of every node at one moment, each series labelled with its
``node`` as the shipped scrape config relabels it) and asks each check's rendered query of this
evaluator; a sample of the canaries goes through the real Prometheus too, and must agree
(bench/judge_quality.py ``--e2e``).

The query is parsed by ``promql-parser`` (as the policy loader parses it); evaluated: vector and
matrix selectors with ``=``, ``!=``, ``=~``, ``!~`` matchers; ``increase``/``rate`` with
Prometheus' counter-reset handling and its extrapolation to the window's edges
(``extrapolatedRate`` of promql/functions.go); ``max_over_time``/``min_over_time``/``avg_over_time``/``count_over_time``
of a range or of a subquery (``[range:step]``, its steps aligned to the epoch); ``resets`` of a range;
``sum``/``max``/``min``/``avg``/``count`` with
``by``/``without``, and ``quantile`` (``quantile``: linear between ranks); ``histogram_quantile``
(``bucketQuantile``, linear within the bucket); ``scalar``; arithmetic with a number, and between
vectors one-to-one (on every label, or ``on(...)``) or many-to-one (``on(...) group_left(...)``); comparisons
as filters (no ``bool``), and ``and``/``unless`` (on every label, or ``on(...)``). Anything else raises :class:`Unsupported`, so a new shipped check
cannot be judged here by mistake.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import promql_parser as pp

SeriesKey = frozenset[tuple[str, str]]  # every label, ``__name__`` included
Vector = dict[SeriesKey, float]


COMPARISONS = {">": lambda a, b: a > b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b,
               "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
OVER_TIME = {"max_over_time": max, "min_over_time": min, "avg_over_time": lambda vs: sum(vs) / len(vs),
             "count_over_time": lambda vs: float(len(vs))}


_MATCHES: dict[str, dict[SeriesKey, bool]] = {}  # selector -> series -> matches: series recur in every scrape


class Unsupported(ValueError):
    """A query outside the subset."""


class Scrape:
    """Every series at one moment (seconds), indexed by metric name."""

    def __init__(self, at: float, series: Mapping[SeriesKey, float]) -> None:
        self.at = at
        self.series = series
        self.by_name: dict[str, dict[SeriesKey, float]] = {}
        for key, value in series.items():
            self.by_name.setdefault(_name(key), {})[key] = value
        # selector -> its series here: every measurement of a check reads the same scrapes again
        self.selected: dict[str, list[tuple[SeriesKey, float]]] = {}

    def named(self, name: str | None) -> Mapping[SeriesKey, float]:
        return self.series if not name else self.by_name.get(name, {})


def series_key(name: str, labels: Iterable[tuple[str, str]]) -> SeriesKey:
    return frozenset((("__name__", name), *labels))


def _offset_s(matrix: Any) -> float:
    offset = getattr(matrix.vector_selector, "offset", None)
    return offset.total_seconds() if offset is not None else 0.0


@functools.lru_cache(maxsize=1_000_000)
def _name(key: SeriesKey) -> str:
    return dict(key).get("__name__", "")


@functools.lru_cache(maxsize=1_000_000)  # series recur in every scrape and every measurement
def _without_name(key: SeriesKey) -> SeriesKey:
    return frozenset(kv for kv in key if kv[0] != "__name__")


class Evaluator:
    """Instant queries at ``at`` over ``scrapes`` (sorted by time)."""

    LOOKBACK_S = 300.0  # an instant selector's lookback delta, as Prometheus'

    def __init__(self, scrapes: list[Scrape]) -> None:
        self.scrapes = scrapes

    def query(self, text: str, at: float) -> list[tuple[dict[str, str], float]]:
        result = self._eval(pp.parse(text), at)
        if isinstance(result, float):
            return [({}, result)]
        return [(dict(_without_name(k)), v) for k, v in result.items()]

    # ------------------------------------------------------------------------------ nodes
    def _eval(self, node: Any, at: float) -> Vector | float:
        if isinstance(node, pp.NumberLiteral):
            return float(node.val)
        if isinstance(node, pp.ParenExpr):
            return self._eval(node.expr, at)
        if isinstance(node, pp.VectorSelector):
            return self._instant(node, at)
        if isinstance(node, pp.AggregateExpr):
            return self._aggregate(node, at)
        if isinstance(node, pp.Call):
            return self._call(node, at)
        if isinstance(node, pp.BinaryExpr):
            return self._binary(node, at)
        raise Unsupported(f"not in the subset: {type(node).__name__}")

    def _selected(self, selector: Any, scrape: Scrape, text: str) -> list[tuple[SeriesKey, float]]:
        """The series of ``scrape`` that ``selector`` (printed as ``text``) matches."""
        found = scrape.selected.get(text)
        if found is None:
            cache = _MATCHES.setdefault(text, {})
            if len(cache) > 200_000:
                cache.clear()
            found = []
            for key, value in scrape.named(selector.name).items():
                matches = cache.get(key)
                if matches is None:
                    matches = cache[key] = self._match(selector, key)
                if matches:
                    found.append((key, value))
            scrape.selected[text] = found
        return found

    def _match(self, selector: Any, key: SeriesKey) -> bool:
        labels = dict(key)
        if selector.name and labels.get("__name__") != selector.name:
            return False
        for m in selector.matchers.matchers:
            value = labels.get(m.name, "")
            op = m.op
            if op == pp.MatchOp.Equal:
                ok = value == m.value
            elif op == pp.MatchOp.NotEqual:
                ok = value != m.value
            elif op == pp.MatchOp.Re:
                ok = re.fullmatch(m.value, value) is not None
            elif op == pp.MatchOp.NotRe:
                ok = re.fullmatch(m.value, value) is None
            else:
                raise Unsupported(f"matcher {op}")
            if not ok:
                return False
        return True

    def _instant(self, selector: Any, at: float) -> Vector:
        offset = getattr(selector, "offset", None)
        at -= offset.total_seconds() if offset is not None else 0.0
        out: Vector = {}
        text = str(selector)
        for scrape in self.scrapes:
            if scrape.at > at:
                break
            if scrape.at < at - self.LOOKBACK_S:
                continue
            out.update(self._selected(selector, scrape, text))  # the latest within the lookback wins
        # a series gone from the latest scrape (a restarted kubelet's) is stale, as Prometheus marks it
        latest = [s for s in self.scrapes if s.at <= at]
        if latest:
            out = {k: v for k, v in out.items() if k in latest[-1].series}
        return out

    def _range(self, matrix: Any, at: float) -> dict[SeriesKey, list[tuple[float, float]]]:
        window = matrix.range.total_seconds()
        at -= _offset_s(matrix)
        out: dict[SeriesKey, list[tuple[float, float]]] = {}
        selector = matrix.vector_selector
        text = str(selector)
        for scrape in self.scrapes:
            if scrape.at > at:
                break
            if scrape.at < at - window:
                continue
            for key, value in self._selected(selector, scrape, text):
                out.setdefault(key, []).append((scrape.at, value))
        return out

    def _subquery(self, sub: Any, at: float) -> dict[SeriesKey, list[tuple[float, float]]]:
        """``expr[range:step]``: the expression at every multiple of the step (of the epoch, as
        Prometheus aligns them) from the range's start, inclusive, to its end."""
        if sub.at is not None or sub.step is None:
            raise Unsupported("a subquery with @ or without its step")
        step = sub.step.total_seconds()
        end = at - (sub.offset.total_seconds() if sub.offset is not None else 0.0)
        t = math.ceil((end - sub.range.total_seconds()) / step) * step
        out: dict[SeriesKey, list[tuple[float, float]]] = {}
        while t <= end:
            vector = self._eval(sub.expr, t)
            if isinstance(vector, float):
                raise Unsupported("a subquery of a number")
            for key, value in vector.items():
                out.setdefault(key, []).append((t, value))
            t += step
        return out

    def _call(self, call: Any, at: float) -> Vector:
        name = call.func.name
        args = list(call.args)
        if name in ("increase", "rate"):
            (matrix,) = args
            if not isinstance(matrix, pp.MatrixSelector):
                raise Unsupported(f"{name} of {type(matrix).__name__}")
            window = matrix.range.total_seconds()
            end = at - _offset_s(matrix)
            out: Vector = {}
            for key, points in self._range(matrix, at).items():
                value = extrapolated_rate(points, end - window, end, is_rate=name == "rate")
                if value is not None:
                    out[_without_name(key)] = value
            return out
        if name == "resets":  # how often a counter started again from zero in the range
            (matrix,) = args
            if not isinstance(matrix, pp.MatrixSelector):
                raise Unsupported(f"resets of {type(matrix).__name__}")
            return {_without_name(key): float(sum(b < a for (_, a), (_, b) in zip(points, points[1:])))
                    for key, points in self._range(matrix, at).items() if points}
        if name in OVER_TIME:
            (matrix,) = args
            if isinstance(matrix, pp.SubqueryExpr):
                points_of = self._subquery(matrix, at)
            elif isinstance(matrix, pp.MatrixSelector):
                points_of = self._range(matrix, at)
            else:
                raise Unsupported(f"{name} of {type(matrix).__name__}")
            return {_without_name(key): OVER_TIME[name]([v for _, v in points])
                    for key, points in points_of.items() if points}
        if name in ("clamp_min", "clamp_max"):
            inner, bound_node = args
            vector, bound = self._eval(inner, at), self._eval(bound_node, at)
            if isinstance(vector, float) or not isinstance(bound, float):
                raise Unsupported(f"{name}(vector, number)")
            clamp = max if name == "clamp_min" else min
            return {_without_name(k): clamp(v, bound) for k, v in vector.items()}
        if name == "scalar":  # a one-element vector's value, NaN otherwise
            (inner,) = args
            vector = self._eval(inner, at)
            if isinstance(vector, float):
                raise Unsupported("scalar of a number")
            return next(iter(vector.values())) if len(vector) == 1 else math.nan  # type: ignore[return-value]
        if name == "histogram_quantile":
            q_node, inner = args
            q = self._eval(q_node, at)
            vector = self._eval(inner, at)
            if not isinstance(q, float) or isinstance(vector, float):
                raise Unsupported("histogram_quantile(number, vector)")
            groups: dict[SeriesKey, list[tuple[float, float]]] = {}
            for key, value in vector.items():
                labels = dict(key)
                if "le" not in labels:
                    continue
                rest = frozenset(kv for kv in _without_name(key) if kv[0] != "le")
                groups.setdefault(rest, []).append((float(labels["le"]), value))
            return {k: bucket_quantile(q, b) for k, b in groups.items()}
        raise Unsupported(f"function {name}")

    def _aggregate(self, agg: Any, at: float) -> Vector:
        op = str(agg.op).split()[0].lower()
        vector = self._eval(agg.expr, at)
        quantile = None
        if op == "quantile":
            quantile = self._eval(agg.param, at)
            if not isinstance(quantile, float):
                raise Unsupported("quantile(number, vector)")
        if isinstance(vector, float):
            raise Unsupported("aggregation of a number")
        modifier = agg.modifier
        groups: dict[SeriesKey, list[float]] = {}
        for key, value in vector.items():
            labels = _without_name(key)
            if modifier is None:
                group: SeriesKey = frozenset()
            elif modifier.type == pp.AggModifierType.By:
                group = frozenset(kv for kv in labels if kv[0] in modifier.labels)
            else:
                group = frozenset(kv for kv in labels if kv[0] not in modifier.labels)
            groups.setdefault(group, []).append(value)
        reduce = {"sum": sum, "max": max, "min": min, "count": len,
                  "avg": lambda vs: sum(vs) / len(vs),
                  "quantile": lambda vs: _quantile(quantile, vs)}.get(op)
        if reduce is None:
            raise Unsupported(f"aggregation {op}")
        return {k: float(reduce(vs)) for k, vs in groups.items()}  # type: ignore[operator]

    def _binary(self, node: Any, at: float) -> Vector | float:
        lhs, rhs = self._eval(node.lhs, at), self._eval(node.rhs, at)
        op = str(node.op)
        if op == "or":  # every series of the left, and those of the right whose labels it lacks
            if isinstance(lhs, float) or isinstance(rhs, float):
                raise Unsupported("or between numbers")
            have = {_without_name(k) for k in lhs}
            return {**lhs, **{k: v for k, v in rhs.items() if _without_name(k) not in have}}
        if op in ("and", "unless"):  # the left's series with (without) a match on the right
            if isinstance(lhs, float) or isinstance(rhs, float):
                raise Unsupported(f"{op} between numbers")
            on = node.modifier.matching if node.modifier is not None else None
            if on is not None and on.type != pp.LabelModifierType.Include:
                raise Unsupported(f"{op} ignoring(...)")
            present = {_signature(k, on) for k in rhs}
            keep = op == "and"
            return {k: v for k, v in lhs.items() if (_signature(k, on) in present) == keep}
        if op in COMPARISONS:
            if node.modifier is not None and node.modifier.return_bool:
                raise Unsupported("comparison with bool")
            test = COMPARISONS[op]
            if isinstance(lhs, float) and isinstance(rhs, float):
                raise Unsupported("comparison between numbers without bool")
            if isinstance(rhs, float):  # a filter: the left's series for which it holds, as they are
                return {k: v for k, v in lhs.items() if test(v, rhs)}
            if isinstance(lhs, float):
                return {_without_name(k): v for k, v in rhs.items() if test(lhs, v)}
            # between vectors it filters too: the left's value where it holds, nothing where not
            fn: Callable[[float, float], float | None] = lambda a, b: a if test(a, b) else None  # noqa: E731
        else:
            arithmetic = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
                          "/": _divide}.get(op)
            if arithmetic is None:
                raise Unsupported(f"operator {op}")
            fn = arithmetic
        if isinstance(lhs, float) and isinstance(rhs, float):
            return fn(lhs, rhs)
        if isinstance(lhs, float):
            assert not isinstance(rhs, float)
            return {_without_name(k): fn(lhs, v) for k, v in rhs.items()}
        if isinstance(rhs, float):
            return {_without_name(k): fn(v, rhs) for k, v in lhs.items()}
        modifier = node.modifier
        card = modifier.card if modifier is not None else pp.VectorMatchCardinality.OneToOne
        matching = modifier.matching if modifier is not None else None
        if card not in (pp.VectorMatchCardinality.OneToOne, pp.VectorMatchCardinality.ManyToOne) or (
                matching is not None and matching.type != pp.LabelModifierType.Include):
            raise Unsupported("vector matching other than one-to-one or on(...) group_left(...)")
        copied = list(modifier.group_labels or ()) if modifier is not None else []  # group_left(node)
        right: dict[SeriesKey, tuple[float, SeriesKey]] = {}
        for k, v in rhs.items():
            if _signature(k, matching) in right:
                raise Unsupported("many-to-many matching: the right side has two series of one signature")
            right[_signature(k, matching)] = (v, _without_name(k))
        out: Vector = {}
        for k, v in lhs.items():
            sig = _signature(k, matching)
            if sig not in right:
                continue
            value, right_labels = right[sig]
            # one-to-one keeps the matched labels (all of them without on()); group_left the left's,
            # with the labels it names taken from the right
            if card == pp.VectorMatchCardinality.ManyToOne:
                labels = frozenset({**dict(_without_name(k)), **{n: v for n, v in right_labels if n in copied}}.items())
            else:
                labels = _without_name(k) if matching is None else sig
            if labels in out:
                raise Unsupported("many-to-one matching without group_left")
            result = fn(v, value)
            if result is not None:
                out[labels] = result
        return out


def _signature(key: SeriesKey, matching: Any) -> SeriesKey:
    """The labels two series are matched on: all but the name, or those ``on(...)`` names."""
    labels = _without_name(key)
    return labels if matching is None else frozenset(kv for kv in labels if kv[0] in matching.labels)


def _divide(a: float, b: float) -> float:
    """IEEE division, as Prometheus' (Go's): x/0 is +-Inf, 0/0 NaN."""
    if b:
        return a / b
    return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)


def _quantile(q: float, values: list[float]) -> float:
    """PromQL's ``quantile`` aggregation: linear interpolation between ranks (q beyond [0, 1]: +-Inf)."""
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    weight = rank - low
    return ordered[low] * (1 - weight) + ordered[high] * weight


def extrapolated_rate(points: list[tuple[float, float]], start: float, end: float, *, is_rate: bool) -> float | None:
    """Prometheus' ``extrapolatedRate`` (promql/functions.go) for a counter: the increase between
    the first and last sample, counter resets added back, extrapolated towards the window's edges
    (at most half an average scrape interval beyond a sample, and never below zero)."""
    if len(points) < 2:
        return None
    first_t, first = points[0]
    last_t, last = points[-1]
    result = last - first
    previous = first
    for _, value in points[1:]:
        if value < previous:  # a reset: the counter started again from zero
            result += previous
        previous = value
    to_start, to_end = first_t - start, end - last_t
    sampled = last_t - first_t
    if sampled <= 0:
        return None
    average = sampled / (len(points) - 1)
    if result > 0 and first >= 0:
        to_zero = sampled * (first / result)
        to_start = min(to_start, to_zero)
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    result *= interval / sampled
    return result / (end - start) if is_rate else result


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' ``bucketQuantile``: the quantile from cumulative bucket counts, linear within
    the bucket that holds it; NaN without observations or a +Inf bucket."""
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return math.nan
    total = ordered[-1][1]
    if total <= 0 or math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    rank = q * total
    index = next(i for i, (_, count) in enumerate(ordered) if count >= rank)
    if index == len(ordered) - 1:
        return ordered[-2][0]
    if index == 0 and ordered[0][0] <= 0:
        return ordered[0][0]
    start, below = (0.0, 0.0) if index == 0 else ordered[index - 1]
    end, count = ordered[index]
    count -= below
    rank -= below
    return start + (end - start) * (rank / count) if count else end
