"""The fleet's decisions, rule by rule (a table), then whole fleets against scripted cluster runs.

Each row builds a plan, the clusters' runs as Prefect would show them and a journal, asks
``step`` for the next action and checks its kind and the detail the rule is about. The scenario
tests at the bottom drive ``step`` in a loop the way the fleet flow does, with clusters whose
runs end as scripted, to pin what one decision cannot show: the stage order, soak and gates, the
failure actions end to end, and that no cluster is ever started twice.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from rollout.fleet import (
    MAX_ATTEMPTS,
    AbortRequest,
    AskApproval,
    ClusterRun,
    ClusterRuns,
    Finish,
    FleetAction,
    FleetJournal,
    FleetStatus,
    Gate,
    RestartRuns,
    RunKind,
    RunPhase,
    StartClusters,
    StartRollbacks,
    StopRuns,
    Wait,
    from_data,
    holder_from_data,
    holder_to_data,
    load_fleet_text,
    step,
    to_data,
)
from rollout.fleet.decide import LOCKED_RETRY
from rollout.journal import ApprovalOutcome
from rollout.lock import Holder, LockInfo
from rollout.outcome import Outcome

T0 = datetime(2024, 5, 6, 10, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)
M = timedelta(minutes=1)


def plan(*, stages: str = "- clusters: [c1]\n- clusters: [c2]\n- clusters: [c3]\n", **fields: Any) -> Any:
    text = ("clusters:\n" + "".join(f"  - {{name: c{i}, workPool: p{i}, identity: {{kubeSystemUID: uid-c{i}}}}}\n" for i in (1, 2, 3))
            + "stages:\n" + stages + "".join(f"{k}: {v}\n" for k, v in fields.items()))
    return load_fleet_text(text)


def journal(**changes: Any) -> FleetJournal:
    return replace(FleetJournal(rollout="f", digest="d", created_at=T0), **changes)


def run(cluster: str, outcome: Outcome | None = None, *, phase: RunPhase | None = None, ended: datetime = T0,
        kind: RunKind = RunKind.ROLLOUT, **changes: Any) -> ClusterRun:
    if phase is None:
        phase = RunPhase.ENDED if outcome is not None else RunPhase.RUNNING
    fields: dict[str, Any] = {"message": "why" if outcome and not outcome.ok else "", "attempts": 1,
                              "ended_at": ended if phase is RunPhase.ENDED else None, **changes}
    return ClusterRun(cluster=cluster, kind=kind, flow_run_id=f"{kind.value}-{cluster}", phase=phase,
                      outcome=outcome, **fields)


def runs(*items: ClusterRun) -> dict[str, ClusterRuns]:
    out: dict[str, ClusterRuns] = {}
    for item in items:
        held = out.get(item.cluster, ClusterRuns())
        out[item.cluster] = (replace(held, rollout=item) if item.kind is RunKind.ROLLOUT
                             else replace(held, rollback=item))
    return out


DONE = Outcome.COMPLETED


@dataclass
class Case:
    observed: dict[str, ClusterRuns]
    expect: type[FleetAction]
    detail: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    journal: dict[str, Any] = field(default_factory=dict)
    now: datetime = T0 + M
    abort: AbortRequest | None = None
    reason: str = ""


CASES = {
    "the canary cluster starts first, alone": Case(runs(), StartClusters, {"stage": 0, "clusters": ("c1",)}),
    "nothing else starts while the canary cluster runs": Case(runs(run("c1")), Wait, reason="waiting for c1"),
    "a canary cluster paused at its own gate is waited for": Case(runs(run("c1", phase=RunPhase.PAUSED)), Wait),
    "the next stage waits for the soak after the canary's end": Case(
        runs(run("c1", DONE, ended=T0)), Wait, {"until": T0 + 10 * M}, plan={"soak": "10m"}, now=T0 + 9 * M),
    "the soak passed: the next stage starts": Case(
        runs(run("c1", DONE, ended=T0)), StartClusters, {"stage": 1, "clusters": ("c2",)}, plan={"soak": "10m"},
        now=T0 + 10 * M),
    "a stage's soak runs from its last cluster's end": Case(
        runs(run("c1", DONE, ended=T0), run("c2", DONE, ended=T0 + 5 * M)), Wait, {"until": T0 + 15 * M},
        plan={"stages": "- clusters: [c1, c2]\n- clusters: [c3]\n", "soak": "10m"}, now=T0 + 12 * M,
        reason="soaking until 10:15:00"),
    "maxConcurrent caps the clusters of a stage running at once": Case(
        runs(run("c1", DONE)), StartClusters, {"clusters": ("c2",)},
        plan={"stages": "- clusters: [c1]\n- clusters: [c2, c3]\n", "maxConcurrent": 1}),
    "a slot freed by an ended cluster starts the next": Case(
        runs(run("c1", DONE), run("c2", DONE)), StartClusters, {"clusters": ("c3",)},
        plan={"stages": "- clusters: [c1]\n- clusters: [c2, c3]\n", "maxConcurrent": 1}),
    "a gate after the canary stage is asked once the soak passed": Case(
        runs(run("c1", DONE)), AskApproval, {"stage": 0, "next_stage": 1, "deadline": T0 + M + 24 * 60 * M},
        plan={"approval": "{after: [0]}"}),
    "a gate asked before keeps its first deadline (a re-run asks again)": Case(
        runs(run("c1", DONE)), AskApproval, {"deadline": T0 + 30 * M}, plan={"approval": "{after: [0]}"},
        journal={"gates": {0: Gate(asked_at=T0, deadline=T0 + 30 * M)}},
        now=T0 + 20 * M),
    "a rejected gate ends the fleet Rejected (onReject halt)": Case(
        runs(run("c1", DONE)), Finish, {"outcome": Outcome.REJECTED}, plan={"approval": "{after: [0]}"},
        journal={"gates": {0: Gate(
            asked_at=T0, deadline=T0 + M, outcome=ApprovalOutcome.REJECTED, by="bob", note="p99 up")}},
        reason="rejected by bob: p99 up"),
    "an unanswered gate past its deadline halts (onTimeout halt)": Case(
        runs(run("c1", DONE)), Finish, {"outcome": Outcome.HALTED}, plan={"approval": "{after: [0]}"},
        journal={"gates": {0: Gate(asked_at=T0, deadline=T0 + M)}},
        now=T0 + 2 * M, reason="nobody answered"),
    "onTimeout proceed: silence lets the next stage start": Case(
        runs(run("c1", DONE)), StartClusters, {"stage": 1}, plan={"approval": "{after: [0], onTimeout: proceed}"},
        journal={"gates": {0: Gate(asked_at=T0, deadline=T0 + M)}},
        now=T0 + 2 * M),
    "a failed cluster halts the fleet: nothing else starts": Case(
        runs(run("c1", DONE), run("c2", Outcome.REVERTED)), Finish, {"outcome": Outcome.HALTED},
        reason="c2: reverted: why; not started: c3"),
    "a cluster failed within the budget: the fleet goes on": Case(
        runs(run("c1", DONE), run("c2", Outcome.HALTED)), StartClusters, {"clusters": ("c3",)},
        plan={"failureBudget": 1}),
    "under halt, a cluster still running is waited for, none started": Case(
        runs(run("c1", DONE), run("c2", Outcome.REVERTED), run("c3")), Wait,
        plan={"stages": "- clusters: [c1]\n- clusters: [c2, c3]\n"}, reason="waiting for c3 to end"),
    "rollback: the completed clusters are rolled back through rollback runs": Case(
        runs(run("c1", DONE), run("c2", Outcome.REVERTED)), StartRollbacks, {"clusters": ("c1",)},
        plan={"failureAction": "rollback"}),
    "rollback: waits for the rollback runs": Case(
        runs(run("c1", DONE), run("c2", Outcome.REVERTED), run("c1", kind=RunKind.ROLLBACK)), Wait,
        plan={"failureAction": "rollback"}, reason="waiting for the rollback of c1"),
    "rollback: every completed cluster back, the fleet ends Reverted": Case(
        runs(run("c1", DONE), run("c2", Outcome.REVERTED), run("c1", Outcome.ROLLED_BACK, kind=RunKind.ROLLBACK)),
        Finish, {"outcome": Outcome.REVERTED}, plan={"failureAction": "rollback"}, reason="rolled back c1"),
    "rollback: a rollback that failed ends the fleet Failed, naming the cluster": Case(
        runs(run("c1", DONE), run("c2", Outcome.REVERTED), run("c1", Outcome.FAILED, kind=RunKind.ROLLBACK)),
        Finish, {"outcome": Outcome.FAILED}, plan={"failureAction": "rollback"}, reason="c1: failed: why"),
    "a run still running is never scheduled again, however long it is silent (Prefect says when it crashed)": Case(
        runs(run("c1", started_at=T0)), Wait, now=T0 + timedelta(hours=5)),
    "a crashed run is scheduled again (the same run)": Case(
        runs(run("c1", Outcome.CRASHED, message="its process sent no heartbeat for 90 s")), RestartRuns,
        reason="its process sent no heartbeat for 90 s"),
    "a crashed run past its attempts counts as failed": Case(
        runs(run("c1", Outcome.CRASHED, attempts=MAX_ATTEMPTS)), Finish, {"outcome": Outcome.HALTED}),
    "a run refused by its cluster's lock waits a minute, then runs again": Case(
        runs(run("c1", Outcome.LOCKED, ended=T0)), Wait, now=T0 + LOCKED_RETRY - S),
    "... and after that minute it is scheduled again": Case(
        runs(run("c1", Outcome.LOCKED, ended=T0)), RestartRuns, now=T0 + LOCKED_RETRY),
    "a deferred cluster (its maintenance window) is waited for, not failed": Case(
        runs(run("c1", Outcome.DEFERRED)), Wait),
    "an abort stops the runs under way, then the failure action": Case(
        runs(run("c1", DONE), run("c2")), StopRuns, {"runs": (run("c2"),)},
        abort=AbortRequest("r1", "alice", T0), reason="aborted by alice"),
    "an abort already applied is not applied again": Case(
        runs(run("c1", DONE), run("c2", Outcome.STOPPED)), Finish, {"outcome": Outcome.HALTED},
        journal={"status": FleetStatus.FAILING, "failure": "aborted by alice", "abort_id": "r1"},
        abort=AbortRequest("r1", "alice", T0)),
    "rollback after an abort also rolls back the clusters it stopped": Case(
        runs(run("c1", DONE), run("c2", Outcome.STOPPED)), StartRollbacks, {"clusters": ("c1", "c2")},
        plan={"failureAction": "rollback"},
        journal={"status": FleetStatus.FAILING, "failure": "aborted by alice", "abort_id": "r1"}),
    "a scheduled run (not started) is cancelled once the fleet fails": Case(
        runs(run("c1", DONE), run("c2", Outcome.REVERTED), run("c3", phase=RunPhase.SCHEDULED)), StopRuns,
        plan={"stages": "- clusters: [c1]\n- clusters: [c2, c3]\n"}),
    "every stage done: Completed": Case(runs(run("c1", DONE), run("c2", DONE), run("c3", DONE)), Finish,
                                        {"outcome": Outcome.COMPLETED}, reason="3/3 cluster(s) completed"),
    "a finished fleet repeats how it ended": Case(
        runs(), Finish, {"outcome": Outcome.HALTED},
        journal={"status": FleetStatus.ENDED, "outcome": Outcome.HALTED, "message": "earlier"}, reason="earlier"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_rule(case: Case) -> None:
    _, action = step(journal(**case.journal), plan(**case.plan), case.observed, now=case.now, abort=case.abort)
    assert isinstance(action, case.expect), action
    for key, value in case.detail.items():
        assert getattr(action, key) == value, (key, action)
    assert case.reason in action.reason


def test_what_a_decision_learns_is_folded_into_the_journal() -> None:
    p = plan(approval="{after: [0]}")
    asked, _ = step(journal(), p, runs(run("c1", DONE)), now=T0 + M)
    assert asked.gates[0].asked_at == T0 + M and asked.gates[0].outcome is None
    p = plan(stages="- clusters: [c1, c2]\n- clusters: [c3]\n")
    failing, _ = step(journal(), p, runs(run("c1", Outcome.REVERTED), run("c2")), now=T0 + M)
    assert failing.status is FleetStatus.FAILING and "c1: reverted: why" in failing.failure
    ended, _ = step(failing, p, runs(run("c1", Outcome.REVERTED), run("c2", DONE)), now=T0 + 2 * M)
    assert (ended.status, ended.outcome, ended.finished_at) == (FleetStatus.ENDED, Outcome.HALTED, T0 + 2 * M)


def test_the_journal_and_its_holder_read_back_as_written_and_whole() -> None:
    j = journal(status=FleetStatus.FAILING, failure="x" * 20_000, abort_id="r1",
                gates={stage: Gate(asked_at=T0, deadline=T0 + M, outcome=ApprovalOutcome.APPROVED, by="alice",
                                   note="n" * 500, decided_at=T0 + S) for stage in range(40)})
    holder = Holder(identity="f@h:1/r", rollout="f", host="h", pid=1, run="r", started="5", machine="m")
    info = LockInfo(holder=holder.identity, rollout="f", acquired=T0, renewed=T0 + S, duration_s=90,
                    resource_version="", held_by=holder)
    assert from_data(json.loads(json.dumps(to_data(j)))) == j  # nothing clipped, any number of gates
    assert holder_from_data("f", json.loads(json.dumps(holder_to_data(info)))) == info
    assert holder_to_data(None) is None and holder_from_data("f", None) is None


def test_a_journal_an_older_release_kept_in_a_variable_is_read() -> None:
    """v1 held the journal and its holder in one Prefect Variable; a fleet it began carries on."""
    v1 = {"format": "kubelet-rollout.io/fleet-journal/v1", "rollout": "f", "digest": "d",
          "createdAt": "2026-01-01T00:00:00Z", "status": "running",
          "gates": {"0": {"askedAt": "2026-01-01T00:01:00Z", "deadline": "2026-01-01T01:01:00Z", "outcome": "approved",
                          "by": "alice", "note": "ok", "decidedAt": "2026-01-01T00:02:00Z"}},
          "failure": "", "abortId": "", "outcome": None, "message": "", "finishedAt": None, "holder": None}
    back = from_data(v1)
    assert back.rollout == "f" and back.gates[0].by == "alice" and back.status is FleetStatus.RUNNING
    with pytest.raises(ValueError, match="not a fleet journal"):
        from_data({**v1, "format": "kubelet-rollout.io/fleet-holder/v1"})


# -- whole fleets, step by step ---------------------------------------------------------------


@dataclass
class Fleet:
    """Clusters whose runs end as scripted (``fails``: cluster -> outcome) after ``takes`` of time."""

    plan: Any
    fails: dict[str, Outcome] = field(default_factory=dict)
    takes: timedelta = 5 * M
    now: datetime = T0
    started: Counter[tuple[str, RunKind]] = field(default_factory=Counter)
    runs: dict[str, ClusterRuns] = field(default_factory=dict)
    order: list[tuple[datetime, str, str]] = field(default_factory=list)

    def drive(self, answers: dict[int, ApprovalOutcome] | None = None) -> tuple[FleetJournal, Finish]:
        j = journal()
        for _ in range(200):
            self._advance()
            j, action = step(j, self.plan, self.runs, now=self.now)
            if isinstance(action, Finish):
                return j, action
            if isinstance(action, (StartClusters, StartRollbacks)):
                kind = RunKind.ROLLOUT if isinstance(action, StartClusters) else RunKind.ROLLBACK
                for c in action.clusters:
                    self.started[(c, kind)] += 1
                    self.order.append((self.now, "start", f"{c}/{kind.value}"))
                    new = ClusterRun(cluster=c, kind=kind, flow_run_id=f"{c}-{kind.value}", started_at=self.now,
                                     phase=RunPhase.RUNNING, attempts=1)
                    held = self.runs.get(c, ClusterRuns())
                    self.runs[c] = replace(held, **{kind.value: new})
            elif isinstance(action, AskApproval):
                answer = (answers or {}).get(action.stage, ApprovalOutcome.APPROVED)
                j = j.with_gate_answer(action.stage, answer, by="alice", note="", at=self.now)
            self.now += M
        raise AssertionError("the fleet never ended")

    def _advance(self) -> None:
        for c, held in list(self.runs.items()):
            for kind, r in ((RunKind.ROLLOUT, held.rollout), (RunKind.ROLLBACK, held.rollback)):
                if r is None or r.ended or r.started_at is None or self.now < r.started_at + self.takes:
                    continue
                outcome = (self.fails.get(c, Outcome.COMPLETED) if kind is RunKind.ROLLOUT else Outcome.ROLLED_BACK)
                self.order.append((self.now, "end", f"{c}/{kind.value}"))
                self.runs[c] = replace(self.runs[c], **{kind.value: replace(
                    r, phase=RunPhase.ENDED, outcome=outcome, ended_at=self.now)})


def test_a_good_fleet_runs_its_stages_in_order_with_soaks_and_gates_each_cluster_once() -> None:
    p = plan(stages="- clusters: [c1]\n- {}\n", soak="10m", approval="{after: [0]}", maxConcurrent=1)
    fleet = Fleet(p)
    j, end = fleet.drive()
    assert end.outcome is Outcome.COMPLETED
    assert set(fleet.started.values()) == {1} and len(fleet.started) == 3
    canary_end = next(t for t, what, c in fleet.order if what == "end" and c == "c1/rollout")
    later = [t for t, what, c in fleet.order if what == "start" and c != "c1/rollout"]
    assert min(later) >= canary_end + 10 * M  # the canary completed and its soak passed first
    c2_end = next(t for t, what, c in fleet.order if what == "end" and c == "c2/rollout")
    assert next(t for t, what, c in fleet.order if what == "start" and c == "c3/rollout") >= c2_end  # one at a time
    assert j.gates[0].outcome is ApprovalOutcome.APPROVED


@pytest.mark.parametrize(("action", "rolled_back", "outcome"), [
    ("halt", set(), Outcome.HALTED), ("rollback", {"c1"}, Outcome.REVERTED)])
def test_a_failure_in_cluster_2_stops_the_fleet_before_cluster_3(action: str, rolled_back: set[str],
                                                                 outcome: Outcome) -> None:
    fleet = Fleet(plan(failureAction=action), fails={"c2": Outcome.REVERTED})
    _, end = fleet.drive()
    assert end.outcome is outcome
    assert ("c3", RunKind.ROLLOUT) not in fleet.started
    assert {c for (c, kind) in fleet.started if kind is RunKind.ROLLBACK} == rolled_back


def test_a_rejection_with_onreject_fail_applies_the_failure_action() -> None:
    fleet = Fleet(plan(approval="{after: [0], onReject: fail}", failureAction="rollback"))
    _, end = fleet.drive({0: ApprovalOutcome.REJECTED})
    assert end.outcome is Outcome.REVERTED and "rejected by alice" in end.reason
    assert set(fleet.started) == {("c1", RunKind.ROLLOUT), ("c1", RunKind.ROLLBACK)}
