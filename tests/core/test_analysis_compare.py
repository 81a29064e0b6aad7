"""A ``compare:`` check (rule 4 of rollout.analysis.rules): the batch against the control cohort
by a rank test and an effect band. Tables for the verdicts and what the evidence says; the
policy's compare block at its boundary; and properties over simulated fleets, where a metric is
lognormal per pod with a factor per host (a slow disk, a busy neighbour):

* A/A: both cohorts from one distribution fail at most 1 - confidence of the time (measured
  about 0.1% with 10% host-to-host spread, 1 canary node x 30 pods against 20 nodes x 30);
* a shift well beyond the band is found (1.75x against a 20% band: about 98% per measurement);
* a shift of the whole fleet, both cohorts alike, changes nothing.

Each property runs its trials from a seed hypothesis draws, derandomized: the bounds are stable."""

from __future__ import annotations

import json
import math
import random
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.analysis import (
    BatchEvidence,
    CheckEvidence,
    Measurement,
    MeasurementVerdict,
    Sample,
    check_rows,
    evidence_event,
    evidence_from_data,
    evidence_lines,
    evidence_to_data,
    judge,
)
from rollout.errors import PolicyError
from rollout.policy import AnalysisCheck, load_policy_text
from rollout.usecases.status import measurement_json
from tests.conftest import HYPOTHESIS_PROFILE, examples

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=timezone.utc)
FULL = HYPOTHESIS_PROFILE != "check"


def compared(condition: str = "<= control", no_data: str = "inconclusive", *, fields: dict[str, object] | None = None,
             **compare: object) -> AnalysisCheck:
    return AnalysisCheck.model_validate({"name": "c", "query": 'x{node=~"{{nodes}}"}', "condition": condition,
                                         "noData": no_data, "compare": compare, **(fields or {})})


def fleet(rng: random.Random, *, nodes: int, pods: int, prefix: str, factor: float = 1.0, pod_sigma: float = 0.4,
          host_sigma: float = 0.05) -> list[Sample]:
    """Per pod samples of a lognormal metric, each node with its own host factor."""
    out = []
    for n in range(nodes):
        host = rng.gauss(0, host_sigma)
        out += [Sample({"node": f"{prefix}-{n}", "pod": f"p{p}"}, factor * math.exp(host + rng.gauss(0, pod_sigma)))
                for p in range(pods)]
    return out


def per_node(**values: float) -> list[Sample]:
    return [Sample({"node": n}, v) for n, v in values.items()]


def measure(check: AnalysisCheck, batch: list[Sample], control: list[Sample] | None) -> Measurement:
    return judge(check, at=NOW, query="q", samples=batch, control_query="cq", control_samples=control)


# -- the verdicts ------------------------------------------------------------------------------

CANARY = fleet(random.Random(1), nodes=1, pods=30, prefix="canary", factor=2.0)
SAME = fleet(random.Random(2), nodes=1, pods=30, prefix="canary")
SLIGHTLY = fleet(random.Random(3), nodes=1, pods=30, prefix="canary", factor=1.1)
CONTROL = fleet(random.Random(4), nodes=20, pods=30, prefix="node")
TEN_NODES = per_node(**{f"b-{i}": 2.0 + i / 100 for i in range(10)})
FORTY_NODES = per_node(**{f"c-{i}": 1.0 + i / 100 for i in range(40)})


