"""The policy's ``analysis:`` section: PromQL checks that judge a batch by its workloads.

Why in the policy: what makes a kubelet change harmful is mostly invisible in ``Node.status``
(pods evicted while the node stays Ready, slow pod starts, images collected and pulled again), so
a batch may also have to pass named metric checks during its soak, as Argo Rollouts' analysis and
Flagger's metric templates let a step pass. Every rule their users asked to be explicit is a field
here: what a query without data means (``noData``, no default), what an inconclusive result does
(``onInconclusive``), trying a check without consequences (``dryRun``), and comparing the batch
against the **control cohort**, the taking-part nodes not yet assigned, measured by the same query
in the same window (``condition: "<= 1.5 * control"``), value by value against its median or, with
``compare:``, statistically (a rank test with an effect-size band: ``Compare``).

Queries are templates, checked when the policy is loaded (they must parse as PromQL once
rendered): ``{{nodes}}`` is a regex matching the batch's nodes, ``{{control}}`` the control
cohort's, ``{{interval}}`` the check's interval, ``{{window}}`` the time since the analysis began
and ``{{sinceWrite}}`` the time since the batch's first write (a range from the kubelets' restart
onto the config: what they did as they started, before the analysis began), all three as PromQL
durations. ``{{restartedSinceWrite}}`` is the nodes (of ``{{nodes}}``) whose kubelet started after
the write: a counter since the write is the counter itself on those (it started again from nothing)
and its ``increase()`` on the others. The verdict rules live in ``rollout.analysis``.
"""

from __future__ import annotations

import enum
import math
import operator
import re
from dataclasses import dataclass
from datetime import timedelta
from collections.abc import Collection, Sequence
from typing import Annotated, Callable

import promql_parser
from pydantic import AfterValidator, Field, StrictFloat, StrictInt, ValidationInfo, field_validator, model_validator

from rollout.policy.base import FieldName, PolicyModel
from rollout.policy.durations import Duration, format_duration

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]+)\s*\}\}")
PLACEHOLDERS = ("nodes", "control", "interval", "window", "sinceWrite", "restartedSinceWrite")
# A placeholder that takes an argument: {{name(argument)}}, the argument up to the first ")}}".
ARGUMENT_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]+)\s*\((?P<argument>.*?)\)\s*\}\}")
ARGUMENT_PLACEHOLDERS = ("increaseSinceWrite",)
# The nodes whose kubelet started after the batch's write: its process_start_time_seconds (which
# every Kubernetes component serves) later now than it was then. Why it matters: a restarted
# kubelet's labelled counter is gone until its first increment and comes back counting from
# nothing, and once it passes the old process's count increase() sees no reset (42, then 45: an
# increase of 3, not 45), in Prometheus as in any range that skips the staleness marker.
RESTARTED_SINCE_WRITE = ('process_start_time_seconds{{node=~"{nodes}"}} > '
                         'process_start_time_seconds{{node=~"{nodes}"}} offset {since_write}')
# {{increaseSinceWrite(COUNTER)}}: how much a counter grew on each of the query's nodes since the
# batch's write, one value per node. A node whose kubelet restarted since counts by the counter
# itself (above), any other by its increase; a node without the counter counts 0 (a kubelet's
# labelled counter exists from its first increment), by a series every scraped node has. The 0 is
# inside the sum: `or` matches whole label sets, and outside it a node had a 0 beside its count.
INCREASE_SINCE_WRITE = ('sum by (node) ((increase({counter}[{since_write}]) unless on (node) ({restarted})) '
                        'or ({counter} and on (node) ({restarted})) '
                        'or 0 * process_start_time_seconds{{node=~"{nodes}"}})')


