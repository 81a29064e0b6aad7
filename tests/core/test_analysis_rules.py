"""The analysis verdict rules (rollout.analysis.rules), as tables: one measurement, one check over
its measurements, one batch over its checks; and the policy's analysis section at its boundary
(conditions, templates, no data stated, bad PromQL named with file, line and field)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from rollout.analysis import (
    BatchEvidence,
    CheckEvidence,
    CheckVerdict,
    MeasurementVerdict,
    Sample,
    batch_analysis,
    evidence_from_data,
    evidence_to_data,
    judge,
    unreachable,
)
from rollout.analysis.evidence import KEPT_MEASUREMENTS
from rollout.errors import PolicyError
from rollout.journal import AnalysisVerdict
from rollout.policy import AnalysisCheck, Condition, load_policy_text
from rollout.policy.analysis import check_queries, node_regex, render_query

NOW = datetime(2026, 11, 24, 2, 0, tzinfo=timezone.utc)


def check(**fields: object) -> AnalysisCheck:
    body = {"name": "c", "query": 'x{node=~"{{nodes}}"}', "condition": "< 1", "noData": "inconclusive", **fields}
    return AnalysisCheck.model_validate(body)


def samples(**values: float) -> list[Sample]:
    return [Sample({"node": n}, v) for n, v in values.items()]


@pytest.mark.parametrize(("fields", "batch", "control", "verdict", "nodes"), [
    pytest.param({}, samples(a=0, b=0.5), None, MeasurementVerdict.PASS, (), id="every value meets the condition"),
    pytest.param({}, samples(a=0, b=3), None, MeasurementVerdict.FAIL, ("b",), id="a failure names the node"),
    pytest.param({"noData": "pass"}, [], None, MeasurementVerdict.PASS, (), id="no data: pass when the policy says"),
    pytest.param({"noData": "fail"}, [], None, MeasurementVerdict.FAIL, (), id="no data: fail when the policy says"),
    pytest.param({"noData": "inconclusive"}, [Sample({}, float("nan"))], None, MeasurementVerdict.INCONCLUSIVE, (),
                 id="only NaN is no data"),
    pytest.param({"condition": "<= 1.5 * control"}, samples(a=3), samples(x=1, y=2, z=4), MeasurementVerdict.PASS, (),
                 id="against the control cohort's median"),
    pytest.param({"condition": "<= 1.5 * control"}, samples(a=3.1), samples(x=1, y=2, z=4), MeasurementVerdict.FAIL,
                 ("a",), id="above 1.5 times the control fails"),
    pytest.param({"condition": "<= 1.5 * control", "noData": "fail"}, samples(a=1), [], MeasurementVerdict.FAIL, (),
                 id="a control without data is no data too"),
    pytest.param({"condition": "<= control + 2"}, samples(a=3.5), samples(x=2), MeasurementVerdict.PASS, (),
                 id="an offset from the control"),
    pytest.param({"condition": ">= 0.5 * control"}, samples(a=1, b=9, c=10), samples(x=10, y=10, z=11),
                 MeasurementVerdict.PASS, (), id="one host of the batch below: its median holds"),
    pytest.param({"condition": ">= 0.5 * control"}, samples(a=1, b=2, c=10), samples(x=10, y=10, z=11),
                 MeasurementVerdict.FAIL, ("a", "b"), id="the batch's median below fails, naming the nodes beyond"),
])
def test_one_measurement(fields, batch, control, verdict, nodes) -> None:
    c = check(**fields)
    compares = c.parsed_condition.compares_control
    m = judge(c, at=NOW, query="q", samples=batch, control_query="cq" if compares else "",
              control_samples=control if compares else None)
    assert (m.verdict, m.nodes) == (verdict, nodes), m.reason


def test_no_control_cohort_left_skips_the_comparison() -> None:
    m = judge(check(condition="<= 1.5 * control"), at=NOW, query="q", samples=samples(a=9), control_samples=None)
    assert m.verdict is MeasurementVerdict.SKIPPED and "no control cohort" in m.reason


@pytest.mark.parametrize(("control_nodes", "canary", "compared"), [
    (5, False, True), (4, False, False), (2, False, False), (0, False, False),
    (4, True, True), (1, True, True), (0, True, False), (None, False, True),
], ids=lambda v: repr(v))
@pytest.mark.parametrize("fields", [
    {"condition": "<= control + 4"},
    {"condition": "<= control", "compare": {"test": "mann-whitney", "effect": "20%"}},
    {"query": 'x{node=~"{{nodes}}"} / scalar(quantile(0.5, y{node=~"{{control}}"}))', "condition": ">= 1"},
], ids=("against-control", "compared", "reads-control"))
def test_a_batch_after_the_canary_is_judged_against_five_control_nodes_or_more(
        fields, control_nodes, canary, compared) -> None:
    """Rule 3's floor: fewer than five control nodes are no level for a batch after the canary (a
    cautious rollout's last batches halted harmless rollouts so); a canary is judged against any."""
    c = check(**fields)
    control = samples(**{f"c-{i}": 0 for i in range(max(control_nodes or 5, 1))})
    m = judge(c, at=NOW, query="q", samples=samples(a=9, b=9), control_query="cq", control_samples=control,
              control_nodes=control_nodes, canary=canary)
    assert (m.verdict is not MeasurementVerdict.SKIPPED) == compared, m.reason
    if not compared:
        assert m.reason == ("no control cohort left (every taking-part node is assigned): not compared"
                            if control_nodes == 0 else f"{control_nodes} control node(s) left, fewer than 5: "
                            "their median is no level to judge a batch after the canary by; not compared")