@pytest.mark.parametrize(("check", "batch", "control", "verdict", "nodes"), [
    pytest.param(compared(), CANARY, CONTROL, MeasurementVerdict.FAIL, ("canary-0",),
                 id="one canary node, 30 pods twice as slow: fails, naming the node"),
    pytest.param(compared(), SAME, CONTROL, MeasurementVerdict.PASS, (), id="the same distribution passes"),
    pytest.param(compared(), SLIGHTLY, CONTROL, MeasurementVerdict.PASS, (), id="a shift within the band passes"),
    pytest.param(compared(effect="5%"), CANARY, CONTROL, MeasurementVerdict.FAIL, ("canary-0",),
                 id="a narrower band"),
    pytest.param(compared(effect="150%"), CANARY, CONTROL, MeasurementVerdict.PASS, (),
                 id="twice the control is within a 150% band"),
    pytest.param(compared(">= control"), CANARY, CONTROL, MeasurementVerdict.PASS, (),
                 id="higher is better: a higher batch passes"),
    pytest.param(compared(">= control"), CONTROL[:30], [Sample(s.labels, 2 * s.value) for s in CONTROL],
                 MeasurementVerdict.FAIL, ("node-0",), id="higher is better: a batch at half the control fails"),
    pytest.param(compared(effect=0.5), TEN_NODES, FORTY_NODES, MeasurementVerdict.FAIL,
                 tuple(f"b-{i}" for i in range(9, 4, -1)), id="per node, an amount: 10 nodes 1 above 40 fail, "
                 "naming the worst five"),
    pytest.param(compared(effect=1.5), TEN_NODES, FORTY_NODES, MeasurementVerdict.PASS, (),
                 id="per node, a shift within the amount passes"),
    pytest.param(compared(), per_node(a=1, b=1, c=1, d=1, e=1), per_node(**{f"c-{i}": 0 for i in range(20)}),
                 MeasurementVerdict.FAIL, tuple("abcde"),
                 id="errors where the control has none: an infinite ratio fails"),
])
def test_one_compared_measurement(check, batch, control, verdict, nodes) -> None:
    m = measure(check, batch, control)
    assert (m.verdict, m.nodes) == (verdict, nodes), m.reason
    assert m.comparison is not None and len(m.reason) <= 400


# hosts that differ a lot (host_sigma 0.6: the control's nodes run e^-1.2..e^1.2 of the fleet's median)
WIDE_CONTROL = fleet(random.Random(5), nodes=20, pods=30, prefix="node", host_sigma=0.6)


def test_a_canary_on_a_host_as_slow_as_the_controls_slow_hosts_passes_and_a_real_shift_still_fails() -> None:
    """Rule 4's host guard: 30 pods of one host are not 30 independent samples. A canary 2x the
    fleet's median is within the spread of the control's own hosts (the pooled test alone fails
    it); 10x is beyond it, and the reason says by how much."""
    slow_host = fleet(random.Random(6), nodes=1, pods=30, prefix="canary", factor=2.0)
    assert measure(compared(), slow_host, CONTROL).verdict is MeasurementVerdict.FAIL  # narrow hosts: beyond them
    passed = measure(compared(), slow_host, WIDE_CONTROL)
    assert passed.verdict is MeasurementVerdict.PASS and "spread of the control's hosts" in passed.reason, passed.reason
    assert passed.comparison is not None and passed.comparison.fails  # the pooled test alone would have failed it
    harmed = measure(compared(), fleet(random.Random(6), nodes=1, pods=30, prefix="canary", factor=10.0), WIDE_CONTROL)
    assert harmed.verdict is MeasurementVerdict.FAIL and "worst of 20 control hosts" in harmed.reason, harmed.reason


@pytest.mark.parametrize(("no_data", "verdict"), [
    ("pass", MeasurementVerdict.PASS), ("fail", MeasurementVerdict.FAIL),
    ("inconclusive", MeasurementVerdict.INCONCLUSIVE),
])
def test_too_few_values_in_a_cohort_is_what_no_data_says(no_data: str, verdict: MeasurementVerdict) -> None:
    m = measure(compared(no_data=no_data), CANARY[:4], CONTROL)
    assert (m.verdict, m.no_data) == (verdict, True)
    assert "too few values to compare: batch 4, control 600" in m.reason and "at least 5" in m.reason


def test_too_few_for_the_test_ever_to_reach_the_confidence_is_too_few() -> None:
    # one node per node: 1 value against 20 can never go below p = 1/21 > 0.02, whatever minSamples says
    m = measure(compared(minSamples=3), per_node(a=9), per_node(**{f"c-{i}": 1 for i in range(20)}))
    assert m.no_data and "too few" in m.reason


def test_the_evidence_names_the_test_its_statistic_the_estimate_both_cohorts_and_the_nodes() -> None:
    m = measure(compared(), CANARY, CONTROL)
    c = m.comparison
    assert c is not None
    assert (c.test, c.method, c.harmful.value, c.relative, c.batch.n, c.control.n) == \
        ("mann-whitney", "normal", "higher", True, 30, 600)
    assert c.p_value <= 0.02 and 1.2 < c.low < c.shift < c.high and c.band == pytest.approx(1.2)
    for said in ("mann-whitney p=", "U=", "shift x", "0.98 interval x", "band x1.2", "batch n=30 median",
                 "control n=600 median", "p95", "driven by canary-0"):
        assert said in m.reason, (said, m.reason)
    assert m.values == (("canary-0", pytest.approx(c.batch.median)),)  # a per-pod query: the node's median