def _check_counter_selector(argument: str) -> None:
    """``{{increaseSinceWrite(...)}}``'s argument, checked when the policy loads: a counter's series
    selector (a metric name, optionally label matchers) that leaves the node to the placeholder."""
    try:
        parsed = promql_parser.parse(argument)
    except ValueError as exc:
        raise ValueError(f"{{{{increaseSinceWrite({argument})}}}}: not a series selector: {exc}") from None
    if not isinstance(parsed, promql_parser.VectorSelector) or not parsed.name or parsed.offset or parsed.at:
        raise ValueError(f"{{{{increaseSinceWrite({argument})}}}}: the argument is a counter's series selector, "
                         "a metric name with label matchers if any (e.g. kubelet_evictions or "
                         "kubelet_runtime_operations_total{operation_type=\"remove_image\"})")
    if any(m.name == "node" for m in parsed.matchers.matchers):
        raise ValueError(f"{{{{increaseSinceWrite({argument})}}}}: the placeholder selects the nodes itself: "
                         "leave node out of the matchers")


def _increase_since_write(argument: str, *, nodes: str, since_write: str, restarted: str) -> str:
    # the argument was checked at load (_check_counter_selector): name, then {matchers} if any
    name, _, matchers = argument.strip().partition("{")
    matchers = matchers.strip().removesuffix("}").strip().rstrip(",")
    counter = f'{name.strip()}{{node=~"{nodes}"' + (f", {matchers}" if matchers else "") + "}"
    return INCREASE_SINCE_WRITE.format(counter=counter, since_write=since_write, restarted=restarted, nodes=nodes)


_CONDITION = re.compile(
    r"^\s*(?P<op><=|>=|==|!=|<|>)\s*"
    r"(?:(?P<factor>\d+(?:\.\d+)?)\s*\*\s*)?(?P<rhs>control|-?\d+(?:\.\d+)?(?:e-?\d+)?)"
    r"(?:\s*(?P<sign>[+-])\s*(?P<offset>\d+(?:\.\d+)?))?\s*$"
)
# Scrapes of a kubelet a check's shortest window (one interval) must hold: rate() and increase() need
# two, and a kubelet restarting onto the config misses one. Fewer: no data, and noData decides.
MIN_SCRAPES_PER_WINDOW = 2
_EFFECT_PERCENT = re.compile(r"^(\d+(?:\.\d+)?)%$")
_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
}


class NoData(str, enum.Enum):
    """What a measurement whose query returned nothing (or only NaN) counts as."""

    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    PASS = "pass"


class OnInconclusive(str, enum.Enum):
    """What an inconclusive analysis does to the batch."""

    ASK = "ask"  # an approval gate with the evidence: a person decides (approve = pass)
    FAIL = "fail"  # the policy's failureAction, as for a failed check
    HALT = "halt"  # stop where it stands
    PASS = "pass"  # carry on as if it had passed (reported)


@dataclass(frozen=True)
class Condition:
    """``value OP bound`` where bound is a number or ``factor * control + offset``."""

    text: str
    op: str
    constant: float | None  # None: the bound is the control cohort's value
    factor: float = 1.0
    offset: float = 0.0

    @property
    def compares_control(self) -> bool:
        return self.constant is None

    def bound(self, control: float | None) -> float | None:
        """The value a sample is compared with (None: needs a control value and has none)."""
        if self.constant is not None:
            return self.constant
        return None if control is None else self.factor * control + self.offset

    def holds(self, value: float, bound: float) -> bool:
        return _OPERATORS[self.op](value, bound)

    @classmethod
    def parse(cls, text: str) -> Condition:
        match = _CONDITION.match(text)
        if match is None:
            raise ValueError(f"a condition like '< 1', '<= 0.05' or '<= 1.5 * control' (the control cohort), "
                             f"got {text!r}")
        offset = float(match["offset"] or 0) * (-1 if match["sign"] == "-" else 1)
        if match["rhs"] == "control":
            return cls(text.strip(), match["op"], None, float(match["factor"] or 1), offset)
        if match["factor"] or match["sign"]:
            raise ValueError(f"only the control cohort's value can be scaled or offset, got {text!r}")
        return cls(text.strip(), match["op"], float(match["rhs"]))


class StatisticalTest(str, enum.Enum):
    """How a ``compare:`` check tests the batch against the control cohort."""

    MANN_WHITNEY = "mann-whitney"  # a rank test: any distribution, outliers and ties welcome


class Baseline(str, enum.Enum):
    """What a ``compare:`` check compares the batch's values with."""

    NONE = "none"  # the control cohort's values in the same window (rule 4)
    BEFORE = "before"  # each node's values against its own before the batch's write: their changes (rule 4b)


