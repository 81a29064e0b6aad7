"""Analysis as a batch gate, end to end: kubesim (1.23) with its workloads, a real Prometheus
(Debian's, on loopback) scraping every kubelet through the node proxy with the ServiceAccount of
deployments/kubernetes/prometheus-rbac.yaml, and the real rollout flow asking it.

One cluster and one Prometheus for the module (tiny, on kubesim's 40x clock); each test rolls its
own config and every failing one is reverted, so the next starts from healthy nodes. Assertions
read the cluster (nodes, journal, evidence ConfigMaps), Prometheus, the run's report, its
artifacts and events, and `rollout status -o json` against its schema, never call counts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import scenario as sc
import yaml

from rollout.analysis import MeasurementVerdict
from rollout.journal import AnalysisVerdict, ApprovalOutcome
from rollout.names import analysis_configmap_name

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.usefixtures("prefect_api"),
]

# a kubelet creates kubelet_evictions at its first eviction: every scraped node a 0 until then
EVICTIONS = {"name": "evictions",
             "query": 'sum by (node) (kubelet_evictions{node=~"{{nodes}}"} or 0 * kubelet_running_pods{node=~"{{nodes}}"})',
             "condition": "< 1", "noData": "inconclusive", "interval": "2s", "count": 3}
RESTARTS = {"name": "restarts", "query": 'sum by (node) (kube_pod_container_status_restarts_total{node=~"{{nodes}}"})',
            "condition": "< 1", "noData": "pass", "interval": "2s", "count": 3}
P95 = 'histogram_quantile(0.95, sum by (le) (kubelet_pod_start_duration_seconds_bucket{node=~"{{nodes}}"}))'
POD_START_VS_CONTROL = {"name": "pod-start-vs-control", "query": P95, "condition": "<= 1.5 * control",
                        "noData": "inconclusive", "interval": "2s", "count": 3}
EVICTING = {"evictionHard": {"memory.available": "12Gi"}}  # a 16Gi host has about 10Gi free
SLOW_PULLS = {"serializeImagePulls": True}  # the hosts pull in parallel: one at a time is slower
# hosts whose pulls take 3 s and whose kubelets pull images in parallel (as many containerd setups)
CLUSTER = """\
apiVersion: kubesim.kubelet-rollout.io/v1
kind: Cluster
pools:
  - name: control-plane
    count: 1
    controlPlane: true
  - name: general
    count: {general}
    host: {{pullLatency: 3s}}
    kubelet: {{config: {{serializeImagePulls: false}}}}
  - name: legacy
    count: {legacy}
