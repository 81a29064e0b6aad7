"""The decision function, rule by rule (table), then whole rollouts against a scripted cluster.

Every row builds a journal and observations by hand, asks ``decide`` for the next action and
checks its type and the detail the rule is about. The scenario tests at the bottom drive
``step`` in a loop the way the engine does, to pin the things a single decision cannot show:
every failure action end to end, and that no node is ever assigned twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from test_machine_support import (
    LOAD_ERR,
    OLD,
    T0,
    TARGET,
    World,
    active,
    crash_looping,
    make_plan,
    nodes,
    policy,
    rejected,
    restarting,
    run,
    spec_target,
    sync_error,
)

from rollout.machine.actions import (
    Action,
    AssignBatch,
    AwaitApproval,
    Complete,
    Halt,
    RevertNodes,
    RollbackDone,
    Wait,
    WaitForWindow,
)
from rollout.journal import ApprovalOutcome, BatchStatus, Journal, RolloutStatus
from rollout.machine import decide, record, step
from rollout.model import NodeObservation, NodePhase
from rollout.names import ANN_PREVIOUS_SOURCE, ANN_ROLLOUT
from rollout.policy import RolloutPolicy

S = timedelta(seconds=1)
M = timedelta(minutes=1)
H = timedelta(hours=1)
MONDAY_10_TO_11 = {"windows": [{"days": ["mon"], "start": "10:00", "end": "11:00"}]}


@dataclass
class Case:
    """A rollout of 6 nodes in batches [1, 2, 3] (steps 1, 50%, 100%; maxUnavailable 3)."""

    pol: RolloutPolicy
    journal: Journal
    obs: dict[str, NodeObservation]
    now: datetime

    @property
    def batches(self) -> list[tuple[str, ...]]:
        return [b.nodes for b in self.journal.plan.batches]

    def assign(self, batch: int, *, at: datetime | None = None) -> Case:
        """Batch assigned (journal + spec + annotations), earlier batches done."""
        when = at or self.now
        j = self.journal
        for earlier in range(batch):
            if j.batches[earlier].status is not BatchStatus.DONE:
                j = j.with_batch_status(earlier, BatchStatus.DONE, at=when)
        action = decide(j, self.obs, now=when)
        assert isinstance(action, AssignBatch) and action.batch == batch, action
        j = record(j, action, now=when).with_written({n: when for n in action.nodes})  # as the engine acks
        obs = dict(self.obs)
        for n in action.nodes:
            obs[n] = replace(spec_target(obs[n]), annotations=action.annotations[n])
        return replace(self, journal=j, obs=obs)

    def set(
        self, nodes_: tuple[str, ...] | list[str], how: Callable[[NodeObservation], NodeObservation]
    ) -> Case:
        obs = dict(self.obs)
        for n in nodes_:
            obs[n] = how(obs[n])
        return replace(self, obs=obs)

    def at(self, now: datetime) -> Case:
        return replace(self, now=now)

    def fold(self) -> Case:
        """Persist what the machine observed now (what ``step`` does before deciding)."""
        from rollout.machine import observe

        return replace(self, journal=observe(self.journal, self.obs, now=self.now))

    def approve(self, batch: int, outcome: ApprovalOutcome) -> Case:
        j = record(self.journal, decide(self.journal, self.obs, now=self.now), now=self.now)
        return replace(self, journal=j.with_approval(batch, outcome, at=self.now, by="alice", note="lgtm"))

    def decide(self) -> Action:
        return decide(self.journal, self.obs, now=self.now)


def case(**fields: Any) -> Case:
    fields.setdefault("steps", [1, "50%", "100%"])
    fields.setdefault("maxUnavailable", 3)
    pol = policy(**fields)
    pool = nodes(6)
    plan = make_plan(pool, pol)
    assert [b.size for b in plan.batches] == [1, 2, 3]
    return Case(pol, Journal.start(plan, now=T0), {o.name: o for o in pool}, T0)


def canary_done(**fields: Any) -> Case:
    c = case(**fields).assign(0)
    return c.set(c.batches[0], active).at(T0 + 30 * S)


def batch1_running(**fields: Any) -> Case:
    c = canary_done(**fields)
    c = c.fold()
    return c.assign(1, at=c.now).at(c.now + 10 * S)


def crash_after_batch1(obs: NodeObservation) -> NodeObservation:
    """Down since 5 s after batch 1 was assigned (T0 + 30 s)."""
    return crash_looping(obs, since=T0 + 35 * S)


def unlanded() -> Case:
    """Batch 1 recorded as assigned, but its first node's PATCH never reached the API (no
    acknowledgment on record: the run stopped while the batch's writes went out)."""
    c = batch1_running()
    lost = c.batches[1][0]
    pristine = {o.name: o for o in nodes(6)}[lost]
    unacked = replace(c.journal.nodes[lost], written_at=None)
    journal = replace(c.journal, nodes={**c.journal.nodes, lost: unacked})
    return replace(c, journal=journal, obs={**c.obs, lost: pristine}).set(c.batches[1][1:], active)