def test_a_relative_effect_on_negative_values_is_inconclusive() -> None:
    m = measure(compared(), per_node(**{f"b-{i}": -1.0 for i in range(5)}), FORTY_NODES)
    assert m.verdict is MeasurementVerdict.INCONCLUSIVE and "say the effect as an amount" in m.reason


@pytest.mark.parametrize("effect_confidence", [0.5, 0.8, 0.99])
def test_effect_confidence_sets_the_hodges_lehmann_interval_and_not_the_p_value(effect_confidence: float) -> None:
    strict = measure(compared(), SLIGHTLY, CONTROL)
    judged = measure(compared(effectConfidence=effect_confidence), SLIGHTLY, CONTROL)
    assert strict.comparison is not None and judged.comparison is not None
    assert judged.comparison.p_value == strict.comparison.p_value
    assert judged.comparison.interval_confidence == effect_confidence
    if effect_confidence < 0.98:  # the default confidence's interval holds a narrower one
        assert strict.comparison.low <= judged.comparison.low <= judged.comparison.high <= strict.comparison.high
    else:
        assert judged.comparison.low <= strict.comparison.low <= strict.comparison.high <= judged.comparison.high
    assert f"({effect_confidence:g} interval" in judged.reason, judged.reason


def test_no_control_cohort_left_skips_a_compared_check_too() -> None:
    assert measure(compared(), CANARY, None).verdict is MeasurementVerdict.SKIPPED


def test_the_evidence_round_trips_with_its_comparison_and_stays_small() -> None:
    check = compared(fields={"count": 100, "failureLimit": 100})
    e = CheckEvidence.of(check)
    zeros = per_node(**{f"c-{i}": 0 for i in range(20)})
    for batch, control in ((CANARY, CONTROL), (SAME, CONTROL), (per_node(a=1, b=1, c=1, d=1, e=1), zeros)) * 4:
        e = e.with_measurement(measure(check, batch, control))
    assert e.condition == "<= control (mann-whitney at 0.98, effect 20%)"
    batch_evidence = BatchEvidence("r", 0, "batch 1 (canary)", NOW, ("canary-0",), ("node-0",), {"c": e})
    data = evidence_to_data(batch_evidence)
    assert len(data["evidence.json"]) < 20_000
    assert "Infinity" not in data["evidence.json"]  # JSON has none: "inf"
    assert evidence_from_data(data) == batch_evidence


def test_evidence_written_before_comparisons_existed_reads_as_it_did() -> None:
    plain = AnalysisCheck.model_validate({"name": "c", "query": 'x{node=~"{{nodes}}"}', "condition": "< 1",
                                          "noData": "pass"})
    e = CheckEvidence.of(plain).with_measurement(measure(plain, SAME, None))
    data = evidence_to_data(BatchEvidence("r", 0, "batch 1 (canary)", NOW, ("canary-0",), (), {"c": e}))
    assert "comparison" not in data["evidence.json"]
    assert evidence_from_data(data).checks["c"].measurements[0].comparison is None


def test_every_place_the_evidence_shows_names_the_shift_and_the_p_value() -> None:
    check = compared()
    e = CheckEvidence.of(check).with_measurement(measure(check, CANARY, CONTROL))
    batch_evidence = BatchEvidence("r", 0, "batch 1 (canary)", NOW, ("canary-0",), ("node-0",), {"c": e})
    row = check_rows(batch_evidence)[0]
    assert row["condition"] == "<= control (mann-whitney at 0.98, effect 20%)"
    assert "shift x" in row["values"] and "p=" in row["values"]
    assert "driven by canary-0" in evidence_lines(batch_evidence)[1]
    event = evidence_event(batch_evidence)["checks"]["c"]["last"]
    assert event["comparison"]["drivers"] == ["canary-0"] and event["comparison"]["test"] == "mann-whitney"


