"""Approval gates answered through Prefect's resume API, exactly as `rollout approve/reject` does
(``flows.approval.pending_gates`` + ``answer_gate``), from another thread while the flow waits."""

from __future__ import annotations

import pytest
import scenario as sc

from flows.approval import answer_gate, pending_gates
from rollout.journal import ApprovalOutcome
from rollout.names import ANN_ROLLOUT

pytestmark = pytest.mark.usefixtures("prefect_api")

GATED = dict(approval={"after": [0], "timeout": "60s", "onTimeout": "halt"})


def _answer(name: str, *, approved: bool, seen: list) -> bool:
    gates = pending_gates(name)
    if not gates:
        return False
    gate = gates[0]
    seen.append(gate)
    answer_gate(gate.flow_run_id, approved=approved, approver="alice", comment="looked at the canary")
    return True


def _assigned(gw) -> set[str]:
    return {n for n, o in sc.nodes(gw).items() if ANN_ROLLOUT in o.annotations}


def test_approve_continues_past_the_gate(tmp_path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        seen: list = []
        with sc.Background(lambda: _answer("gated-ok", approved=True, seen=seen)):
            outcome = sc.run(name="gated-ok", config=sc.config_text(gw, maxPods=90), policy=sc.policy(**GATED),
                             kubeconfig=str(c.kubeconfig), approval_poll_seconds=1)
        assert outcome.outcome == "completed", outcome.message
        assert len(seen) == 1
        gate = seen[0]
        # the gate shows the evidence: the canary's results, the diff and what comes next
        j = sc.journal(gw, "gated-ok")
        canary = j.plan.batches[0].nodes[0]
        assert canary in gate.description and "maxPods" in gate.description
        assert "Next: batch 2" in gate.description
        assert all(n in gate.description for n in j.plan.batches[1].nodes)
        record = j.batches[0].approval
        assert record.outcome is ApprovalOutcome.APPROVED and record.by == "alice"
        assert _assigned(gw) == set(j.plan.nodes)


def test_reject_halts_after_the_canary(tmp_path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        seen: list = []
        with sc.Background(lambda: _answer("gated-no", approved=False, seen=seen)):
            outcome = sc.run(name="gated-no", config=sc.config_text(gw, maxPods=91), policy=sc.policy(**GATED),
                             kubeconfig=str(c.kubeconfig), approval_poll_seconds=1)
        assert outcome.outcome == "halted", outcome.message
        assert "rejected by alice" in outcome.message
        j = sc.journal(gw, "gated-no")
        assert j.batches[0].approval.outcome is ApprovalOutcome.REJECTED
        assert _assigned(gw) == set(j.plan.batches[0].nodes)  # nothing after the gate


def test_reject_under_onreject_fail_reverts_the_canary(tmp_path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        before = {n: o.active for n, o in sc.nodes(gw).items()}
        seen: list = []
        gated = {**GATED, "approval": {**GATED["approval"], "onReject": "fail"}}
        with sc.Background(lambda: _answer("gated-undo", approved=False, seen=seen)):
            outcome = sc.run(name="gated-undo", config=sc.config_text(gw, maxPods=92), policy=sc.policy(**gated),
                             kubeconfig=str(c.kubeconfig), approval_poll_seconds=1)
        assert outcome.outcome == "reverted", outcome.message
        assert "onReject is fail" in outcome.message
        canary = set(sc.journal(gw, "gated-undo").plan.batches[0].nodes)
        after = sc.nodes(gw)
        assert all(after[n].spec_source is None and after[n].active == before[n] for n in canary)


def test_unanswered_gate_times_out_and_halts(tmp_path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        pol = sc.policy(approval={"after": [0], "timeout": "3s", "onTimeout": "halt"})
        outcome = sc.run(name="gated-late", config=sc.config_text(gw, maxPods=92), policy=pol,
                         kubeconfig=str(c.kubeconfig), approval_poll_seconds=1)
        assert outcome.outcome == "halted", outcome.message
        assert "nobody answered" in outcome.message
        j = sc.journal(gw, "gated-late")
        assert j.batches[0].approval.outcome is ApprovalOutcome.TIMED_OUT
        assert _assigned(gw) == set(j.plan.batches[0].nodes)


def _refuse_empty_then_approve(name: str, *, refusals: list) -> bool:
    """Resume the gate as an untouched form would (no input, then an empty approver): each is
    refused by the server and the gate keeps waiting; then answer it for real."""
    from prefect import resume_flow_run

    gates = pending_gates(name)
    if not gates:
        return False
    for untouched in ({}, {"decision": "approve", "approver": ""}):
        try:
            resume_flow_run(gates[0].flow_run_id, run_input=untouched)
        except RuntimeError as refused:
            refusals.append(str(refused))
        assert [g.flow_run_id for g in pending_gates(name)] == [gates[0].flow_run_id]  # still waiting
    answer_gate(gates[0].flow_run_id, approved=True, approver="carol", comment="canary p99 flat")
    return True


def test_an_untouched_answer_is_refused_not_taken_as_a_rejection(tmp_path) -> None:
    from flows.approval import Approval

    schema = Approval.model_json_schema()
    assert set(schema["required"]) >= {"decision", "approver"}
    assert all(schema["properties"][f].get("description") for f in ("decision", "approver", "comment"))
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        refusals: list = []
        with sc.Background(lambda: _refuse_empty_then_approve("gated-empty", refusals=refusals)):
            outcome = sc.run(name="gated-empty", config=sc.config_text(gw, maxPods=93), policy=sc.policy(**GATED),
                             kubeconfig=str(c.kubeconfig), approval_poll_seconds=1)
        assert len(refusals) == 2, refusals
        assert outcome.outcome == "completed", outcome.message
        record = sc.journal(gw, "gated-empty").batches[0].approval
        assert record.outcome is ApprovalOutcome.APPROVED and record.by == "carol"
        assert "approved by carol" in outcome.report and "canary p99 flat" in outcome.report