def recreated() -> Case:
    """Batch 1's first node was written (acknowledged), then deleted and registered again under
    the same name: no assignment, none of our annotations."""
    c = batch1_running()
    node = c.batches[1][0]
    return replace(c, obs={**c.obs, node: {o.name: o for o in nodes(6)}[node]})


Check = Callable[[Any, Case], bool]  # the action, narrowed by the row's kind


def row(id_: str, build: Callable[[], Case], kind: type[Action], check: Check = lambda a, c: True) -> Any:
    return pytest.param(build, kind, check, id=id_)


RULES = [
    row(
        "a fresh rollout starts with the canary batch of one node",
        case,
        AssignBatch,
        lambda a, c: a.batch == 0 and a.nodes == c.batches[0] and "canary" in a.reason,
    ),
    row(
        "an assignment records each node's previous source in its annotations",
        case,
        AssignBatch,
        lambda a, c: all(
            a.previous[n] == OLD.unresolved() and a.annotations[n][ANN_ROLLOUT] == "r1" for n in a.nodes
        ),
    ),
    row(
        "a node on its local config has previous source local",
        lambda: case().set(
            case().batches[0], lambda o: replace(o, spec_source=None, assigned=None, active=None)
        ),
        AssignBatch,
        lambda a, c: (
            a.previous[a.nodes[0]] is None and a.annotations[a.nodes[0]][ANN_PREVIOUS_SOURCE] == "local"
        ),
    ),
    row(
        "the PATCH sets configSource in spec form (no uid or resourceVersion)",
        case,
        AssignBatch,
        lambda a, c: (
            a.patch_for(a.nodes[0])["spec"]["configSource"]["configMap"] == TARGET.unresolved().to_api()
        ),
    ),
    row(
        "a canary still restarting means Wait",
        lambda: case().assign(0).set(case().batches[0], restarting).at(T0 + 10 * S),
        Wait,
        lambda a, c: a.batch == 0 and "restarting" in a.reason,
    ),
    row(
        "a done canary starts the next batch",
        canary_done,
        AssignBatch,
        lambda a, c: a.batch == 1 and a.nodes == c.batches[1],
    ),
    row(
        "an active node waits out the soak before the batch is done",
        lambda: canary_done(done={"until": "active", "soak": "2m"}, recheckEvery="1h").fold().at(T0 + 90 * S),
        Wait,
        lambda a, c: a.until == T0 + 30 * S + 2 * M and "soaking 1" in a.reason,
    ),
    row(
        "after the soak the next batch starts",
        lambda: canary_done(done={"until": "active", "soak": "2m"}).fold().at(T0 + 151 * S),
        AssignBatch,
        lambda a, c: a.batch == 1,
    ),
    row(
        "under lastKnownGood an active canary is not done",
        lambda: canary_done(done={"until": "lastKnownGood"}, progressDeadline="15m"),
        Wait,
    ),
    row(
        "a failed-to-validate node halts at once regardless of budget",
        lambda: batch1_running(failureBudget=5, failureAction="halt").set(
            batch1_running().batches[1][:1], rejected
        ),
        Halt,
        lambda a, c: "regardless of the failure budget" in a.reason and list(a.failed) == [c.batches[1][0]],
    ),
    row(
        "a failed-to-load node under revert-batch reverts only that batch",
        lambda: batch1_running(failureBudget=5).set(
            batch1_running().batches[1][:1], lambda o: rejected(o, LOAD_ERR)
        ),
        RevertNodes,
        lambda a, c: (
            a.scope == "batch"
            and set(a.nodes) == set(c.batches[1])
            and all(v == OLD.unresolved() for v in a.nodes.values())
        ),
    ),
    row(
        "revert-all reverts every node the rollout assigned",
        lambda: batch1_running(failureAction="revert-all").set(batch1_running().batches[1][:1], rejected),
        RevertNodes,
        lambda a, c: a.scope == "all" and set(a.nodes) == set(c.batches[0] + c.batches[1]),
    ),
    row(
        "revertTarget local reverts to the local config",
        lambda: batch1_running(revertTarget="local").set(batch1_running().batches[1][:1], rejected),
        RevertNodes,
        lambda a, c: (
            all(v is None for v in a.nodes.values())
            and a.patch_for(next(iter(a.nodes)))["spec"]["configSource"] is None
        ),
    ),
    row(
        "a bad config in an earlier, done batch still triggers the failure action",
        lambda: batch1_running(failureAction="halt").set(batch1_running().batches[0], rejected),
        Halt,
        lambda a, c: list(a.failed) == list(c.batches[0]),
    ),
    row(
        "a node of a done batch that goes down later triggers the failure action",
        lambda: batch1_running(failureAction="halt").set(batch1_running().batches[0], crash_looping),
        Halt,
        lambda a, c: "batch 1 (canary) (after it was done)" in a.reason and a.batch == 0,
    ),
    row(
        "a node tolerated when its batch completed does not fail that batch again",
        lambda: (lambda c: c.set(c.batches[2], active).fold())(
            batch1_running(failureBudget=1, maxUnavailable=4)
            .set(batch1_running().batches[1][:1], crash_looping)
            .set(batch1_running().batches[1][1:], active)
            .fold()
            .assign(2)
        ),
        Complete,
    ),
    row(
        "a sync error within its grace means Wait",
        lambda: batch1_running().set(batch1_running().batches[1][:1], sync_error).fold(),
        Wait,
        lambda a, c: "sync-error" in a.reason,
    ),
    row(
        "a sync error past its grace exceeds a zero budget",
        lambda: (
            batch1_running(failureAction="halt")
            .set(batch1_running().batches[1][:1], sync_error)
            .fold()
            .at(T0 + 2 * M)
        ),
        Halt,
        lambda a, c: "failure budget of 0" in a.reason,
    ),
    row(
        "a crash-looping node beyond the budget triggers the failure action",
        lambda: batch1_running().set(batch1_running().batches[1][:1], crash_after_batch1).at(T0 + M),
        RevertNodes,
        lambda a, c: "crash-looping" in a.failed[c.batches[1][0]],
    ),
    row(
        "a crash-looping node within the budget is tolerated and the next batch starts",
        lambda: (
            batch1_running(failureBudget=1, maxUnavailable=4)
            .set(batch1_running().batches[1][:1], crash_after_batch1)
            .set(batch1_running().batches[1][1:], active)
            .at(T0 + M)
        ),
        AssignBatch,
        lambda a, c: a.batch == 2,
    ),
    row(
        "a percentage budget rounds down: 50% of 2 nodes tolerates one",
        lambda: (
            batch1_running(failureBudget="50%", maxUnavailable=4)
            .set(batch1_running().batches[1][:1], crash_after_batch1)
            .set(batch1_running().batches[1][1:], active)
            .at(T0 + M)
        ),
        AssignBatch,
        lambda a, c: a.batch == 2,
    ),
    row(
        "a node that never picks up the assignment times out and counts against the budget",
        lambda: batch1_running(failureAction="halt").at(T0 + 7 * M),
        Halt,
        lambda a, c: all("timed-out" in v for v in a.failed.values()) and set(a.failed) == set(c.batches[1]),
    ),
    row(
        "waiting wakes up at the progress deadline at the latest",
        lambda: batch1_running(recheckEvery="1h"),
        Wait,
        lambda a, c: a.until == T0 + 30 * S + 5 * M,
    ),
    row(
        "a done batch with a gate after it awaits approval with evidence",
        lambda: canary_done(approval={"after": [0]}),
        AwaitApproval,
        lambda a, c: (
            a.batch == 0
            and a.next_batch == 1
            and any("active 1" in e for e in a.evidence)
            and a.deadline == c.now + timedelta(hours=24)
        ),
    ),
    row(
        "an approved gate starts the next batch",
        lambda: canary_done(approval={"after": [0]}).approve(0, ApprovalOutcome.APPROVED),
        AssignBatch,
        lambda a, c: a.batch == 1,
    ),
    row(
        "a rejected gate halts, naming who rejected",
        lambda: canary_done(approval={"after": [0]}).approve(0, ApprovalOutcome.REJECTED),
        Halt,
        lambda a, c: "rejected by alice" in a.reason,
    ),
    row(
        "a rejected gate applies the failure action under onReject fail",
        lambda: canary_done(approval={"after": [0], "onReject": "fail"}, failureAction="revert-batch").approve(
            0, ApprovalOutcome.REJECTED
        ),
        RevertNodes,
        lambda a, c: "onReject is fail" in a.reason and set(a.nodes) == set(c.batches[0]),
    ),
    row(
        "an unanswered gate past its timeout halts under onTimeout halt",
        lambda: canary_done(approval={"after": [0], "timeout": "1h"}).approve(0, ApprovalOutcome.TIMED_OUT),
        Halt,
        lambda a, c: "onTimeout is halt" in a.reason,
    ),
    row(
        "an unanswered gate proceeds under onTimeout proceed",
        lambda: canary_done(approval={"after": [0], "onTimeout": "proceed"}).approve(
            0, ApprovalOutcome.TIMED_OUT
        ),
        AssignBatch,
    ),
    row(
        "an unanswered gate applies the failure action under onTimeout fail",
        lambda: canary_done(approval={"after": [0], "onTimeout": "fail"}).approve(
            0, ApprovalOutcome.TIMED_OUT
        ),
        RevertNodes,
        lambda a, c: set(a.nodes) == set(c.batches[0]),
    ),
    row(
        "outside every maintenance window the next batch waits for the window",
        lambda: canary_done(maintenanceWindows=MONDAY_10_TO_11).at(T0 + 2 * H),
        WaitForWindow,
        lambda a, c: a.until == T0 + timedelta(days=7),
    ),
    row(
        "a running batch is not cut off by the end of a window",
        lambda: batch1_running(maintenanceWindows=MONDAY_10_TO_11, progressDeadline="3h").at(T0 + 2 * H),
        Wait,
    ),
    row(
        "nodes unavailable elsewhere hold back a batch that would exceed maxUnavailable",
        lambda: canary_done().set(canary_done().batches[2][:2], lambda o: replace(o, ready="False")),
        Wait,
        lambda a, c: "maxUnavailable 3" in a.reason,
    ),
    row(
        "all batches done completes with a report",
        lambda: (lambda c: c.set(c.batches[2], active).fold())(
            batch1_running().set(batch1_running().batches[1], active).fold().assign(2)
        ),
        Complete,
        lambda a, c: a.report.counts() == {"active": 6} and a.report.batches_done == 3,
    ),
    row(
        "an assignment whose PATCH never landed is written again for those nodes only",
        lambda: unlanded().at(T0 + 2 * M),
        AssignBatch,
        lambda a, c: a.nodes == c.batches[1][:1] and "did not land" in a.reason,
    ),
    row(
        "an assignment never acknowledged is written again at once, however recent its intent",
        unlanded,
        AssignBatch,
        lambda a, c: a.nodes == c.batches[1][:1],
    ),
    row(
        "an acknowledged assignment is never written again: a node re-created under its name is gone",
        recreated,
        Wait,
        lambda a, c: c.batches[1][0] not in a.reason and "waiting for" in a.reason,
    ),
    row(
        "a node deleted after its assignment is gone: its batch completes without it",
        lambda: (lambda c: replace(c, obs={n: o for n, o in c.obs.items() if n != c.batches[1][0]}))(
            batch1_running().set(batch1_running().batches[1][1:], active).fold()
        ).at(T0 + 10 * M),
        AssignBatch,
        lambda a, c: a.batch == 2,
    ),
    row(
        "a node re-pointed by someone else halts the rollout",
        lambda: batch1_running().set(
            batch1_running().batches[1][:1], lambda o: replace(o, spec_source=OLD.unresolved())
        ),
        Halt,
        lambda a, c: "someone else" in a.reason,
    ),
]