def test_a_constant_condition_is_judged_whatever_the_cohort() -> None:
    m = judge(check(condition="< 1"), at=NOW, query="q", samples=samples(a=9), control_nodes=1)
    assert m.verdict is MeasurementVerdict.FAIL


def measured(c: AnalysisCheck, *verdicts: str) -> CheckEvidence:
    e = CheckEvidence.of(c)
    for v in verdicts:
        values = {"pass": samples(a=0), "fail": samples(a=5)}.get(v)
        m = judge(c, at=NOW, query="q", samples=values) if values is not None else \
            unreachable(c, at=NOW, query="q", error="down")
        e = e.with_measurement(m)
    return e


@pytest.mark.parametrize(("fields", "seen", "verdict"), [
    pytest.param({"count": 3}, ("pass", "pass"), CheckVerdict.RUNNING, id="fewer than count: still measuring"),
    pytest.param({"count": 3}, ("pass",) * 3, CheckVerdict.PASSED, id="count measurements without failure pass"),
    pytest.param({"count": 3}, ("fail",), CheckVerdict.FAILED, id="one failure over a limit of 0 fails at once"),
    pytest.param({"count": 3, "failureLimit": 1}, ("fail", "pass", "pass"), CheckVerdict.PASSED,
                 id="failures within failureLimit pass"),
    pytest.param({"count": 3, "failureLimit": 1}, ("fail", "fail"), CheckVerdict.FAILED, id="past failureLimit fails"),
    pytest.param({"count": 3, "failureLimit": 1}, ("pass", "pass", "fail"), CheckVerdict.RUNNING,
                 id="a failed last measurement is measured again"),
    pytest.param({"count": 3, "failureLimit": 1}, ("pass", "pass", "fail", "fail"), CheckVerdict.FAILED,
                 id="a failed last measurement confirmed fails"),
    pytest.param({"count": 3, "failureLimit": 1}, ("pass", "pass", "fail", "pass"), CheckVerdict.PASSED,
                 id="a failed last measurement not confirmed passes"),
    pytest.param({"count": 3, "failureLimit": 2}, ("pass", "pass", "fail", "fail"), CheckVerdict.RUNNING,
                 id="measured again until past failureLimit"),
    pytest.param({"count": 3, "failureLimit": 2}, ("pass", "pass", "fail", "fail", "down"), CheckVerdict.INCONCLUSIVE,
                 id="measured again, inconclusive past inconclusiveLimit"),
    pytest.param({"count": 3}, ("down",), CheckVerdict.INCONCLUSIVE, id="one inconclusive over a limit of 0"),
    pytest.param({"count": 3, "inconclusiveLimit": 1}, ("down", "pass", "pass"), CheckVerdict.PASSED,
                 id="inconclusive within inconclusiveLimit"),
])
def test_one_check_over_its_measurements(fields, seen, verdict) -> None:
    c = check(**fields)
    assert measured(c, *seen).status(c).verdict is verdict