def test_the_status_json_of_a_compared_measurement_follows_its_schema() -> None:
    import jsonschema
    from referencing import Registry, Resource

    from rollout_cli.contract import SCHEMAS, schema

    registry = Registry().with_resources((schema(s)["$id"], Resource.from_contents(schema(s))) for s in SCHEMAS)
    measurement = jsonschema.Draft202012Validator({"$ref": schema("rollout")["$id"] + "#/$defs/measurement"},
                                                  registry=registry)
    for m in (measure(compared(), CANARY, CONTROL), measure(compared(), per_node(a=1, b=1, c=1, d=1, e=1),
                                                             per_node(**{f"c-{i}": 0 for i in range(20)}))):
        document = json.loads(json.dumps(measurement_json(m), default=str, allow_nan=False))
        measurement.validate(document)
    uncompared = measure(AnalysisCheck.model_validate({"name": "c", "query": 'x{node=~"{{nodes}}"}',
                                                       "condition": "< 1", "noData": "pass"}), SAME, None)
    assert measurement_json(uncompared)["comparison"] is None


# -- the properties ----------------------------------------------------------------------------

def trials(full: int) -> int:
    return full if FULL else full // 2


@settings(max_examples=examples(12) if FULL else 4, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32), pod_sigma=st.floats(0.2, 0.6), host_sigma=st.floats(0, 0.1),
       pods=st.integers(20, 40), control_nodes=st.integers(10, 30))
def test_a_a_both_cohorts_alike_fail_at_most_one_minus_the_confidence(seed, pod_sigma, host_sigma, pods,
                                                                       control_nodes) -> None:
    rng = random.Random(seed)
    check = compared()
    runs = trials(300)
    failed = sum(measure(check, fleet(rng, nodes=1, pods=pods, prefix="canary", pod_sigma=pod_sigma,
                                      host_sigma=host_sigma),
                         fleet(rng, nodes=control_nodes, pods=10, prefix="node", pod_sigma=pod_sigma,
                               host_sigma=host_sigma)).verdict is MeasurementVerdict.FAIL
                 for _ in range(runs))
    assert failed / runs <= 1 - 0.98


@settings(max_examples=examples(12) if FULL else 4, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32), factor=st.floats(1.75, 4), pod_sigma=st.floats(0.2, 0.4),
       host_sigma=st.floats(0, 0.05), pods=st.integers(30, 50), control_nodes=st.integers(10, 30))
def test_a_shift_well_beyond_the_band_is_found(seed, factor, pod_sigma, host_sigma, pods, control_nodes) -> None:
    rng = random.Random(seed)
    check = compared()
    runs = trials(60)
    found = sum(measure(check, fleet(rng, nodes=1, pods=pods, prefix="canary", factor=factor, pod_sigma=pod_sigma,
                                     host_sigma=host_sigma),
                        fleet(rng, nodes=control_nodes, pods=30, prefix="node", pod_sigma=pod_sigma,
                              host_sigma=host_sigma)).verdict is MeasurementVerdict.FAIL
                for _ in range(runs))
    assert found / runs >= 0.9


@settings(max_examples=examples(100), deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32), factor=st.floats(0.05, 20), canary_factor=st.sampled_from([1.0, 1.3, 3.0]),
       amount=st.floats(-5, 5))
def test_a_shift_of_the_whole_fleet_changes_nothing(seed, factor, canary_factor, amount) -> None:
    rng = random.Random(seed)
    batch = fleet(rng, nodes=1, pods=20, prefix="canary", factor=canary_factor)
    control = fleet(rng, nodes=10, pods=10, prefix="node")

    def scaled(samples: list[Sample], by: float = 1.0, plus: float = 0.0) -> list[Sample]:
        return [Sample(s.labels, s.value * by + plus) for s in samples]

    for check, moved in ((compared(), lambda s: scaled(s, by=factor)),
                         (compared(effect=0.3), lambda s: scaled(s, plus=amount))):
        before, after = measure(check, batch, control), measure(check, moved(batch), moved(control))
        assert before.comparison is not None and after.comparison is not None
        assert after.verdict is before.verdict
        assert after.comparison.p_value == pytest.approx(before.comparison.p_value)
        if check.compare is not None and check.compare.relative:
            assert after.comparison.shift == pytest.approx(before.comparison.shift)


# -- the policy --------------------------------------------------------------------------------