@pytest.mark.parametrize(("build", "kind", "check"), RULES)
def test_decision_rule(build: Callable[[], Case], kind: type[Action], check: Check) -> None:
    c = build()
    action = c.decide()
    assert isinstance(action, kind), action
    assert action.reason, "every action carries a readable reason"
    assert check(action, c), action


def test_the_approval_clock_runs_out_by_itself() -> None:
    c = canary_done(approval={"after": [0], "timeout": "1m"})
    j, asked = step(c.journal, c.obs, now=c.now)
    assert isinstance(asked, AwaitApproval)
    j, final = step(j, c.obs, now=c.now + 2 * M)
    assert isinstance(final, Halt) and "nobody answered" in final.reason
    gate = j.batches[0].approval
    assert gate is not None and gate.outcome is ApprovalOutcome.TIMED_OUT


def test_asking_again_keeps_the_first_deadline() -> None:
    c = canary_done(approval={"after": [0], "timeout": "1h"})
    j, first = step(c.journal, c.obs, now=c.now)
    _, second = step(j, c.obs, now=c.now + 10 * M)
    assert isinstance(first, AwaitApproval) and isinstance(second, AwaitApproval)
    assert first.deadline == second.deadline


# --------------------------------------------------------------------------- reverting


def reverting(*, landed: bool = True, **fields: Any) -> tuple[Case, RevertNodes]:
    """A failed batch being reverted; ``landed``: the engine's writes went out (each node points at
    its revert target, acknowledged now), else only the intent is recorded (the run died first)."""
    c = batch1_running(**fields).set(batch1_running().batches[1][:1], rejected)
    action = c.decide()
    assert isinstance(action, RevertNodes)
    if not landed:
        return replace(c, journal=record(c.journal, action, now=c.now)), action
    journal = record(c.journal, action, now=c.now).with_revert_written({n: c.now for n in action.nodes})
    c = c.set(list(action.nodes), lambda o: replace(o, spec_source=OLD.unresolved()))
    return replace(c, journal=journal), action