@pytest.mark.parametrize(("statuses", "expected"), [
    pytest.param({"a": ("pass",), "b": ("fail",)}, AnalysisVerdict.FAILED, id="one failed check fails the batch"),
    pytest.param({"a": ("pass",), "b": ("down",)}, AnalysisVerdict.INCONCLUSIVE, id="an inconclusive check"),
    pytest.param({"a": ("pass",), "b": ("pass",)}, AnalysisVerdict.PASSED, id="every check passed"),
    pytest.param({"a": ("pass",), "dry": ("fail",)}, AnalysisVerdict.PASSED, id="a dry-run failure never gates"),
    pytest.param({"a": ("pass",), "dry": ()}, None, id="a dry-run check still measuring holds the verdict"),
    pytest.param({"a": (), "b": ("fail",)}, AnalysisVerdict.FAILED, id="a failure does not wait for the others"),
])
def test_one_batch_over_its_checks(statuses, expected) -> None:
    checks = [check(name=n, count=1, dryRun=n == "dry") for n in statuses]
    found = {c.name: measured(c, *statuses[c.name]).status(c) for c in checks}
    assert batch_analysis(checks, found).verdict is expected


def test_evidence_keeps_the_last_measurements_and_every_count_and_round_trips() -> None:
    c = check(count=100, failureLimit=100)
    e = measured(c, *(["pass", "fail"] * 30))
    assert (e.taken, e.failures, len(e.measurements)) == (60, 30, KEPT_MEASUREMENTS)
    batch = BatchEvidence("r", 0, "batch 1 (canary)", NOW, ("a",), ("b", "c"), {"c": e}, "failed: x")
    data = evidence_to_data(batch)
    assert len(data["evidence.json"]) < 20_000
    assert evidence_from_data(data) == batch


@pytest.mark.parametrize(("text", "bound"), [
    ("< 1", 1.0), ("<= 0.05", 0.05), (">= 1.5 * control", 3.0), ("<= control - 0.5", 1.5), ("== control", 2.0),
])
def test_conditions(text: str, bound: float) -> None:
    assert Condition.parse(text).bound(2.0) == bound


def test_templates_render_the_cohorts_and_durations() -> None:
    rendered = render_query('rate(x{node=~"{{nodes}}"}[{{interval}}]) / on() y{node=~"{{ control }}"}[{{window}}]',
                            nodes=node_regex(["n-2", "n-1"]), control=node_regex(["a.b"]),
                            interval=timedelta(seconds=30), window=timedelta(minutes=1, seconds=30))
    assert rendered == 'rate(x{node=~"n-1|n-2"}[30s]) / on() y{node=~"a\\\\.b"}[1m30s]'


def test_the_restarted_nodes_are_the_queried_cohorts_since_the_write() -> None:
    """``{{restartedSinceWrite}}`` names the nodes of the query's own cohort whose kubelet started
    after the write: the control's query asks it of the control, not of the batch."""
    check = AnalysisCheck.model_validate({
        "name": "c", "condition": "<= control", "noData": "pass",
        "query": 'sum by (node) (c{node=~"{{nodes}}"} and on (node) ({{restartedSinceWrite}}))'})
    batch, control = check_queries(check, nodes=["n-1"], control=["n-2"], window=timedelta(minutes=2),
                                   since_write=timedelta(seconds=30))
    assert batch == ('sum by (node) (c{node=~"n-1"} and on (node) (process_start_time_seconds{node=~"n-1"} > '
                     'process_start_time_seconds{node=~"n-1"} offset 2m30s))')
    assert control == batch.replace("n-1", "n-2")