# a range (or a subquery's) over the analysis window, as a ``baseline: before`` check reads it earlier
WINDOW_RANGE = re.compile(r"\[\s*\{\{\s*window\s*\}\}\s*(?P<step>:[^\]]*)?\]")


def _check_effect(value: int | float | str) -> int | float | str:
    if isinstance(value, str):
        match = _EFFECT_PERCENT.match(value.strip())
        if match is None:
            raise ValueError("a relative shift ('20%': the batch's values 1.2 times the control's) or an amount "
                             f"in the metric's unit (0.5), got {value!r}")
        if float(match.group(1)) > 1000:
            raise ValueError(f"a relative shift of at most 1000%, got {value!r}")
        return value.strip()
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"an amount of at least 0 in the metric's unit, or a relative shift ('20%'), got {value!r}")
    return value


# "20%" (relative, as a ratio: values 1.2x the control's, or 1/1.2x where lower is harmful) or an
# amount in the metric's unit (0.5)
Effect = Annotated[StrictInt | StrictFloat | str, AfterValidator(_check_effect)]


class Compare(PolicyModel):
    """Judge the batch's values against the control cohort's as two samples, not each value
    against the cohort's median: a measurement fails only when the test is ``confidence`` sure the
    batch is shifted the harmful way (the condition's operator says which) *and* the
    interval of the Hodges-Lehmann shift lies beyond ``effect``. Noise both cohorts share (host to
    host, pod to pod) then fails no batch, and a real shift does. A query for a histogram's
    buckets (``sum by (node, le) (increase(..._bucket[{{window}}]))``) gives a value per
    observation, so a one-node canary has one per pod start; a ``histogram_quantile`` of them (one
    value per node) is refused. The rules: ``rollout.analysis.rules`` (rule 4); the statistics:
    ``rollout.analysis.stats``.

    ``baseline: before`` judges change, not level (a difference in differences): each node's
    values against its own in a window as long before the batch's write (the same query, each
    ``[{{window}}]`` range or ``[{{window}}:step]`` subquery read that much earlier), and the batch
    nodes' changes against the control nodes' by a two-sample t test, the node the unit (rule 4b).
    A host slow before the write is as slow after it, and a fleet-wide shift moves the control's
    nodes as the batch's: neither is the config's. ``test``: rule 4's; changes take the t test."""

    test: StatisticalTest = StatisticalTest.MANN_WHITNEY
    confidence: Annotated[float, Field(ge=0.8, le=0.999)] = 0.98  # Kayenta's
    effect: Effect = "20%"
    # the interval that must lie wholly beyond ``effect`` is two-sided at this (default: ``confidence``):
    # lower asks less evidence of the effect's size than of the shift itself (0.5: the estimate alone)
    effect_confidence: Annotated[float, Field(ge=0.5, le=0.999)] | None = None
    # fewer values in either cohort and the test cannot tell: the measurement is what noData says
    min_samples: Annotated[int, Field(ge=3, le=10_000)] = 5
    baseline: Baseline = Baseline.NONE
    worst_node: bool = False  # baseline: before: a canary's worst node judged alone too (rule 4b)

    @property
    def interval_confidence(self) -> float:
        """The confidence of the shift's interval judged against the band."""
        return self.confidence if self.effect_confidence is None else self.effect_confidence

    @property
    def relative(self) -> bool:
        """The effect is a ratio (``"20%"``), judged on a log scale; else an amount."""
        return isinstance(self.effect, str)

    @property
    def band(self) -> float:
        """The largest shift tolerated: a ratio (1.2 for ``"20%"``) or an amount (0.5)."""
        if isinstance(self.effect, str):
            return 1 + float(self.effect.rstrip("%")) / 100
        return float(self.effect)

    def describe(self) -> str:
        test = "t test of node changes (baseline: before)" if self.baseline is Baseline.BEFORE else self.test.value
        beyond = "" if self.effect_confidence is None else f", its interval at {self.effect_confidence:g}"
        return f"{test} at {self.confidence:g}, effect {self.effect}{beyond}"