def back(o: NodeObservation) -> NodeObservation:
    return replace(o, spec_source=OLD.unresolved(), assigned=OLD, active=OLD, error="", ready="True")


def test_while_reverting_the_machine_waits_for_convergence() -> None:
    c, action = reverting()
    c = c.set(list(action.nodes), lambda o: replace(o, spec_source=OLD.unresolved()))
    assert c.journal.status is RolloutStatus.REVERTING
    assert isinstance(c.decide(), Wait)


def test_once_every_reverted_node_converged_the_rollout_halts_citing_the_failure() -> None:
    c, action = reverting()
    a = c.set(list(action.nodes), back).at(c.now + 30 * S).decide()
    assert isinstance(a, Halt)
    assert "rejected the config" in a.reason and f"reverted {len(action.nodes)} node(s)" in a.reason


@pytest.mark.parametrize("later", [S, H], ids=["at once", "an hour after its intent"])
def test_a_revert_that_did_not_land_is_written_again(later: timedelta) -> None:
    """Never timed out before it was written: the deadline runs from the acknowledged write."""
    c, action = reverting(landed=False)
    a = c.at(c.now + later).decide()
    assert isinstance(a, RevertNodes) and set(a.nodes) == set(action.nodes) and a.scope == "retry"


def test_a_revert_that_never_converges_halts_naming_the_evidence() -> None:
    """A node that is down is reported down (its revert applies when it is back), not 'fix it'."""
    c, action = reverting()
    c = c.set(list(action.nodes), lambda o: replace(crash_looping(o), spec_source=OLD.unresolved()))
    a = c.at(c.now + 6 * M).decide()
    assert isinstance(a, Halt) and "did not come back" in a.reason
    assert all("node is down" in a.failed[n] and "fix it" not in a.failed[n] for n in action.nodes)