"""


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    with sc.cluster(tmp_path_factory.mktemp("analysis"), general=4, text=CLUSTER) as c, sc.prometheus(c) as prom:
        yield c, prom


def wait_for(probe: Any, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.3)


def up(prom: Any) -> dict[str, float]:
    return {r["metric"]["node"]: float(r["value"][1]) for r in prom.query('up{job="kubelet"} == 1')}


def relaunch(c: Any, prom: Any) -> None:
    """The module's Prometheus again after a test killed it, scraping every kubelet (its first
    scrapes come after it starts: a rollout asked sooner is refused, nothing measurable)."""
    prom.launch()
    sc.wait_until_scraping(c, prom)  # its targets, not its series: those from before the kill linger


def analysis_policy(*checks: dict[str, Any], **overrides: Any) -> str:
    analysis = {"checks": list(checks), "onInconclusive": "ask", **overrides.pop("analysis", {})}
    return sc.policy(steps=[1, "100%"], maxUnavailable=4, done={"soak": "1s"}, analysis=analysis,
                     nodes={"selector": "kubesim.kubelet-rollout.io/pool=general"}, **overrides)


def roll(c: Any, prom: Any, name: str, policy: str, **config: Any) -> Any:
    gw = sc.gateway(c)
    return sc.run_measured(c, prom, name=name, config=sc.config_text(gw, **config), policy=policy,
                           approval_poll_seconds=1)


def evidence(c: Any, name: str, batch: int) -> dict[str, Any]:
    gw = sc.gateway(c)
    cm = gw.read_configmap(analysis_configmap_name(name, batch))
    return dict(json.loads(cm["data"]["evidence.json"]))


def status_json(c: Any, name: str) -> dict[str, Any]:
    from rollout.usecases.status import rollout_status
    from rollout_cli.contract import validator

    status = rollout_status(sc.gateway(c), name)
    errors = [e.message for e in validator("rollout").iter_errors(json.loads(json.dumps(status)))]
    assert errors == [], errors
    return status


# ------------------------------------------------------------------------------ Prometheus itself


def test_prometheus_scrapes_every_node_through_the_node_proxy_and_follows_a_node_added_later(rig) -> None:
    c, prom = rig
    nodes = set(sc.nodes(sc.gateway(c)))
    assert set(up(prom)) == nodes
    # what it scraped is the kubelets' own: a per-node series of each kubelet metric
    running = {r["metric"]["node"] for r in prom.query("kubelet_running_pods")}
    assert running == nodes
    assert {r["metric"]["node"] for r in prom.query("kubelet_node_config_active")} == nodes
    c.add_node("general-late", like="general-1")
    wait_for(lambda: "general-late" in up(prom), timeout=60, what="the new node scraped")
    assert set(up(prom)) == nodes | {"general-late"}


def test_the_demo_grants_the_scraper_exactly_the_shipped_rbac() -> None:
    from rollout_cli.local.prometheus import SCRAPER_RBAC

    shipped = [d for d in yaml.safe_load_all((ROOT / "deployments/kubernetes/prometheus-rbac.yaml").read_text()) if d]
    assert shipped == SCRAPER_RBAC


# ------------------------------------------------------------------------------ analysis as a gate


def test_a_config_that_evicts_pods_fails_its_canary_by_analysis_while_every_node_stays_ready(rig) -> None:
    c, prom = rig
    gw = sc.gateway(c)
    outcome = roll(c, prom, "evicts", analysis_policy(EVICTIONS, RESTARTS), **EVICTING)
    assert outcome.outcome == "reverted", outcome.message
    j = sc.journal(gw, "evicts")
    canary = j.plan.batches[0].nodes[0]
    assert j.assigned_nodes() == [canary], "only the canary was changed"
    record = j.batches[0].analysis
    assert record is not None and record.verdict is AnalysisVerdict.FAILED
    assert record.nodes == (canary,) and canary in outcome.message and "evictions" in outcome.message
    # the kubelet never failed: no node went NotReady, the canary converged before it was judged
    assert all(n.is_ready for n in sc.nodes(gw).values())
    assert not [d for d in j.decisions if "crash" in d.reason or "NotReady" in d.reason]
    found = evidence(c, "evicts", 0)
    check = next(x for x in found["checks"] if x["name"] == "evictions")
    last = check["measurements"][-1]
    assert last["verdict"] == "fail" and last["nodes"] == [canary] and dict(last["values"])[canary] >= 1
    assert canary in last["query"] and "kubelet_evictions" in last["query"]
    # the same evidence everywhere: status -o json (schema-valid), the report, the artifacts, the event
    status = status_json(c, "evicts")
    assert status["analysis"][0]["verdict"] == "failed"
    assert status["analysis"][0]["checks"][0]["measurements"][-1]["nodes"] == [canary]
    assert "## Analysis" in outcome.report and "evictions" in outcome.report
    assert sc.artifacts("evicts-")["evicts-analysis-1"].type == "table"
    events = sc.prefect_events("kubelet-rollout.rollout.evicts", expect={"kubelet-rollout.batch.failed"})
    failed = next(e for e in events if e["event"] == "kubelet-rollout.batch.failed")
    assert failed["payload"]["analysis"]["checks"]["evictions"]["last"]["nodes"] == [canary]


def test_slower_pod_starts_fail_against_the_control_cohort_where_a_fixed_threshold_passes(rig) -> None:
    c, prom = rig
    gw = sc.gateway(c)
    fixed = {"name": "pod-start-under-10s", "query": P95, "condition": "< 10", "noData": "inconclusive",
             "interval": "2s", "count": 3, "dryRun": True}
    outcome = roll(c, prom, "slow-pulls", analysis_policy(POD_START_VS_CONTROL, fixed), **SLOW_PULLS)
    assert outcome.outcome == "reverted", outcome.message
    j = sc.journal(gw, "slow-pulls")
    assert len(j.assigned_nodes()) == 1
    found = {x["name"]: x for x in evidence(c, "slow-pulls", 0)["checks"]}
    compared = found["pod-start-vs-control"]["measurements"][-1]
    assert compared["verdict"] == "fail" and compared["control"] > 0
    assert compared["values"][0][1] > 1.5 * compared["control"]
    control = set(evidence(c, "slow-pulls", 0)["control"])
    assert control == set(j.plan.nodes) - set(j.assigned_nodes()), "the control cohort: the nodes not yet assigned"
    # a fixed threshold of 10 s would have passed the same canary (measured, never gating)
    assert found["pod-start-under-10s"]["failures"] == 0 and found["pod-start-under-10s"]["dryRun"]


def test_a_good_config_passes_every_check_and_dry_runs_and_no_data_do_what_they_say(rig) -> None:
    c, prom = rig
    gw = sc.gateway(c)
    missing = {"name": "no-such-metric", "query": 'sum(kubelet_no_such_metric{node=~"{{nodes}}"})',
               "condition": "< 1", "noData": "pass", "interval": "2s", "count": 2}
    dry = {"name": "pods-would-fail", "query": 'sum by (node) (kubelet_running_pods{node=~"{{nodes}}"})',
           "condition": "< 1", "noData": "inconclusive", "interval": "2s", "count": 2, "dryRun": True}
    outcome = roll(c, prom, "good", analysis_policy(EVICTIONS, RESTARTS, POD_START_VS_CONTROL, missing, dry),
                   maxPods=90)
    assert outcome.outcome == "completed", outcome.message
    j = sc.journal(gw, "good")
    assert [b.analysis.verdict for b in j.batches if b.analysis] == [AnalysisVerdict.PASSED] * 2
    canary = {x["name"]: x for x in evidence(c, "good", 0)["checks"]}
    assert canary["no-such-metric"]["measurements"][-1]["noData"] is True
    assert "noData: pass" in canary["no-such-metric"]["measurements"][-1]["reason"]
    assert canary["pods-would-fail"]["failures"] >= 1, "a dry-run check that fails is reported, never gates"
    last = {x["name"]: x for x in evidence(c, "good", 1)["checks"]}
    assert last["pod-start-vs-control"]["skipped"] == POD_START_VS_CONTROL["count"], "no control cohort is left for the last batch"
    status = status_json(c, "good")
    assert [a["verdict"] for a in status["analysis"]] == ["passed", "passed"]
    assert "pods-would-fail" in outcome.report


def shipped_checks(*names: str) -> list[dict[str, Any]]:
    """The shipped canary's checks as they are, measured every 2 s on this clock."""
    doc = yaml.safe_load((ROOT / "policies" / "canary.yaml").read_text())
    checks = {c["name"]: c for c in doc["analysis"]["checks"]}
    return [{**checks[n], "interval": "2s"} for n in names]


