"""The rollout flow end to end on kubesim: success, and the three ways a canary fails.

Each test starts its own small kubesim cluster (about a second) and runs the real flow against the
session's Prefect API; assertions look at the cluster (node spec/status, journal, audit log) and at
the run's report, never at call counts.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import scenario as sc

from rollout.model import NodePhase
from rollout.names import ANN_ASSIGNED_AT, ANN_BATCH, ANN_ROLLOUT

pytestmark = pytest.mark.usefixtures("prefect_api")


def test_success_every_node_assigned_active_and_promoted_in_plan_order(tmp_path) -> None:
    with sc.cluster(tmp_path, general=4) as c:
        gw = sc.gateway(c)
        text = sc.config_text(gw, maxPods=80)
        pol = sc.policy(done={"until": "lastKnownGood", "soak": "0s"}, progressDeadline="11m")
        before = len(c.audit_log.events())
        began = datetime.now(timezone.utc)
        outcome = sc.run(name="good", config=text, policy=pol, kubeconfig=str(c.kubeconfig))
        during = c.audit_log.events()[before:]

        assert outcome.outcome == "completed", outcome.message
        # start-up lists the nodes and their Leases once: the live view watches on from that list
        lists = [e["objectRef"]["resource"] for e in during if e.get("verb") == "list"
                 and not e["user"]["username"].startswith("system:")]
        assert sorted(lists) == ["leases", "nodes"], lists
        j = sc.journal(gw, "good")
        target = j.target
        assert target.uid and target.resource_version
        cm = gw.read_configmap(target.name, namespace=target.namespace)
        assert cm["data"]["kubelet"] == text and cm.get("immutable") is True
        observed = sc.nodes(gw)
        planned = list(j.plan.nodes)
        assert sorted(planned) == sc.workers(gw)  # the control-plane node is left out
        for name in planned:
            node = observed[name]
            assert target.same_reference(node.spec_source), name
            assert target.matches(node.assigned), (name, node.assigned)
            assert node.active == node.assigned == node.last_known_good, name
            assert node.error == "" and node.is_ready
            assert node.annotations[ANN_ROLLOUT] == "good"
        # batches ran in plan order: each batch's assignments after the previous batch's
        starts = [min(observed[n].annotations[ANN_ASSIGNED_AT] for n in b.nodes) for b in j.plan.batches]
        assert starts == sorted(starts) and len(j.plan.batches) >= 3
        for b in j.plan.batches:
            assert {observed[n].annotations[ANN_BATCH] for n in b.nodes} == {str(b.index)}
        # the report lists every batch, in order, with its nodes
        report = outcome.report
        positions = [report.index(f"| {b.index + 1} | {b.index + 1}") for b in j.plan.batches]
        assert positions == sorted(positions)
        assert "(canary)" in report and all(n in report for n in planned)
        # one assignment PATCH per node, and a Kubernetes Event on each node touched
        assert sc.assignment_patches(c) == {n: 1 for n in planned}
        assert sc.node_events(c, "KubeletConfigAssigned") == {n: 1 for n in planned}
        # Prefect artifacts: progress at 100 %, a table per batch, the final report
        arts = sc.artifacts("good-")
        assert arts["good-progress"].type == "progress" and float(arts["good-progress"].data) == 100.0
        for b in j.plan.batches:
            table = arts[f"good-batch-{b.index + 1}"]
            assert table.type == "table"
            rows = table.data if isinstance(table.data, list) else __import__("json").loads(table.data)
            assert sorted(r["node"] for r in rows) == sorted(b.nodes)
            assert {r["phase"] for r in rows} <= {"active", "promoted"} and all(r["lastKnownGood"] for r in rows)
        assert arts["good-report"].type == "markdown" and "completed" in arts["good-report"].data
        # the Prefect UI's graph: a task run per batch, named as the plan names it, each completed
        # (before: the graph showed only `prepare config` and `plan`)
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        with get_client(sync_client=True) as client:
            tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[outcome.flow_run_id])))
        batch_runs = {t.name: t for t in tasks if t.name.startswith("batch ")}
        assert sorted(batch_runs) == sorted(f"batch {b.name}" for b in j.plan.batches), sorted(t.name for t in tasks)
        assert all(t.state is not None and t.state.is_completed() for t in batch_runs.values())
        # Prefect events for automations
        names = [e["event"] for e in sc.prefect_events("kubelet-rollout.rollout.good", since=began, expect={
            "kubelet-rollout.batch.succeeded", "kubelet-rollout.rollout.completed"})]
        assert names.count("kubelet-rollout.batch.succeeded") == len(j.plan.batches)
        assert "kubelet-rollout.rollout.completed" in names


def _before(gw) -> dict:
    return {n: o.active for n, o in sc.nodes(gw).items()}


def _assert_canary_failed_and_reverted(gw, c, name: str, outcome, before: dict, phase: str) -> None:
    assert outcome.outcome == "reverted", outcome.message
    j = sc.journal(gw, name)
    canary = j.plan.batches[0].nodes
    assert len(canary) == 1
    assert canary[0] in outcome.message and phase in outcome.message
    # nothing beyond the canary was ever assigned
    assert set(sc.assignment_patches(c)) == set(canary)
    later = [n for b in j.plan.batches[1:] for n in b.nodes]
    observed = sc.nodes(gw)
    for n in later:
        assert observed[n].spec_source is None and ANN_ROLLOUT not in observed[n].annotations
    # the batch was reverted and every node's active config is back to what it was
    for n, o in observed.items():
        assert o.active == before[n], (n, o.active, before[n])
        assert o.is_ready, n
    assert j.nodes[canary[0]].reverting
    assert j.batches[0].status.value == "failed"
    assert "reverted" in outcome.report
    assert sc.node_events(c, "KubeletConfigReverted") == {canary[0]: 1}
    names = {e["event"] for e in sc.prefect_events(f"kubelet-rollout.rollout.{name}", expect={
        "kubelet-rollout.batch.failed", "kubelet-rollout.rollout.halted"})}
    assert {"kubelet-rollout.batch.failed", "kubelet-rollout.rollout.halted"} <= names


def test_config_rejected_by_the_kubelet_fails_the_canary_and_reverts_it(tmp_path) -> None:
    with sc.cluster(tmp_path, general=4) as c:
        gw = sc.gateway(c)
        before = _before(gw)
        # passes no validation of ours (skipped on purpose): the kubelet's own 1.23 validation
        # rejects it on the node and DKC falls back; the orchestrator must see it and revert.
        text = sc.config_text(gw, healthzPort=70000)
        outcome = sc.run(name="rejected", config=text, policy=sc.policy(), kubeconfig=str(c.kubeconfig),
                         skip_validation=True)
        _assert_canary_failed_and_reverted(gw, c, "rejected", outcome, before, NodePhase.FAILED_TO_VALIDATE.value)


def test_our_validation_refuses_the_same_config_before_any_write(tmp_path) -> None:
    with sc.cluster(tmp_path, general=2) as c:
        gw = sc.gateway(c)
        text = sc.config_text(gw, healthzPort=70000)
        outcome = sc.run(name="refused", config=text, policy=sc.policy(), kubeconfig=str(c.kubeconfig))
        assert outcome.outcome == "invalid" and "healthzPort" in outcome.message
        assert sc.assignment_patches(c) == {}
        assert gw.load_journal("refused") is None


def test_crash_looping_config_goes_notready_without_error_and_is_reverted(tmp_path) -> None:
    # every worker is a legacy host: the config validates, the kubelet dies at start
    with sc.cluster(tmp_path, general=0, legacy=4, node_monitor_grace="40s") as c:
        gw = sc.gateway(c)
        before = _before(gw)
        text = sc.config_text(gw, **sc.CRASHLOOP_ON_LEGACY)
        pol = sc.policy(allowFields=sorted(sc.CRASHLOOP_ON_LEGACY))
        outcome = sc.run(name="crashloop", config=text, policy=pol, kubeconfig=str(c.kubeconfig))
        _assert_canary_failed_and_reverted(gw, c, "crashloop", outcome, before, NodePhase.CRASH_LOOPING.value)
        assert "no config error" in outcome.message  # NotReady, no error string


def test_node_missing_its_deadline_times_out_and_is_reverted(tmp_path) -> None:
    # The workers are cut off from the API (partitioned): the canary never sees its assignment,
    # reports nothing and, with a long node-monitor grace and a generous lease rule, still looks
    # Ready, so only the progress deadline catches it. The partition heals once the revert is
    # written, and the node converges back.
    with sc.cluster(tmp_path, general=3, node_monitor_grace="1h") as c:
        gw = sc.gateway(c)
        before = _before(gw)
        text = sc.config_text(gw, maxPods=70)
        for n in sc.workers(gw):
            c.faults.partition(n)

        def heal_once_reverted() -> bool:
            observed = sc.nodes(gw)
            touched = [n for n, o in observed.items() if ANN_ROLLOUT in o.annotations]
            if touched and all(observed[n].spec_source is None for n in touched):
                for n in sc.workers(gw):
                    c.faults.heal(n)
                return True
            return False

        with sc.Background(heal_once_reverted):
            outcome = sc.run(name="timeout", config=text,
                             policy=sc.policy(progressDeadline="4s", leaseStaleAfter="10m"),
                             kubeconfig=str(c.kubeconfig))
        _assert_canary_failed_and_reverted(gw, c, "timeout", outcome, before, NodePhase.TIMED_OUT.value)


@pytest.mark.slow  # windows have minute resolution: waits up to ~75 s for the next minute
def test_local_run_waits_for_the_maintenance_window_before_any_batch(tmp_path) -> None:
    from datetime import datetime, timedelta, timezone

    with sc.cluster(tmp_path, general=2) as c:
        gw = sc.gateway(c)
        # the next minute boundary at least 5 s away (the run must start before it opens)
        now = datetime.now(timezone.utc)
        opens = (now + timedelta(seconds=5)).replace(second=0, microsecond=0) + timedelta(minutes=1)
        closes = opens + timedelta(minutes=30)
        window = {"timezone": "UTC", "windows": [{"start": opens.strftime("%H:%M"), "end": closes.strftime("%H:%M")}]}
        # the wait is longer than 3x leaseStaleAfter: the view must stay fresh through it
        outcome = sc.run(name="windowed-local", config=sc.config_text(gw, maxPods=71),
                         policy=sc.policy(maintenanceWindows=window, leaseStaleAfter="2s"),
                         kubeconfig=str(c.kubeconfig))
        assert outcome.outcome == "completed", outcome.message
        j = sc.journal(gw, "windowed-local")
        assert j.created_at < opens and not j.reverting_nodes()
        first = min(datetime.fromisoformat(o.annotations[ANN_ASSIGNED_AT].replace("Z", "+00:00"))
                    for o in sc.nodes(gw).values() if ANN_ROLLOUT in o.annotations)
        assert first >= opens  # no batch started before the window opened
