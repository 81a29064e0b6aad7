"""A plan that drains (rollout.machine.drains), driven like the engine drives it against a scripted
cluster that also plays the pods: each batch cordoned and drained before its writes, the writes
carrying the state reset, each node given back only once its batch is done; a budget that holds a
drain past the policy's timeout (halt, skip, wait); a failure's revert and a rollback drained
and given back the same way; an uncordon that never landed is sent again."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from test_machine_support import OLD, T0, World, make_plan, nodes, policy

from rollout.journal import Journal, RolloutStatus
from rollout.machine import step
from rollout.machine.actions import (
    Action,
    AssignBatch,
    Complete,
    DrainNodes,
    Halt,
    RevertNodes,
    RollbackDone,
    UncordonNodes,
    Wait,
)
from rollout.names import ANN_CORDONED_BY, ANN_STATE_RESET
from rollout.planner import DrainPlan

CPU_STATE = "/var/lib/kubelet/cpu_manager_state"
HELD = "pod shop/web-1: its PodDisruptionBudget allows no disruption now: The disruption budget web needs 3"


@dataclass
class Drained(World):
    """The scripted kubelets, plus cordons and the pods a drain evicts (``blocked``: nodes whose
    last pod a budget holds)."""

    blocked: set[str] = field(default_factory=set)
    log: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def drain(self, action: DrainNodes, rollout: str) -> dict[str, tuple[bool, str]]:
        self.log.append(("drain", action.nodes))
        for n in action.nodes:
            o = self.obs[n]
            if not o.unschedulable:
                self.obs[n] = replace(o, unschedulable=True, annotations={**o.annotations, ANN_CORDONED_BY: rollout})
        return {n: (n not in self.blocked, HELD if n in self.blocked else "") for n in action.nodes}

    def uncordon(self, action: UncordonNodes, rollout: str) -> None:
        self.log.append(("uncordon", action.nodes))
        for n in action.nodes:
            o = self.obs[n]
            if o.annotations.get(ANN_CORDONED_BY) == rollout:
                kept = {k: v for k, v in o.annotations.items() if k not in (ANN_CORDONED_BY, ANN_STATE_RESET)}
                self.obs[n] = replace(o, unschedulable=False, annotations=kept)

    def apply(self, action: Action) -> None:
        if isinstance(action, (AssignBatch, RevertNodes)):
            self.log.append(("assign" if isinstance(action, AssignBatch) else "revert", tuple(action.nodes)))
        if isinstance(action, RevertNodes):
            held = action.held
            action = replace(action, nodes={n: to for n, to in action.nodes.items() if n not in held})
        super().apply(action)


def cluster(*, blocked: set[str] | None = None, crash: str = "") -> Drained:
    world = Drained.of(nodes(6), **({crash: "validate"} if crash else {}))
    world.blocked = set(blocked or ())
    return world


def drained_plan(**fields: object) -> Journal:
    pol = policy(maxUnavailable=3, disruption={"drain": "auto", "timeout": "5m", **fields})
    plan = replace(make_plan(nodes(6), pol), drain=DrainPlan((CPU_STATE,), ("cpuManagerPolicy",)))
    return Journal.start(plan, now=T0)


def drive(journal: Journal, world: Drained, *, now: datetime = T0, until: type = Complete,
          max_steps: int = 400) -> tuple[Journal, list[Action], datetime]:
    """Step the machine as the engine does: fold each drain round's answer into the journal."""
    actions: list[Action] = []
    for _ in range(max_steps):
        journal, action = step(journal, world.observations(), now=now)
        actions.append(action)
        if isinstance(action, (Complete, Halt, RollbackDone)):
            return journal, actions, now
        if isinstance(action, DrainNodes):
            journal = journal.with_drain_progress(world.drain(action, journal.rollout), at=now)
        elif isinstance(action, UncordonNodes):
            world.uncordon(action, journal.rollout)
        else:
            world.apply(action)
            if isinstance(action, AssignBatch):
                journal = journal.with_written({n: now for n in action.nodes})
            if isinstance(action, RevertNodes):
                journal = journal.with_revert_written({n: now for n in action.nodes if n not in action.held})
        now = max(action.until, now + timedelta(seconds=1)) if isinstance(action, Wait) else now + timedelta(seconds=5)
        world.tick(now)
    raise AssertionError(f"no end after {max_steps} steps: {actions[-3:]}")


def kinds(world: Drained) -> list[str]:
    return [kind for kind, _ in world.log]


def test_each_batch_is_cordoned_and_drained_before_its_writes_and_given_back_once_done() -> None:
    journal = drained_plan()
    world = cluster()
    journal, actions, _ = drive(journal, world)
    assert isinstance(actions[-1], Complete)
    assert kinds(world) == ["drain", "assign", "uncordon"] * 3
    batches = [b.nodes for b in journal.plan.batches]
    assert [nodes_ for kind, nodes_ in world.log if kind == "drain"] == batches
    assert [nodes_ for kind, nodes_ in world.log if kind == "uncordon"] == batches
    assign = next(a for a in actions if isinstance(a, AssignBatch))
    reset = json.loads(assign.annotations[assign.nodes[0]][ANN_STATE_RESET])
    assert reset == {"rollout": journal.rollout, "files": [CPU_STATE], "desired": f"{journal.target.namespace}/"
                     f"{journal.target.name}"}
    assert not any(o.unschedulable for o in world.obs.values())
    assert all(r.drained_at is not None and r.uncordoned_at is not None for r in journal.nodes.values())