def test_a_halted_rollout_stays_halted() -> None:
    c, action = reverting()
    c = c.set(list(action.nodes), back).at(c.now + 30 * S)
    j, a = step(c.journal, c.obs, now=c.now)
    assert isinstance(a, Halt) and j.status is RolloutStatus.HALTED
    again = decide(j, c.obs, now=c.now + timedelta(days=1))
    assert isinstance(again, Halt) and again.reason == a.reason


def test_nothing_to_roll_completes_at_once() -> None:
    pool = [active(o) for o in nodes(3)]
    plan = make_plan(pool, policy())
    a = decide(Journal.start(plan, now=T0), {o.name: o for o in pool}, now=T0)
    assert isinstance(a, Complete) and "nothing to do" in a.reason


def test_a_plan_whose_every_node_was_down_halts_and_does_not_complete() -> None:
    """Measured (bench/fleet_scale.py): a cluster whose 199 nodes were all NotReady when its
    rollout planned (its simulator stalled) completed with "nothing to do", and its fleet went on.
    Nodes that need the config but are down are not "nothing to do"."""
    from dataclasses import replace

    pool = [replace(o, ready="False") for o in nodes(3)]
    plan = make_plan(pool, policy())
    assert not plan.batches and len(plan.unhealthy) == 3
    j, a = step(Journal.start(plan, now=T0), {o.name: o for o in pool}, now=T0)
    assert isinstance(a, Halt) and "not Ready when the rollout planned" in a.reason, a
    assert j.status is RolloutStatus.HALTED


def test_decide_reads_the_plan_from_the_journal() -> None:
    """The journal holds the plan it was started with: a decision cannot pair it with another's."""
    c = case()
    other = Journal.start(make_plan(nodes(6), c.pol, rollout="other"), now=T0)
    action = decide(other, c.obs, now=T0)
    assert isinstance(action, AssignBatch)
    assert {a[ANN_ROLLOUT] for a in action.annotations.values()} == {"other"}