CAPACITY = ("allocatable-pods-vs-control", "allocatable-memory-vs-control")


def test_a_config_that_leaves_pods_no_room_fails_its_canary_by_the_shipped_capacity_checks(rig) -> None:
    """Issue 37: kubeReserved 11Gi and systemReserved 3.5Gi on 16Gi hosts keep every node Ready and
    leave the canary 1.4Gi allocatable, less than the control's nodes' pods request; the shipped
    check (kube-state-metrics' allocatable against the control's median node) fails it at once."""
    c, prom = rig
    gw = sc.gateway(c)
    outcome = roll(c, prom, "reserved", analysis_policy(*shipped_checks(*CAPACITY)),
                   kubeReserved={"memory": "11Gi"}, systemReserved={"memory": "3.5Gi"})
    assert outcome.outcome == "reverted", outcome.message
    j = sc.journal(gw, "reserved")
    canary = j.plan.batches[0].nodes[0]
    assert j.assigned_nodes() == [canary], "only the canary was changed"
    assert "allocatable-memory-vs-control" in outcome.message and canary in outcome.message
    assert all(n.is_ready for n in sc.nodes(gw).values())
    found = {x["name"]: x for x in evidence(c, "reserved", 0)["checks"]}
    failed = found["allocatable-memory-vs-control"]["measurements"][0]
    assert failed["verdict"] == "fail" and failed["nodes"] == [canary]
    assert 0 < dict(failed["values"])[canary] < 1  # the share of the control's median node's requests it can hold
    assert found["allocatable-pods-vs-control"]["failures"] == 0  # maxPods untouched: room for 110 pods


