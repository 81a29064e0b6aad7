"""bench/judge_quality.py: its PromQL subset answers as Prometheus does, and a simulated canary of
a catalogued harm is halted by the shipped canary policy in its first batch while the same fleet
with the config written again (A/A) is not halted there, from the same seed."""

from __future__ import annotations

import math
import sys
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import judge_quality as jq  # noqa: E402
from promql_subset import Evaluator, Scrape, Unsupported, bucket_quantile, extrapolated_rate, series_key  # noqa: E402

from rollout.policy.analysis import check_queries  # noqa: E402


def _scrapes() -> list[Scrape]:
    def key(name: str, node: str, **labels: str):  # noqa: ANN202
        return series_key(name, [("node", node), *labels.items()])
    out = []
    for t in range(0, 130, 10):
        reset = 40 if t >= 60 else 0  # node b's counter restarted at 60 s (a kubelet restart)
        out.append(Scrape(float(t), {
            key("c", "a"): 2.0 * t, key("c", "b"): 1.0 * (t - reset) if t >= 60 else 1.0 * t,
            key("g", "a"): 5.0 + (t % 30), key("g", "b"): 7.0,
            key("h_bucket", "a", le="1"): float(t), key("h_bucket", "a", le="+Inf"): 2.0 * t,
        }))
    return out


def test_the_subset_computes_what_prometheus_computes() -> None:
    e = Evaluator(_scrapes())
    assert e.query('sum by (node) (increase(c{node="a"}[60s]))', 120) == [({"node": "a"}, 120.0)]
    # a counter reset is added back, as Prometheus does
    assert e.query('sum by (node) (increase(c{node="b"}[60s]))', 120) == [({"node": "b"}, 60.0)]
    assert e.query('sum by (node) (max_over_time(g{node=~"a|b"}[60s]))', 120) == [({"node": "a"}, 25.0),
                                                                                  ({"node": "b"}, 7.0)]
    assert e.query('sum by (node) (g{node="z"} or 0 * g{node=~"a|b"})', 120) == [({"node": "a"}, 0.0),
                                                                                 ({"node": "b"}, 0.0)]
    (median,) = e.query('histogram_quantile(0.5, sum by (le) (rate(h_bucket[60s])))', 120)
    assert median[1] == pytest.approx(1.0)
    with pytest.raises(Unsupported):
        e.query("label_replace(g, 'x', '$1', 'node', '(.*)')", 120)


def test_a_subquery_steps_at_multiples_of_its_step_from_the_range_s_start_inclusive() -> None:
    # Prometheus aligns a subquery's steps to the epoch, not to the query's time (engine.go)
    e = Evaluator(_scrapes())
    assert e.query('count_over_time(g{node="a"}[30s:20s])', 110) == [({"node": "a"}, 2.0)]  # 80, 100
    assert e.query('count_over_time(g{node="a"}[30s:20s])', 119) == [({"node": "a"}, 1.0)]  # 100
    assert e.query('count_over_time(g{node="a"}[50s:20s])', 110) == [({"node": "a"}, 3.0)]  # 60, 80, 100
    # g of a: 5 + t % 30; read 30 s earlier, the steps 40, 60, 80 hold 15, 5, 25
    assert e.query('min_over_time(g{node="a"}[60s:20s] offset 30s)', 120) == [({"node": "a"}, 5.0)]
    assert e.query('max_over_time(g{node="a"}[60s:20s] offset 30s)', 120) == [({"node": "a"}, 25.0)]
    # an expression inside: each step's rate over its own range
    assert e.query('max_over_time(rate(c{node="a"}[20s])[60s:20s])', 120) == [({"node": "a"}, 2.0)]