# --------------------------------------------------------------------------- whole rollouts


def world_run(n: int = 12, /, **behaviour_and_policy: Any) -> tuple[Journal, list[Action], World]:
    behaviour = {k: v for k, v in behaviour_and_policy.items() if k.startswith("n") and k[1:].isdigit()}
    fields = {k: v for k, v in behaviour_and_policy.items() if k not in behaviour}
    pool = nodes(n, zones=3)
    pol = policy(**fields)
    plan = make_plan(pool, pol)
    world = World.of(pool, **behaviour)
    journal, actions, _ = run(Journal.start(plan, now=T0), world)
    return journal, actions, world


def assigned_counts(world: World) -> Counter[str]:
    return Counter(n for kind, n in world.patches if kind == "assign")


def test_a_good_rollout_completes_and_assigns_every_node_exactly_once() -> None:
    journal, actions, world = world_run(20)
    assert isinstance(actions[-1], Complete)
    assert journal.status is RolloutStatus.COMPLETE
    assert set(assigned_counts(world).values()) == {1} and len(assigned_counts(world)) == 20


def first_of_batch(batch: int, n: int = 12, **fields: Any) -> str:
    return make_plan(nodes(n, zones=3), policy(**fields)).batches[batch].nodes[0]


@pytest.mark.parametrize(
    ("failure_action", "reverted_batches"),
    [
        pytest.param("halt", set(), id="halt leaves every node as it is"),
        pytest.param("revert-batch", {1}, id="revert-batch puts back only the failing batch"),
        pytest.param("revert-all", {0, 1}, id="revert-all puts back every assigned node"),
    ],
)
def test_failure_actions_end_to_end(failure_action: str, reverted_batches: set[int]) -> None:
    bad = first_of_batch(1)
    journal, actions, world = world_run(**{bad: "validate", "failureAction": failure_action})
    assert isinstance(actions[-1], Halt)
    assert journal.status is RolloutStatus.HALTED
    reverted = {n for kind, n in world.patches if kind == "revert"}
    expected = {n for b in journal.plan.batches if b.index in reverted_batches for n in b.nodes}
    assert reverted == expected
    for n in reverted:
        assert world.obs[n].spec_source == OLD.unresolved() and journal.nodes[n].phase is NodePhase.REVERTED
    assert not journal.assigned_nodes(batch=2), "nothing after the failing batch was touched"


def test_a_canary_that_crash_loops_stops_the_rollout_after_one_node() -> None:
    journal, actions, world = world_run(**{first_of_batch(0): "crash"})
    assert isinstance(actions[-1], Halt)
    assert len(assigned_counts(world)) == 1


def test_a_node_that_cannot_be_reverted_is_reported_for_manual_repair() -> None:
    bad = first_of_batch(0)
    journal, actions, world = world_run(**{bad: "unrevertable"})
    assert isinstance(actions[-1], Halt) and bad in actions[-1].failed
    assert "did not come back" in actions[-1].reason and "node is down" in actions[-1].failed[bad]


def test_a_flaky_node_within_the_budget_is_tolerated_and_reported() -> None:
    flaky = first_of_batch(2, failureBudget="50%")
    journal, actions, world = world_run(**{flaky: "sync", "failureBudget": "50%"})
    final = actions[-1]
    assert isinstance(final, Complete) and flaky in final.report.tolerated


def test_approval_gates_are_recorded_in_the_journal() -> None:
    pool = nodes(12, zones=3)
    plan = make_plan(pool, policy(approval={"after": "all"}))
    journal, actions, _ = run(Journal.start(plan, now=T0), World.of(pool))
    assert isinstance(actions[-1], Complete)
    gates = [b.approval for b in journal.batches if b.approval is not None]
    assert len(gates) == plan.estimate.approval_gates == 2
    assert all(g.outcome is ApprovalOutcome.APPROVED and g.by == "tester" for g in gates)


def test_a_timed_out_approval_is_recorded_as_timed_out() -> None:
    pool = nodes(12, zones=3)
    plan = make_plan(pool, policy(approval={"after": [0], "timeout": "1h"}))
    journal, actions, _ = run(Journal.start(plan, now=T0), World.of(pool), approve=lambda _: None)
    assert isinstance(actions[-1], Halt)
    gate = journal.batches[0].approval
    assert gate is not None and gate.outcome is ApprovalOutcome.TIMED_OUT and gate.decided_at == gate.deadline


