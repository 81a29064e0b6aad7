"""Draining nodes around their writes, for a plan that drains (``RolloutPlan.drain``).

A change that needs it (the disruption catalogue, the policy's ``disruption:``) is written to a
node only once the node is cordoned and empty, and the node is given back (uncordoned) only once
the config has proven itself there:

- before a batch's writes: cordon its nodes and evict their pods through the Eviction API, round
  after round (``DrainNodes``), every PodDisruptionBudget respected by the API server itself;
  a node counts as drained once a round finds no pod left on it (``rollout.drain``);
- a budget (or the policy's rules for local storage and unmanaged pods) that still holds a
  node's drain ``disruption.timeout`` after its cordon: ``onBlocked`` says wait, skip the node
  (given back unchanged, recorded as skipped), or halt (every node of the batch not written yet
  given back, then the halt);
- the write to a drained node carries the state reset (``ANN_STATE_RESET``: the kubelet
  checkpoint files the node agent deletes between stopping and starting the kubelet);
- a batch done (its nodes' done criteria and its analysis): its nodes are uncordoned before
  anything else happens; a revert settled: likewise, before the halt or the rollback's next batch;
- a revert or a rollback writes a node only once it is drained again (a node given back runs
  pods again), with the state reset to the previous policy in the same PATCH.

Per node the journal holds one drain cycle (``NodeRecord.cordoned_at``, ``drained_at``,
``drain_blocked``, ``uncordoned_at``): intents before the PATCH, the drain a fact seen on the
node, so a run killed at any moment resumes the cycle (a pod already terminating is never evicted
again; a node cordoned by somebody else is never uncordoned by us: ``ANN_CORDONED_BY``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from rollout.journal import BatchStatus, Journal, NodeRecord, RolloutStatus
from rollout.machine.actions import Action, DrainNodes, Halt, UncordonNodes
from rollout.machine.reasons import listed
from rollout.machine.situation import Situation
from rollout.model import ConfigRef
from rollout.names import ANN_CORDONED_BY, ANN_STATE_RESET
from rollout.policy import BlockedDrainAction, DisruptionPolicy, describe_duration

# how often a drain looks again at pods it evicted, as kubectl drain does: a node emptied or a budget
# freed is seen within a second (at 2 s the drains were 1.14x their own time at 100 nodes)
DRAIN_POLL = timedelta(seconds=1)


def drains(j: Journal) -> bool:
    return j.plan.drain is not None


def drained(rec: NodeRecord) -> bool:
    """Cordoned by this rollout, not given back, and seen empty since."""
    return rec.cordoned and rec.drained_at is not None


def drain_first(s: Situation, nodes: Sequence[str], *, batch: int | None, label: str) -> Action | None:
    """Before writing ``nodes``: the next round of their drain, or what ``onBlocked`` does; None
    when every one of them is drained (or the plan drains nothing)."""
    j = s.journal
    if not drains(j):
        return None
    todo = [n for n in nodes if not drained(j.nodes[n])]
    if not todo:
        return None
    disruption = s.policy.disruption or DisruptionPolicy()  # a plan drains only under one; its defaults else
    timeout, on_blocked = disruption.timeout, disruption.on_blocked
    overdue = {n: j.nodes[n].drain_blocked for n in todo if _overdue(j.nodes[n], s.now, timeout)}
    writing = batch is not None and j.status is RolloutStatus.RUNNING
    if overdue and writing and on_blocked is BlockedDrainAction.SKIP:
        return UncordonNodes(
            reason=f"{label}: the drain of {listed(overdue)} is still held after {describe_duration(timeout)} "
                   f"(onBlocked is skip): giving it back unchanged; {_first(overdue)}",
            nodes=tuple(n for n in overdue if holds(s, n)), batch=batch,
            skipped={n: f"not drained within disruption.timeout: {why}" for n, why in overdue.items()})
    if overdue and writing and on_blocked is BlockedDrainAction.HALT:
        back = [n for n in nodes if holds(s, n) and not j.nodes[n].assigned]
        if back:
            return UncordonNodes(
                reason=f"{label}: the drain of {listed(overdue)} is still held after {describe_duration(timeout)} "
                       f"(onBlocked is halt): giving back {len(back)} node(s) not written; {_first(overdue)}",
                nodes=tuple(back), batch=batch)
        return Halt(reason=f"{label}: the drain of {listed(overdue)} was held for {describe_duration(timeout)} "
                           f"(onBlocked is halt); no node of the batch was written; {_first(overdue)}",
                    failed={n: f"drain held: {why}" for n, why in overdue.items()}, batch=batch)
    held = {n: j.nodes[n].drain_blocked for n in todo if j.nodes[n].drain_blocked}
    cordon = tuple(n for n in todo if not j.nodes[n].cordoned)
    said = f"; held: {_first(held)}" if held else ""
    what = f"cordoning and draining {len(cordon)} node(s)" if cordon else f"draining {listed(todo)}"
    return DrainNodes(reason=f"{label}: {what}{said}", nodes=tuple(todo), cordon=cordon, rules=s.policy.drain_rules,
                      batch=batch, poll=min(DRAIN_POLL, s.policy.recheck_every))


def holds(s: Situation, node: str) -> bool:
    """This rollout holds ``node`` cordoned: by its journal, or by the node's own word after an
    uncordon that was recorded but never landed (the run died between the two)."""
    rec = s.journal.nodes[node]
    if rec.cordoned:
        return True
    obs = s.observations.get(node)
    return rec.cordoned_at is not None and obs is not None and obs.annotations.get(ANN_CORDONED_BY) == s.journal.rollout


def give_back(s: Situation, nodes: Iterable[str], *, batch: int | None, why: str) -> UncordonNodes | None:
    """Uncordon the nodes of ``nodes`` this rollout still holds cordoned."""
    j = s.journal
    if not drains(j):
        return None
    back = tuple(n for n in nodes if holds(s, n))
    if not back:
        return None
    return UncordonNodes(reason=f"{why}: uncordoning {listed(back)}", nodes=back, batch=batch)


def give_back_done(s: Situation) -> UncordonNodes | None:
    """Every node of a done batch still cordoned: its config has proven itself there."""
    j = s.journal
    if not drains(j):
        return None
    for index, state in enumerate(j.batches):
        if state.status is not BatchStatus.DONE:
            continue
        label = j.plan.batches[index].label
        found = give_back(s, (n for n in j.plan.batches[index].nodes if not j.nodes[n].reverting),
                          batch=index, why=f"{label} done")
        if found is not None:
            return found
    return None


def state_reset(j: Journal, to: ConfigRef | None) -> dict[str, str]:
    """The annotation a write to a drained node carries (nothing for a plan without state files)."""
    plan = j.plan.drain
    if plan is None or not plan.state_files:
        return {}
    desired = None if to is None else f"{to.namespace}/{to.name}"
    return {ANN_STATE_RESET: json.dumps({"rollout": j.rollout, "files": list(plan.state_files),
                                         "desired": desired}, sort_keys=True, separators=(",", ":"))}


def revert_held(j: Journal, nodes: Iterable[str]) -> frozenset[str]:
    """Of nodes to revert, those not drained now: recorded as reverting, written once drained."""
    if not drains(j):
        return frozenset()
    return frozenset(n for n in nodes if not drained(j.nodes[n]))


def revert_annotations(j: Journal, to: Mapping[str, ConfigRef | None]) -> dict[str, Mapping[str, str]]:
    if not drains(j):
        return {}
    return {n: state_reset(j, ref) for n, ref in to.items()}


def _overdue(rec: NodeRecord, now: datetime, timeout: timedelta) -> bool:
    return bool(rec.drain_blocked) and rec.cordoned_at is not None and now >= rec.cordoned_at + timeout


def _first(held: Mapping[str, str]) -> str:
    node = min(held)
    return f"{node}: {held[node]}"


def left_cordoned(journal: Journal) -> str:
    """What a run stopped mid-drain leaves behind, said where it stops ("" when nothing is held): a
    person who stopped it should not find out from `kubectl get nodes`."""
    held = journal.cordoned_nodes()
    if not held:
        return ""
    return (f"; {len(held)} node(s) stay cordoned until then (or until `rollout rollback` gives them back): "
            f"{listed(held)}")