def test_resets_counts_a_counter_s_restarts_in_the_range_and_drops_a_restarted_node_s_steps() -> None:
    e = Evaluator(_scrapes())  # b's counter: 50 at 50 s, 20 at 60 s
    assert sorted(e.query('resets(c[25s])', 70), key=str) == [({"node": "a"}, 0.0), ({"node": "b"}, 1.0)]
    assert sorted(e.query('resets(c[25s])', 120), key=str) == [({"node": "a"}, 0.0), ({"node": "b"}, 0.0)]
    kept = 'max_over_time((rate(c[20s]) unless on (node) (resets(c[20s]) > 0))[60s:10s])'
    assert e.query(kept.replace("c[", 'c{node="b"}['), 120) == [({"node": "b"}, 1.0)]  # 70 s on: no reset
    assert e.query(kept.replace("c[", 'c{node="b"}[').replace("[60s:", "[10s:"), 70) == []  # steps 60, 70: each holds it


def test_the_subset_matches_vectors_on_labels_and_takes_quantiles_and_scalars() -> None:
    def key(name: str, node: str, **labels: str):  # noqa: ANN202
        return series_key(name, [("node", node), *labels.items()])
    e = Evaluator([Scrape(0.0, {
        key("req", "a", pod="p1", container="x"): 2.0, key("req", "a", pod="p1", container="y"): 3.0,
        key("req", "a", pod="p2", container="x"): 5.0, key("req", "b", pod="p3", container="x"): 7.0,
        key("phase", "a", pod="p1"): 1.0, key("phase", "a", pod="p2"): 0.0, key("phase", "b", pod="p3"): 1.0,
        key("alloc", "a"): 20.0, key("alloc", "b"): 0.0, key("alloc", "c"): 4.0,
    })])
    # a completed pod (phase 0) counts nothing: many-to-one on (pod), the left's labels kept
    assert sorted(e.query("sum by (node) (req * on (pod) group_left () max by (pod) (phase))", 0), key=str) == [
        ({"node": "a"}, 5.0), ({"node": "b"}, 7.0)]
    assert e.query("quantile(0.5, alloc)", 0) == [({}, 4.0)]  # linear between ranks, as Prometheus
    assert e.query("quantile(0.25, alloc)", 0) == [({}, 2.0)]
    assert e.query('alloc{node="a"} / scalar(alloc{node="c"})', 0) == [({"node": "a"}, 5.0)]
    assert math.isnan(e.query("scalar(alloc)", 0)[0][1])  # more than one series: NaN
    assert e.query('alloc{node="a"} / scalar(alloc{node="b"})', 0) == [({"node": "a"}, math.inf)]  # x/0: +Inf
    with pytest.raises(Unsupported):
        e.query("req * on (pod) phase", 0)  # two series of p1 on the left: needs group_left
    # group_left(node) takes the node from the right (kube-state-metrics' kube_pod_info)
    info = Evaluator([Scrape(0.0, {series_key("restarts", [("pod", "p1")]): 3.0,
                                   series_key("restarts", [("pod", "p9")]): 4.0,
                                   series_key("info", [("pod", "p1"), ("node", "a"), ("uid", "u1")]): 1.0})])
    assert info.query('sum by (node) (restarts * on (pod) group_left (node) info{node=~"a|b"})', 0) == [
        ({"node": "a"}, 3.0)]


def test_the_subset_filters_by_comparison_and_keeps_or_drops_series_with_and_and_unless() -> None:
    def key(name: str, node: str):  # noqa: ANN202
        return series_key(name, [("node", node)])
    e = Evaluator([Scrape(0.0, {key("start", "a"): 100.0, key("start", "b"): 100.0, key("c", "a"): 1.0,
                                key("c", "b"): 2.0}),
                   Scrape(60.0, {key("start", "a"): 100.0, key("start", "b"): 150.0, key("c", "a"): 3.0,
                                 key("c", "b"): 4.0})])
    assert e.query("start > start offset 60s", 60) == [({"node": "b"}, 150.0)]
    assert e.query("c > 3", 60) == [({"node": "b"}, 4.0)]
    assert e.query("c and on (node) (start > start offset 60s)", 60) == [({"node": "b"}, 4.0)]
    assert e.query("c unless on (node) (start > start offset 60s)", 60) == [({"node": "a"}, 3.0)]


def test_the_scrapes_keep_what_the_rendered_queries_read() -> None:
    """The benchmark keeps only the families the checks read: those a placeholder renders count too
    (without process_start_time_seconds every restarted canary was counted by increase())."""
    jq._init((), ["canary"])
    assert {"process_start_time_seconds", "kubelet_evictions", "kubelet_running_pods"} <= jq._WANTED