def test_the_decision_log_has_a_timestamped_reason_for_every_change_of_mind() -> None:
    journal, actions, _ = world_run()
    kinds = [d.kind for d in journal.decisions]
    assert kinds[0] == "AssignBatch" and kinds[-1] == "Complete"
    assert all(d.reason and d.at >= T0 for d in journal.decisions)


def test_a_batch_whose_nodes_were_all_deleted_is_skipped() -> None:
    c = canary_done().fold()
    gone = set(c.batches[1])
    obs = {n: o for n, o in c.obs.items() if n not in gone}
    j, first = step(c.journal, obs, now=c.now)
    assert isinstance(first, AssignBatch) and first.batch == 1 and first.nodes == ()
    assert "no longer exist" in first.reason
    _, second = step(j, obs, now=c.now + S)
    assert isinstance(second, AssignBatch) and second.batch == 2


def test_a_sync_error_counts_past_the_deadline_even_without_a_persisted_grace_clock() -> None:
    c = batch1_running(failureAction="halt", syncErrorGrace="1h").set(
        batch1_running().batches[1][:1], sync_error
    )
    a = c.at(T0 + 6 * M).decide()  # journal never folded: the grace clock never started
    assert isinstance(a, Halt) and "sync-error" in next(iter(a.failed.values()))


def test_a_sync_error_seen_across_a_gap_in_the_watch_gets_its_grace_from_the_reconnect() -> None:
    """An API server that went down as a batch was assigned fails the kubelet's download too; the
    error the orchestrator finds when it reconnects is judged over time it could watch, as a stale
    Lease is (ci: a 30 s outage failed a node whose kubelet was about to sync)."""
    c = batch1_running(failureAction="halt", syncErrorGrace="1m", progressDeadline="5m")
    c = c.set(c.batches[1][:1], sync_error).set(c.batches[1][1:], active).fold()  # its grace clock starts
    reconnected = c.now + 10 * M  # past the grace and the deadline, counted from the error
    assert isinstance(decide(c.journal, c.obs, now=reconnected + S), Halt)  # no gap: it counts
    waiting = decide(c.journal, c.obs, now=reconnected + S, watched_since=reconnected)
    assert isinstance(waiting, Wait) and waiting.until <= reconnected + M, waiting
    halted = decide(c.journal, c.obs, now=reconnected + M, watched_since=reconnected)
    assert isinstance(halted, Halt) and "sync-error" in next(iter(halted.failed.values()))


def test_a_naive_now_is_refused_before_it_can_mis_order_deadlines() -> None:
    c = case()
    with pytest.raises(ValueError, match="timezone-aware"):
        step(c.journal, c.obs, now=T0.replace(tzinfo=None))


# --------------------------------------------------------------------------- nodes that fail on their own


def _down_since(since: datetime, ready: str = "Unknown") -> Callable[[NodeObservation], NodeObservation]:
    return lambda o: replace(o, ready=ready, ready_transition=since)


def test_a_node_down_before_its_batch_is_skipped_not_assigned_and_not_blamed() -> None:
    c = canary_done(maxUnavailable=4).fold()
    sick = c.batches[1][0]
    c = c.set([sick], _down_since(T0)).at(T0 + M)
    j, action = step(c.journal, c.obs, now=c.now)
    assert isinstance(action, AssignBatch) and sick not in action.nodes
    assert sick in action.skipped and "Ready=Unknown" in action.skipped[sick]
    assert j.nodes[sick].skipped and j.nodes[sick].phase is NodePhase.SKIPPED
    healthy = [n for n in c.batches[1] if n != sick]
    c2 = replace(c, journal=j).set(healthy, active).at(T0 + 2 * M)
    j2, next_action = step(j, c2.obs, now=c2.now)
    assert isinstance(next_action, AssignBatch) and next_action.batch == 2, next_action
    assert not j2.reverting_nodes()


def test_a_node_that_just_went_notready_is_given_notreadyfor_before_the_batch_starts() -> None:
    c = canary_done(maxUnavailable=4).fold()
    flapping = c.batches[1][0]
    c = c.set([flapping], _down_since(T0 + 55 * S)).at(T0 + M)
    action = c.decide()
    assert isinstance(action, Wait) and action.until == T0 + 75 * S and "notReadyFor" in action.reason


@pytest.mark.parametrize(
    ("on_unhealthy", "kind"), [("wait", Wait), ("halt", Halt)], ids=["onUnhealthyNode wait", "onUnhealthyNode halt"]
)
def test_on_unhealthy_node_wait_or_halt(on_unhealthy: str, kind: type[Action]) -> None:
    c = canary_done(maxUnavailable=4, onUnhealthyNode=on_unhealthy).fold()
    c = c.set(c.batches[1][:1], _down_since(T0)).at(T0 + M)
    assert isinstance(c.decide(), kind)