def prometheus_duration(value: timedelta) -> str:
    """A duration as PromQL writes it (``1m30s``, ``500ms``)."""
    ms = max(1, int(value.total_seconds() * 1000))
    if ms % 1000:
        return f"{ms}ms"
    return format_duration(timedelta(seconds=ms // 1000)).replace(" ", "")


def node_regex(names: tuple[str, ...] | list[str]) -> str:
    """A PromQL string (inside ``=~"..."``) matching exactly these node names."""
    # node names are DNS subdomains: only the dot means something to a regex (escaped twice: once
    # for the regex, once for the PromQL string it sits in)
    return "|".join(re.sub(r"([^A-Za-z0-9_-])", r"\\\\\1", n) for n in sorted(names)) or "^$"


def render_query(template: str, *, nodes: str, control: str, interval: timedelta, window: timedelta,
                 since_write: timedelta | None = None, before: timedelta | None = None) -> str:
    """``since_write``: ``{{sinceWrite}}`` (the window and the time from the write to the analysis'
    start; the window alone when not given). ``before``: the offset of a ``baseline: before``
    query's window (``{{before}}``, which only :func:`before_template` writes)."""
    since = prometheus_duration(since_write or window)
    values = {"nodes": nodes, "control": control, "interval": prometheus_duration(interval),
              "window": prometheus_duration(window), "sinceWrite": since,
              "restartedSinceWrite": RESTARTED_SINCE_WRITE.format(nodes=nodes, since_write=since)}
    if before is not None:
        values["before"] = prometheus_duration(before)
    template = ARGUMENT_PLACEHOLDER.sub(lambda m: _increase_since_write(
        m.group("argument"), nodes=nodes, since_write=since, restarted=values["restartedSinceWrite"]), template)
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def _rendered_sample(template: str) -> str:
    """The query as a batch of two nodes would run it: what validation parses."""
    return render_query(template, nodes="node-1|node-2", control="node-3", interval=timedelta(seconds=30),
                        window=timedelta(minutes=1), since_write=timedelta(minutes=1, seconds=20),
                        before=timedelta(minutes=1, seconds=20))


def _functions(template: str) -> set[str]:
    """The PromQL functions a (valid) query calls."""
    called: set[str] = set()

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.Call):
            called.add(node.func.name)

    promql_parser.walk(promql_parser.parse(_rendered_sample(template)), visit)
    return called


class CheckWhen(PolicyModel):
    """When a check is measured at all: ``changes``, only in a rollout whose config changes one of
    these fields (top-level KubeletConfiguration names) on a node taking part. For a check that
    watches one mechanism and is noisy elsewhere (how long pods wait for the image puller: a fleet
    that pulls one image at a time waits long on its own), so it gates the changes that can harm
    that way and costs the others no false halt. A rollout that changes none of them leaves the
    check out of its plan and says so (its caveats: a misspelt field shows there)."""

    changes: Annotated[tuple[FieldName, ...], Field(min_length=1)]

    def applies(self, changed: Collection[str]) -> bool:
        return any(f in changed for f in self.changes)


class AnalysisCheck(PolicyModel):
    """One named check, measured ``count`` times, every ``interval``, during the batch's soak."""

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    query: Annotated[str, Field(min_length=1, max_length=4000)]
    condition: str
    no_data: NoData  # required: a query without data must never silently pass or fail
    interval: Duration = timedelta(seconds=30)
    count: Annotated[int, Field(ge=1, le=1000)] = 3
    failure_limit: Annotated[int, Field(ge=0)] = 0
    inconclusive_limit: Annotated[int, Field(ge=0)] = 0
    dry_run: bool = False
    compare: Compare | None = None  # None: each value against the control's median (or a constant)
    when: CheckWhen | None = None  # None: in every rollout

    @field_validator("condition")
    @classmethod
    def _condition(cls, value: str) -> str:
        Condition.parse(value)
        return value

    @field_validator("compare")
    @classmethod
    def _compared(cls, value: Compare | None, info: ValidationInfo) -> Compare | None:
        condition = info.data.get("condition")
        if value is None or condition is None:  # a condition that does not parse is said on its own
            return value
        parsed = Condition.parse(condition)
        if not parsed.compares_control or parsed.op not in ("<", "<=", ">", ">="):
            raise ValueError(f"compares against the control cohort: the condition says which way is harmful, "
                             f"'<= control' (lower is better) or '>= control' (higher is), got {condition!r}")
        if parsed.factor != 1 or parsed.offset != 0:
            raise ValueError(f"the shift tolerated is compare.effect ('50%' for 1.5 * control, 0.5 for control + "
                             f"0.5): write the condition '{parsed.op} control', got {condition!r}")
        query = info.data.get("query")
        if query is not None and "histogram_quantile" in _functions(query):
            # a quantile is one value per node: a one-node canary could never reach minSamples
            raise ValueError("compares each observation of a histogram: query its buckets, e.g. 'sum by (node, le) "
                             "(increase(NAME_bucket{node=~\"{{nodes}}\"}[{{window}}]))', not a histogram_quantile "
                             "of them (one value per node)")
        if value.worst_node and value.baseline is not Baseline.BEFORE:
            raise ValueError("worstNode judges a canary node's change from its window before: add baseline: before")
        if query is not None and value.baseline is Baseline.BEFORE:
            if not WINDOW_RANGE.search(query) or re.search(r"\boffset\b", query):
                raise ValueError("baseline: before reads the query's [{{window}}] ranges a window earlier: the query "
                                 "needs one (e.g. increase(NAME_bucket{node=~\"{{nodes}}\"}[{{window}}])) and no "
                                 "offset of its own")
            try:
                promql_parser.parse(_rendered_sample(before_template(query)))
            except ValueError as exc:
                raise ValueError(f"read a window earlier, the query does not parse as PromQL: {exc}") from None
        return value

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        named = {m.group(1) for m in PLACEHOLDER.finditer(value)}
        called = {m.group(1): m.group("argument") for m in ARGUMENT_PLACEHOLDER.finditer(value)}
        unknown = sorted((named - set(PLACEHOLDERS)) | (set(called) - set(ARGUMENT_PLACEHOLDERS)))
        if unknown:
            raise ValueError(f"unknown placeholder {{{{{unknown[0]}}}}}; known: "
                             + ", ".join([*(f"{{{{{p}}}}}" for p in PLACEHOLDERS),
                                          *(f"{{{{{p}(COUNTER)}}}}" for p in ARGUMENT_PLACEHOLDERS)]))
        for argument in called.values():
            _check_counter_selector(argument)
        if "nodes" not in named and not called:
            raise ValueError("the query must select the batch's nodes with {{nodes}} (e.g. node=~\"{{nodes}}\")")
        try:
            promql_parser.parse(_rendered_sample(value))
        except ValueError as exc:
            raise ValueError(f"does not parse as PromQL: {exc}") from None
        return value

    @property
    def parsed_condition(self) -> Condition:
        return Condition.parse(self.condition)

    @property
    def reads_control(self) -> bool:
        """The query itself reads the control cohort (``{{control}}``): with none left, nothing to judge."""
        return any(m.group(1) == "control" for m in PLACEHOLDER.finditer(self.query))

    @property
    def window(self) -> timedelta:
        """How long the check measures: ``count`` intervals."""
        return self.interval * self.count

    @model_validator(mode="after")
    def _timing(self) -> AnalysisCheck:
        if self.interval <= timedelta(0):
            raise ValueError("interval: must be longer than 0s")
        return self


def check_queries(check: AnalysisCheck, *, nodes: Sequence[str], control: Sequence[str],
                  window: timedelta, since_write: timedelta = timedelta(0)) -> tuple[str, str]:
    """A check's query rendered for a batch's ``nodes``, and the same query for the ``control``
    cohort (``""`` when the condition does not compare with the control): the control's query asks
    of the cohort's nodes what the batch's asks of the batch, in the same window. ``since_write``:
    from the batch's first write to the analysis' start."""
    control_regex = node_regex(list(control))
    since = window + max(since_write, timedelta(0))
    query = render_query(check.query, nodes=node_regex(list(nodes)), control=control_regex,
                         interval=check.interval, window=window, since_write=since)
    if not check.parsed_condition.compares_control:
        return query, ""
    return query, render_query(check.query, nodes=control_regex, control=control_regex, interval=check.interval,
                               window=window, since_write=since)


def before_template(template: str) -> str:
    """A ``baseline: before`` check's query for the window before: each ``[{{window}}]`` range
    read ``offset {{before}}`` earlier (:func:`check_before_queries` says how much)."""
    return WINDOW_RANGE.sub(r"[{{window}}\g<step>] offset {{before}}", template)  # a range: no step, ""


def check_before_queries(check: AnalysisCheck, *, nodes: Sequence[str], control: Sequence[str], window: timedelta,
                         since_write: timedelta) -> tuple[str, str]:
    """:func:`check_queries` for the window before (``("", "")`` for a check without ``baseline:
    before``): as long as the analysis window, and ending at the batch's first write
    (``since_write`` before the analysis began), not at the analysis' start: the batch's kubelets
    restarted onto the config in between, and a window across a restart reads its reset counters
    wrongly (each bucket's ``increase`` extrapolated on its own)."""
    if check.compare is None or check.compare.baseline is not Baseline.BEFORE:
        return "", ""
    before = window + max(since_write, timedelta(0))
    template = before_template(check.query)
    control_regex = node_regex(list(control))
    query = render_query(template, nodes=node_regex(list(nodes)), control=control_regex, interval=check.interval,
                         window=window, before=before)
    return query, render_query(template, nodes=control_regex, control=control_regex, interval=check.interval,
                               window=window, before=before)


class PrometheusEndpoint(PolicyModel):
    """Where the checks are queried; ``rollout start --prometheus`` and the environment win."""

    address: str = ""  # e.g. http://prometheus.monitoring.svc:9090 ("" = from the flag/environment)
    bearer_token_file: str = ""
    ca_file: str = ""
    # an unreachable Prometheus is ridden out this long (as the API server is), then the
    # measurement is inconclusive
    outage_tolerance: Duration = timedelta(minutes=2)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        if value and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError(f"an http:// or https:// URL, got {value!r}")
        return value


class Analysis(PolicyModel):
    """The checks every batch passes during its soak (none: the batch is judged by its nodes only)."""

    checks: tuple[AnalysisCheck, ...] = ()
    on_inconclusive: OnInconclusive = OnInconclusive.ASK
    prometheus: PrometheusEndpoint = PrometheusEndpoint()

    @field_validator("checks")
    @classmethod
    def _unique(cls, checks: tuple[AnalysisCheck, ...]) -> tuple[AnalysisCheck, ...]:
        names = [c.name for c in checks]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"check names must be unique: {', '.join(twice)} appears twice")
        return checks

    @property
    def gating(self) -> tuple[AnalysisCheck, ...]:
        """The checks whose verdict decides (dry-run checks are measured and reported only)."""
        return tuple(c for c in self.checks if not c.dry_run)

    @property
    def enabled(self) -> bool:
        return bool(self.checks)

    def for_changes(self, changed: Collection[str] | None) -> tuple[Analysis, tuple[str, ...]]:
        """This analysis for a rollout whose config changes the fields ``changed`` (None: not
        known, every check stays), and a line for each check it leaves out (``CheckWhen``)."""
        if changed is None:
            return self, ()
        out = tuple(c for c in self.checks if c.when is not None and not c.when.applies(changed))
        if not out:
            return self, ()
        kept = tuple(c for c in self.checks if c not in out)
        said = tuple(f"analysis check {c.name} left out: the config changes none of {', '.join(c.when.changes)}"
                     for c in out if c.when is not None)
        return self.model_copy(update={"checks": kept}), said

    def too_short_for(self, scrape_interval: timedelta) -> tuple[AnalysisCheck, ...]:
        """The gating checks whose shortest window (one interval: their first measurement's)
        holds fewer than :data:`MIN_SCRAPES_PER_WINDOW` scrapes ``scrape_interval`` apart."""
        return tuple(c for c in self.gating if c.interval < scrape_interval * MIN_SCRAPES_PER_WINDOW)