def test_the_shipped_counts_since_the_write_start_again_with_a_restarted_kubelet() -> None:
    """A restarted kubelet's labelled counter is absent until its first increment, then above where
    the old process left it (42, then 45 removals): Prometheus' increase() sees 3, not a reset. The
    shipped checks count a restarted node's counter itself, and the others' increase."""
    jq._init((), ["canary"])
    canary = {c.name: c for c in jq._POLICIES["canary"].analysis.checks}

    def key(name: str, node: str, **labels: str):  # noqa: ANN202
        # as Prometheus keeps a kubelet's series: its target's job and instance too, which `or`
        # matches on (a 0 `or`-ed beside a node's count outside the sum gave the node two values)
        return series_key(name, [("instance", node), ("job", "kubelet"), ("node", node), *labels.items()])
    removals = {"operation_type": "remove_image"}
    scrapes = []
    for t in range(0, 430, 10):
        restarted = t > 60  # node a's kubelet restarts onto the config at 60 s; node b's runs on
        series = {key("process_start_time_seconds", "a"): 60.0 if restarted else 0.0,
                  key("process_start_time_seconds", "b"): 0.0,
                  key("kubelet_running_pods", "a"): 10.0, key("kubelet_running_pods", "b"): 10.0,
                  key("kubelet_runtime_operations_total", "b", **removals): 30.0 + (5.0 if t >= 300 else 0.0)}
        if not restarted:
            series[key("kubelet_runtime_operations_total", "a", **removals)] = 42.0
        elif t >= 360:
            series[key("kubelet_runtime_operations_total", "a", **removals)] = 45.0
        scrapes.append(Scrape(float(t), series))
    query, control = check_queries(canary["image-removals-vs-control"], nodes=("a",), control=("b",),
                                   window=timedelta(minutes=5), since_write=timedelta(seconds=60))
    e = Evaluator(scrapes)
    assert e.query(query, 420) == [({"node": "a"}, 45.0)]
    ((labels, value),) = e.query(control, 420)
    assert labels == {"node": "b"} and value == pytest.approx(5.0, abs=1.0)  # increase(), extrapolated
    assert e.query(query, 300) == [({"node": "a"}, 0.0)]  # restarted, none removed yet: 0, not 42
    assert e.query(query.replace("process_start_time_seconds", "absent_metric"), 420) == [({"node": "a"}, 3.0)]


def test_extrapolation_and_quantiles_match_prometheus_edge_cases() -> None:
    # samples 10 s apart starting 5 s into a 60 s window: extrapolated half an interval at the start
    points = [(5.0 + 10 * i, 10.0 * i + 10) for i in range(6)]
    assert extrapolated_rate(points, 0.0, 60.0, is_rate=False) == pytest.approx(60.0)
    assert extrapolated_rate(points[:1], 0.0, 60.0, is_rate=False) is None
    assert math.isnan(bucket_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]))
    assert bucket_quantile(0.99, [(1.0, 1.0), (2.0, 1.0), (math.inf, 10.0)]) == 2.0  # in +Inf: the top bound


@pytest.mark.slow
def test_a_harm_is_halted_in_the_canary_and_the_same_fleet_is_not_halted_there_by_an_a_a() -> None:
    jq._init((), ["canary"])
    canary = jq._POLICIES["canary"]
    kinds = {s.name: s for s in jq.scenarios(31)}
    harmed = jq.simulate(kinds["eviction-hard"], "canary", canary, 7, 12, "1.31")
    # halted in the canary, nothing beyond it changed (the shipped canary: two nodes)
    assert harmed.halted_batch == 0 and harmed.changed == canary.steps[0] == 2 and "evictions" in harmed.checks, harmed
    assert harmed.verdict_s is not None and harmed.verdict_s <= canary.done.soak.total_seconds() + jq.RESTART_S
    fitted = jq.simulate(kinds["reserved-memory"], "canary", canary, 7, 12, "1.31")
    assert fitted.halted_batch == 0 and "allocatable-memory-vs-control" in fitted.checks, fitted
    same = jq.simulate(kinds["A/A"], "canary", canary, 7, 12, "1.31")
    assert same.halted_batch != 0, same
    # --canary-only: the same canary's verdict, and nothing written beyond the canary
    first = jq.simulate(kinds["A/A"], "canary", canary, 7, 12, "1.31", canary_only=True)
    assert first.halted_batch is None and first.changed == 2 and first.verdict_s == same.verdict_s, (first, same)