def test_a_failure_that_began_before_the_assignment_never_reverts_the_batch() -> None:
    """Partitioned between the pre-batch check and its PATCH: unavailable, the rest goes on."""
    c = batch1_running(maxUnavailable=4)
    sick, rest = c.batches[1][0], c.batches[1][1:]
    c = c.set([sick], _down_since(T0 + 29 * S)).set(rest, active).at(T0 + 2 * M)
    action = c.fold().decide()
    assert isinstance(action, AssignBatch) and action.batch == 2, action


def test_rollback_walks_the_batches_back_last_first() -> None:
    c = batch1_running()
    c = c.set(c.batches[1], active).fold()
    j = c.journal.with_rollback("previous", at=c.now, reason="rollback requested")
    j, first = step(j, c.obs, now=c.now)
    assert isinstance(first, RevertNodes) and first.batch == 1 and set(first.nodes) == set(c.batches[1])
    back = {n: replace(o, spec_source=OLD.unresolved(), assigned=OLD, active=OLD) for n, o in c.obs.items()}
    j, second = step(j, {**c.obs, **{n: back[n] for n in c.batches[1]}}, now=c.now + S)
    assert isinstance(second, RevertNodes) and second.batch == 0
    j, done = step(j, back, now=c.now + 2 * S)
    assert isinstance(done, RollbackDone) and not done.failed and done.reverted == 3
    assert j.status is RolloutStatus.ROLLED_BACK


def test_a_rollback_holds_nothing_up_for_gone_nodes() -> None:
    """Deleted, or re-created under the same name (none of our annotations): nothing to put back."""
    c = batch1_running()
    c = c.set(c.batches[1], active).fold()
    deleted, recreated_ = c.batches[1][0], c.batches[1][1]
    fresh = {o.name: o for o in nodes(6)}[recreated_]
    obs = {n: o for n, o in c.obs.items() if n != deleted} | {recreated_: fresh}
    j = c.journal.with_rollback("previous", at=c.now, reason="rollback requested")
    j, first = step(j, obs, now=c.now)  # batch 2 is all gone: on to the canary at once
    assert isinstance(first, RevertNodes) and first.batch == 0 and set(first.nodes) == set(c.batches[0])
    canary = c.batches[0][0]
    back = {**obs, canary: replace(obs[canary], spec_source=OLD.unresolved(), assigned=OLD, active=OLD)}
    j = j.with_revert_written({canary: c.now})
    j, done = step(j, back, now=c.now + S)
    assert isinstance(done, RollbackDone) and not done.failed and done.reverted == 1, done
    assert f"2 gone ({deleted}, {recreated_}" in done.reason or f"2 gone ({recreated_}, {deleted}" in done.reason


# --------------------------------------------------------------------------- lifecycle requests


def test_a_paused_rollout_starts_no_new_batch_until_resumed() -> None:
    c = canary_done().fold()
    paused = c.journal.with_request("r1", "pause", by="alice", at=c.now)
    action = decide(paused, c.obs, now=c.now)
    assert isinstance(action, Wait) and "paused by alice" in action.reason
    resumed = paused.with_request("r2", "resume", by="alice", at=c.now)
    assert isinstance(decide(resumed, c.obs, now=c.now), AssignBatch)


def test_a_request_read_again_is_not_applied_again() -> None:
    """The engine re-reads the same annotation every few seconds: a promote is one promote."""
    c = canary_done().fold()
    j = c.journal.with_request("r1", "pause", by="alice", at=c.now)
    assert j.with_request("r1", "pause", by="bob", at=c.now + S) is j


def test_abort_applies_the_failure_action() -> None:
    c = batch1_running()
    j = c.fold().journal.with_request("r1", "abort", by="alice", at=c.now)
    action = decide(j, c.obs, now=c.now)
    assert isinstance(action, RevertNodes) and "aborted by alice" in action.reason
    assert set(action.nodes) == set(c.batches[1])


def test_promote_ends_the_current_batch_soak() -> None:
    c = canary_done(done={"until": "active", "soak": "1h"}).fold()
    assert isinstance(c.decide(), Wait)
    promoted = c.journal.with_request("r1", "promote", by="alice", at=c.now)
    action = decide(promoted, c.obs, now=c.now)
    assert isinstance(action, AssignBatch) and action.batch == 1