def test_a_counter_since_the_write_counts_a_restarted_node_by_its_counter_and_a_node_without_it_as_0() -> None:
    """``{{increaseSinceWrite(COUNTER)}}`` renders the whole rule for the query's own cohort: the
    node matcher added to the selector's, increase() where the kubelet did not restart, the counter
    itself where it did, and the 0 inside the sum (outside it, a node had a 0 beside its count)."""
    check = AnalysisCheck.model_validate({
        "name": "c", "condition": "<= control + 3", "noData": "pass",
        "query": '{{increaseSinceWrite(ops_total{kind="remove"})}}'})
    batch, control = check_queries(check, nodes=["n-1"], control=["n-2"], window=timedelta(minutes=2),
                                   since_write=timedelta(seconds=30))
    restarted = 'process_start_time_seconds{node=~"n-1"} > process_start_time_seconds{node=~"n-1"} offset 2m30s'
    counter = 'ops_total{node=~"n-1", kind="remove"}'
    assert batch == (f"sum by (node) ((increase({counter}[2m30s]) unless on (node) ({restarted})) "
                     f"or ({counter} and on (node) ({restarted})) "
                     f'or 0 * process_start_time_seconds{{node=~"n-1"}})')
    assert control == batch.replace("n-1", "n-2")
    plain = render_query("{{increaseSinceWrite(kubelet_evictions)}}", nodes="n-1", control="n-2",
                         interval=timedelta(seconds=30), window=timedelta(minutes=1))
    assert 'increase(kubelet_evictions{node=~"n-1"}[1m])' in plain


@pytest.mark.parametrize(("check_yaml", "problem"), [
    pytest.param('{name: c, query: "sum(rate(x{node=~\\"{{nodes}}\\"}[1m])", condition: "< 1", noData: pass}',
                 "line 4: analysis.checks.0.query: does not parse as PromQL", id="promql that does not parse"),
    pytest.param('{name: c, query: "x{node=~\\"{{nodes}}\\"}", condition: "< 1"}',
                 "analysis.checks.0.noData: Field required", id="no data must be stated"),
    pytest.param('{name: c, query: "x{node=~\\"{{nodes}}\\"}", condition: "< 1", noData: pass, dryrun: true}',
                 "unknown field; did you mean 'dryRun'", id="a mistyped field"),
    pytest.param('{name: c, query: "x{node=~\\"{{nodez}}\\"}", condition: "< 1", noData: pass}',
                 "unknown placeholder {{nodez}}", id="an unknown placeholder"),
    pytest.param('{name: c, query: "x", condition: "< 1", noData: pass}', "must select the batch's nodes",
                 id="a query that does not select the batch"),
    pytest.param("{name: c, query: '{{increaseSinceWrite(x{node=\"a\"})}}', condition: '< 1', noData: pass}",
                 "the placeholder selects the nodes itself", id="a counter since the write naming its node"),
    pytest.param("{name: c, query: '{{increaseSinceWrite(rate(x[1m]))}}', condition: '< 1', noData: pass}",
                 "the argument is a counter's series selector", id="a counter since the write of an expression"),
    pytest.param("{name: c, query: '{{increaseSince(x)}}', condition: '< 1', noData: pass}",
                 "unknown placeholder {{increaseSince}}", id="an unknown placeholder with an argument"),
    pytest.param('{name: c, query: "x{node=~\\"{{nodes}}\\"}", condition: "about 1", noData: pass}',
                 "a condition like", id="a condition that does not parse"),
])
def test_a_bad_analysis_section_is_one_error_naming_the_file_line_and_field(check_yaml: str, problem: str) -> None:
    text = f"name: p\nanalysis:\n  checks:\n    - {check_yaml}\n"
    with pytest.raises(PolicyError) as raised:
        load_policy_text(text, source="mine.yaml")
    said = str(raised.value) + "\n".join(getattr(raised.value, "problems", ()))
    assert "mine.yaml" in said and problem in said, said


def test_the_cli_refuses_a_bad_query_with_exit_2_and_no_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    policy = tmp_path / "bad.yaml"
    policy.write_text('analysis:\n  checks:\n    - name: c\n      query: "sum(x{node=~\\"{{nodes}}\\"}"\n'
                      '      condition: "< 1"\n      noData: pass\n')
    done = subprocess.run([sys.executable, "-m", "rollout_cli", "validate", "--policy", str(policy)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "bad.yaml" in done.stderr and "line 4: analysis.checks.0.query" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