def test_a_config_with_room_to_spare_passes_the_shipped_capacity_checks_and_the_last_batch_skips_them(rig) -> None:
    c, prom = rig
    gw = sc.gateway(c)
    checks = shipped_checks(*CAPACITY, "image-pull-backoffs-vs-control", "container-restarts")
    outcome = roll(c, prom, "roomy", analysis_policy(*checks), kubeReserved={"memory": "1Gi"}, maxPods=60)
    assert outcome.outcome == "completed", outcome.message
    j = sc.journal(gw, "roomy")
    assert [b.analysis.verdict for b in j.batches if b.analysis] == [AnalysisVerdict.PASSED] * 2
    canary = {x["name"]: x for x in evidence(c, "roomy", 0)["checks"]}
    for name in CAPACITY:
        values = [v for m in canary[name]["measurements"] for _, v in m["values"]]
        assert values and min(values) > 2, (name, values)  # far above what the control's nodes hold
    last = {x["name"]: x for x in evidence(c, "roomy", 1)["checks"]}
    assert all(last[name]["skipped"] == last[name]["taken"] > 0 for name in CAPACITY), last


def test_a_query_with_no_data_fails_when_the_policy_says_so(rig) -> None:
    c, prom = rig
    missing = {"name": "no-such-metric", "query": 'sum(kubelet_no_such_metric{node=~"{{nodes}}"})',
               "condition": "< 1", "noData": "fail", "interval": "2s", "count": 2}
    outcome = roll(c, prom, "no-data", analysis_policy(missing), maxPods=91)
    assert outcome.outcome == "reverted", outcome.message
    assert "returned no data (noData: fail)" in outcome.message