def test_compare_defaults() -> None:
    compare = compared().compare
    assert compare is not None
    assert (compare.test.value, compare.confidence, compare.effect, compare.min_samples, compare.band) == \
        ("mann-whitney", 0.98, "20%", 5, pytest.approx(1.2))
    amount = compared(effect=0.5).compare
    assert amount is not None and amount.band == 0.5 and not amount.relative


@pytest.mark.parametrize(("lines", "problem"), [
    pytest.param('condition: "<= control"\n      compare: {confidnce: 0.9}',
                 "line 8: analysis.checks.0.compare.confidnce: unknown field; did you mean 'confidence'", id="a typo"),
    pytest.param('condition: "<= control"\n      compare: {test: t-test}', "analysis.checks.0.compare.test: Input "
                 "should be 'mann-whitney'", id="an unknown test"),
    pytest.param('condition: "<= control"\n      compare: {confidence: 0.5}', "compare.confidence: Input should be "
                 "greater than or equal to 0.8", id="a confidence too low"),
    pytest.param('condition: "<= control"\n      compare: {confidence: 1}', "compare.confidence: Input should be "
                 "less than or equal to 0.999", id="a confidence of 1"),
    pytest.param('condition: "<= control"\n      compare: {effect: 1.2x}', "compare.effect: a relative shift ('20%'",
                 id="an effect neither percent nor amount"),
    pytest.param('condition: "<= control"\n      compare: {effect: -1}', "compare.effect: an amount of at least 0",
                 id="a negative amount"),
    pytest.param('condition: "<= control"\n      compare: {minSamples: 2}', "compare.minSamples: Input should be "
                 "greater than or equal to 3", id="too few samples asked"),
    pytest.param('condition: "<= 1.5 * control"\n      compare: {}', "line 8: analysis.checks.0.compare: the shift "
                 "tolerated is compare.effect ('50%' for 1.5 * control", id="a band in the condition too"),
    pytest.param('condition: "== control"\n      compare: {}', "the condition says which way is harmful",
                 id="no harmful direction"),
    pytest.param('condition: "< 3"\n      compare: {}', "compares against the control cohort", id="no control"),
])
def test_a_bad_compare_block_is_one_error_naming_the_file_line_and_field(lines: str, problem: str) -> None:
    text = (f"name: p\nanalysis:\n  checks:\n    - name: c\n      query: 'x{{node=~\"{{{{nodes}}}}\"}}'\n"
            f"      noData: pass\n      {lines}\n")
    with pytest.raises(PolicyError) as raised:
        load_policy_text(text, source="mine.yaml")
    said = str(raised.value)
    assert "mine.yaml" in said and problem in said, said


BUCKETS = 'sum by (node, le) (increase(kubelet_pod_start_duration_seconds_bucket{node=~"{{nodes}}"}[{{window}}]))'


@pytest.mark.parametrize("query", [
    pytest.param(f"histogram_quantile(0.95, {BUCKETS})", id="a p95 of the buckets"),
    pytest.param('2 * histogram_quantile(0.5, rate(x_bucket{node=~"{{nodes}}"}[5m]))', id="a median, unaggregated"),
])
def test_a_compared_histogram_quantile_is_refused_naming_the_buckets_to_ask_for(query: str) -> None:
    text = (f"name: p\nanalysis:\n  checks:\n    - name: c\n      query: '{query}'\n      noData: pass\n"
            f"      condition: \"<= control\"\n      compare: {{}}\n")
    with pytest.raises(PolicyError) as raised:
        load_policy_text(text, source="mine.yaml")
    said = str(raised.value)
    assert "mine.yaml" in said and "line 8: analysis.checks.0.compare: compares each observation of a histogram: " \
        "query its buckets, e.g. 'sum by (node, le) (increase(NAME_bucket" in said, said
    assert "not a histogram_quantile of them (one value per node)" in said


@pytest.mark.parametrize(("condition", "compare"), [
    pytest.param("<= control", {}, id="the buckets compared"),
    pytest.param("<= 1.5 * control", None, id="a quantile against the control's median, uncompared"),
])
def test_buckets_compared_and_an_uncompared_quantile_are_valid(condition: str, compare: dict[str, object] | None) -> None:
    query = BUCKETS if compare is not None else f"histogram_quantile(0.95, {BUCKETS})"
    check = AnalysisCheck.model_validate({"name": "c", "query": query, "condition": condition, "noData": "pass",
                                          "compare": compare})
    assert (check.compare is not None) == (compare is not None)