def test_each_scenario_is_judged_by_the_checks_its_change_would_plan() -> None:
    """As `rollout start` plans them: a check that watches the puller runs where the write changes it."""
    kinds = {s.name: s for s in jq.scenarios(31)}
    assert jq.changed_fields(kinds["A/A"]) == () and jq.changed_fields(kinds["A/A + shift"]) == ()
    assert jq.changed_fields(kinds["serialized-pulls"]) == ("serializeImagePulls",)
    assert jq.changed_fields(kinds["max-parallel-pulls"]) == ("maxParallelImagePulls",)
    assert jq.changed_fields(kinds["A/A pulls"]) == ("maxParallelImagePulls",)
    canary = jq.policies()["canary"]
    watched = {c.name for c in canary.analysis.checks if c.when is not None}
    assert watched == {"image-pull-wait-vs-control"}
    for name, runs in (("A/A", False), ("eviction-hard", False), ("serialized-pulls", True), ("A/A pulls", True)):
        kept, _ = canary.for_changes(jq.changed_fields(kinds[name]))
        assert ("image-pull-wait-vs-control" in {c.name for c in kept.analysis.checks}) is runs, name


@pytest.mark.slow
def test_a_starved_canary_carries_kubesims_truth_of_the_harm_and_a_harmless_one_none() -> None:
    """The benchmark counts a starved runtime's canaries where the harm was there (kubesim's own
    throttle, STARVED or slower on a canary node) apart from those whose pods left the CPUs idle."""
    jq._init((), ["canary"])
    canary = jq._POLICIES["canary"]
    kinds = {s.name: s for s in jq.scenarios(31)}
    starved = jq.simulate(kinds["runtime-cpu-starved"], "canary", canary, 13_000_000, 20, "1.31", canary_only=True)
    assert starved.halted_batch == 0 and starved.canary_starved_s > 0, starved
    same = jq.simulate(kinds["A/A"], "canary", canary, 13_000_000, 20, "1.31", canary_only=True)
    assert same.halted_batch is None and same.canary_starved_s == 0, same


def test_the_table_counts_the_canaries_where_a_starved_runtime_showed() -> None:
    def outcome(scenario: str, halted: int | None, starved_s: float) -> jq.Outcome:
        return jq.Outcome(scenario, "canary", 1, halted, 2, 100.0, canary_starved_s=starved_s)

    runs = [outcome("runtime-cpu-starved", 0, 120), outcome("runtime-cpu-starved", None, jq.SHOWED_S),
            outcome("runtime-cpu-starved", None, jq.SHOWED_S - 10), outcome("runtime-cpu-starved", 1, 0),
            outcome("image-gc", 0, 0), jq.Outcome("image-gc", "canary", 2, 0, 2, 550.0)]
    kinds = {s.name: s for s in jq.scenarios(31)}
    table = {r.scenario: r for r in jq.rows(runs, jq.policies(), kinds)}
    starved, gc = table["runtime-cpu-starved"], table["image-gc"]
    assert (starved.rollouts, starved.halted_in_canary, starved.showed, starved.caught_where_showed) == (4, 1, 2, 1)
    assert gc.showed is None and gc.caught_where_showed is None  # no truth for it: every canary carries it
    # a verdict past the soak (490 s after the write)
    assert (starved.late, gc.late, gc.verdict_s_max) == (0, 1, 550.0)
    assert "| 1 of 2 |" in jq.markdown(list(table.values()), {"rollouts": 0, "harm_rollouts": 4, "nodes": 20,
                                                               "version": "1.31", "seed": 1, "workers": 1,
                                                               "seconds": 1.0})