def test_prometheus_killed_mid_soak_is_ridden_out_then_inconclusive_then_a_person_answers(rig) -> None:
    from flows.approval import answer_gate, pending_gates

    c, prom = rig
    gw = sc.gateway(c)
    policy = analysis_policy({**EVICTIONS, "count": 4},
                             analysis={"prometheus": {"outageTolerance": "4s"}}, approval={"timeout": "5m"})
    seen: dict[str, Any] = {}

    def kill_once_measured() -> bool:
        try:
            found = evidence(c, "outage", 0)
        except Exception:  # noqa: BLE001 - not begun yet
            return False
        if found["checks"][0]["taken"] >= 1 and "killed" not in seen:
            prom.kill()
            seen["killed"] = time.monotonic()
        return "killed" in seen

    asked: list[str] = []

    def approve_each_gate() -> bool:
        gates = pending_gates("outage")
        if gates:
            asked.append(gates[0].description)
            answer_gate(gates[0].flow_run_id, approved=True, approver="carol", comment="Prometheus was down; nodes fine")
        return False  # Prometheus stays down: the last batch's analysis is asked about too

    try:
        with sc.Background(kill_once_measured, every=0.2, timeout=120), \
                sc.Background(approve_each_gate, every=0.5, timeout=240):
            outcome = roll(c, prom, "outage", policy, maxPods=92)
    finally:
        relaunch(c, prom)  # the same Prometheus again, for the rest of the module
    seen["gate"] = asked[0]
    # one question per inconclusive batch, each answered (the second was once answered with the
    # first's answer, unasked: a gate key they shared)
    assert len(asked) == 2 and "analysis of batch 2 was inconclusive" in asked[1], asked
    assert outcome.outcome == "completed", outcome.message
    j = sc.journal(gw, "outage")
    record = j.batches[0].analysis
    assert record is not None and record.verdict is AnalysisVerdict.INCONCLUSIVE
    assert j.batches[0].approval is not None and j.batches[0].approval.outcome is ApprovalOutcome.APPROVED
    assert j.batches[0].approval.by == "carol"
    last = evidence(c, "outage", 0)["checks"][0]["measurements"][-1]
    assert last["verdict"] == MeasurementVerdict.INCONCLUSIVE.value and "out of reach" in last["reason"]
    assert "outageTolerance" in last["reason"]
    # ridden out first: the inconclusive measurement came no sooner than the tolerance after the kill
    inconclusive_at = last["at"]
    assert inconclusive_at
    assert "inconclusive" in seen["gate"] and "out of reach" in seen["gate"], seen["gate"][:2000]


def test_an_inconclusive_last_batch_is_asked_about_not_answered_with_the_gate_before_it(rig) -> None:
    """The gate before the last batch and the one about that batch's inconclusive analysis are two
    questions: each is asked, and each answer is recorded by who gave it. (Both once paused the flow
    run under one key, and Prefect hands a key it has paused on before that pause's answer: the
    second was answered with the first, nobody asked.)"""
    from flows.approval import answer_gate, pending_gates

    c, prom = rig
    gw = sc.gateway(c)
    policy = analysis_policy({**EVICTIONS, "count": 4}, analysis={"prometheus": {"outageTolerance": "4s"}},
                             approval={"after": "all", "timeout": "5m"})
    answers: list[tuple[str, str]] = []  # (gate, approver)

    def answer_each_gate() -> bool:
        gates = pending_gates("two-gates")
        if gates:
            approver = "carol" if not answers else "dave"
            answer_gate(gates[0].flow_run_id, approved=True, approver=approver, comment="looked at it")
            answers.append((gates[0].gate, approver))
        return len(answers) == 2

    def kill_once_the_last_batch_is_measured() -> bool:
        if not answers:
            return False
        try:
            found = evidence(c, "two-gates", 1)
        except Exception:  # noqa: BLE001 - not begun yet
            return False
        if found["checks"][0]["taken"] >= 1:
            prom.kill()
            return True
        return False

    try:
        with sc.Background(answer_each_gate, every=0.5, timeout=240), \
                sc.Background(kill_once_the_last_batch_is_measured, every=0.2, timeout=240):
            outcome = roll(c, prom, "two-gates", policy, maxPods=93)
    finally:
        relaunch(c, prom)
    assert outcome.outcome == "completed", outcome.message
    j = sc.journal(gw, "two-gates")
    assert len(j.batches) == 2
    assert j.batches[0].approval is not None and j.batches[0].approval.by == "carol"
    record = j.batches[1].analysis
    assert record is not None and record.verdict is AnalysisVerdict.INCONCLUSIVE, record
    assert j.batches[1].approval is not None and j.batches[1].approval.by == "dave", j.batches[1].approval
    assert [who for _, who in answers] == ["carol", "dave"]
    assert answers[0][0].endswith("-batch-2") and answers[1][0].endswith("-batch-2-analysis"), answers