def test_a_plan_without_a_drain_never_cordons() -> None:
    journal = Journal.start(make_plan(nodes(6), policy(maxUnavailable=3)), now=T0)
    world = cluster()
    drive(journal, world)
    assert kinds(world) == ["assign"] * 3


def test_a_budget_holding_the_canary_past_the_timeout_gives_it_back_and_halts() -> None:
    journal = drained_plan(onBlocked="halt")
    canary = journal.plan.batches[0].nodes[0]
    world = cluster(blocked={canary})
    journal, actions, now = drive(journal, world, until=Halt)
    halt = actions[-1]
    assert isinstance(halt, Halt) and "pod shop/web-1" in halt.reason and "onBlocked is halt" in halt.reason
    assert "assign" not in kinds(world) and kinds(world)[-1] == "uncordon"
    assert now - T0 >= timedelta(minutes=5)  # it waited the policy's timeout first
    held = [a for a in actions if isinstance(a, DrainNodes)]
    assert len(held) > 10 and "held: " in held[-1].reason and "PodDisruptionBudget" in held[-1].reason
    assert not world.obs[canary].unschedulable and journal.status is RolloutStatus.HALTED


def test_skip_gives_the_held_node_back_unchanged_and_goes_on_without_it() -> None:
    journal = drained_plan(onBlocked="skip")
    held = journal.plan.batches[1].nodes[0]
    world = cluster(blocked={held})
    journal, actions, _ = drive(journal, world)
    assert isinstance(actions[-1], Complete)
    assert journal.nodes[held].skipped.startswith("not drained within disruption.timeout: pod shop/web-1")
    assert held not in {n for kind, ns in world.log if kind == "assign" for n in ns}
    assert world.obs[held].spec_source == OLD.unresolved() and not world.obs[held].unschedulable


def test_wait_keeps_draining_past_the_timeout_until_the_budget_lets_go() -> None:
    journal = drained_plan(onBlocked="wait")
    canary = journal.plan.batches[0].nodes[0]
    world = cluster(blocked={canary})
    now = T0
    for _ in range(100):  # ten minutes of rounds, twice the timeout
        journal, action = step(journal, world.observations(), now=now)
        assert isinstance(action, DrainNodes), action
        journal = journal.with_drain_progress(world.drain(action, journal.rollout), at=now)
        now += timedelta(seconds=6)
    world.blocked.clear()
    journal, actions, _ = drive(journal, world, now=now)
    assert isinstance(actions[-1], Complete)


def test_a_failed_batch_is_reverted_with_the_state_reset_then_given_back_before_the_halt() -> None:
    journal = drained_plan()
    canary = journal.plan.batches[0].nodes[0]
    world = cluster(crash=canary)
    journal, actions, _ = drive(journal, world)
    assert isinstance(actions[-1], Halt)
    assert kinds(world) == ["drain", "assign", "revert", "uncordon"]
    revert = next(a for a in actions if isinstance(a, RevertNodes))
    assert json.loads(revert.annotations[canary][ANN_STATE_RESET])["desired"] == f"{OLD.namespace}/{OLD.name}"
    assert not world.obs[canary].unschedulable


def test_a_rollback_drains_each_batch_again_before_its_revert_the_last_batch_first() -> None:
    journal = drained_plan()
    world = cluster()
    journal, _, now = drive(journal, world)
    world.log.clear()
    journal = journal.with_rollback("previous", at=now, reason="test")
    journal, actions, _ = drive(journal, world, now=now)
    assert isinstance(actions[-1], RollbackDone)
    assert kinds(world) == ["drain", "revert", "uncordon"] * 3
    last = journal.plan.batches[-1].nodes
    assert world.log[0] == ("drain", last)
    assert all(o.spec_source == OLD.unresolved() and not o.unschedulable for o in world.obs.values())


def test_an_uncordon_recorded_but_never_sent_is_sent_again() -> None:
    journal = drained_plan()
    world = cluster()
    canary = journal.plan.batches[0].nodes[0]
    for _ in range(30):  # until the canary's uncordon is decided
        journal, action = step(journal, world.observations(), now=T0)
        if isinstance(action, UncordonNodes):
            break
        if isinstance(action, DrainNodes):
            journal = journal.with_drain_progress(world.drain(action, journal.rollout), at=T0)
        else:
            world.apply(action)
            if isinstance(action, AssignBatch):
                journal = journal.with_written({n: T0 for n in action.nodes})
        world.tick(T0)
    assert isinstance(action, UncordonNodes) and action.nodes == (canary,)
    # the run dies here: the journal says given back, the node still says cordoned by us
    _, again = step(journal, world.observations(), now=T0 + timedelta(seconds=5))
    assert isinstance(again, UncordonNodes) and again.nodes == (canary,)
