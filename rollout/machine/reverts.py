"""Putting nodes back (rule 2): a failure's revert until it halts, and a rollback, batch by batch.

A revert is an intent in the journal until the node's write is acknowledged; one that did not land
is written again, however long ago it was decided, and one that landed never is. A node is back
when its status says so (``rollout.machine.phases.revert_phase``), timed out only on evidence, and a node
that is gone holds nothing up: there is nothing to put back.
"""

from __future__ import annotations

from collections.abc import Sequence

from rollout.machine.actions import Action, Halt, RevertNodes, RollbackDone, Wait
from rollout.journal import Journal
from rollout.machine.drains import drain_first, give_back, revert_annotations
from rollout.machine.reasons import gone_note, listed
from rollout.machine.situation import Situation
from rollout.model import NodeObservation, NodePhase

REVERT_SETTLED = frozenset({NodePhase.REVERTED, NodePhase.TIMED_OUT, NodePhase.GONE})


def revert_progress(s: Situation) -> Action:
    """A failure action's revert: wait for every reverted node to settle, then halt."""
    j = s.journal
    reverting = sorted(j.reverting_nodes())
    stuck = {n: f"revert: {s.verdicts[n].reason}" for n in reverting if s.phase_of(n) is NodePhase.TIMED_OUT}
    open_ = [n for n in reverting if s.phase_of(n) not in REVERT_SETTLED]
    if not open_:
        given_back = give_back(s, reverting, batch=None, why="reverted")
        if given_back is not None:
            return given_back
        gone = [n for n in reverting if s.phase_of(n) is NodePhase.GONE]
        done = len(reverting) - len(stuck) - len(gone)
        tail = f"; {len(stuck)} did not come back ({listed(stuck)}; see each node's reason)" if stuck else ""
        return Halt(
            reason=f"{j.failure_reason}; reverted {done} node(s){gone_note(gone)}{tail}",
            failed={**j.failed_nodes, **stuck},
        )
    waiting = _revert_waiting(s, open_)
    assert waiting is not None, "open reverts always give a wait or a re-issue"
    return waiting


def rollback_progress(s: Situation) -> Action:
    """A rollback run: the rollout's batches put back one at a time, the last first.

    Each batch's revert is written, then waited for like any revert (re-issued when it did not
    land, judged REVERTED from the node's status), before the batch before it is touched.
    """
    j = s.journal
    to_local = j.rollback_to == "local"
    for index in reversed(range(len(j.plan.batches))):
        nodes = [n for n in j.plan.batches[index].nodes if j.nodes[n].assigned]
        todo = [n for n in nodes if not j.nodes[n].reverting and s.phase_of(n) is not NodePhase.GONE]
        label = j.plan.batches[index].label
        if todo:
            draining = drain_first(s, todo, batch=None, label=f"rollback: {label}")
            if draining is not None:
                return draining
            where = "local config" if to_local else "each node's previous source"
            targets = {n: None if to_local else j.nodes[n].previous for n in todo}
            return RevertNodes(
                reason=f"rollback: {label}: putting {len(todo)} node(s) back on {where}",
                nodes=targets,
                scope="rollback",
                batch=index,
                annotations=revert_annotations(j, targets),
            )
        waiting = _revert_waiting(s, nodes)
        if waiting is not None:
            return waiting
        given_back = give_back(s, nodes, batch=index, why=f"rollback: {label} back")
        if given_back is not None:
            return given_back
    reverting = j.reverting_nodes()
    stuck = {n: f"revert: {s.verdicts[n].reason}" for n in reverting if s.phase_of(n) is NodePhase.TIMED_OUT}
    gone = sorted(n for n in j.assigned_nodes() if s.phase_of(n) is NodePhase.GONE)
    back = [n for n in reverting if n not in gone]
    done = len(back) - len(stuck)
    where = "local config" if to_local else "their previous source"
    tail = f"; {len(stuck)} did not come back ({listed(stuck)})" if stuck else ""
    return RollbackDone(reason=f"rollback of {j.rollout}: {done}/{len(back)} node(s) back on {where}"
                        f"{gone_note(gone)}{tail}", failed=stuck, reverted=done)


def _revert_waiting(s: Situation, nodes: Sequence[str]) -> Action | None:
    """Re-issue reverts that did not land, or wait for the open ones; None when all settled."""
    j = s.journal
    open_ = [n for n in nodes if j.nodes[n].reverting and s.phase_of(n) not in REVERT_SETTLED]
    if not open_:
        return None
    unwritten = [n for n in open_ if _revert_unwritten(j, n, s.observations.get(n))]
    if unwritten:
        draining = drain_first(s, unwritten, batch=None, label="revert")
        if draining is not None:
            return draining
        targets = {n: j.nodes[n].revert_to for n in unwritten}
        return RevertNodes(
            reason=f"revert of {listed(unwritten)} not written yet; writing it",
            nodes=targets,
            scope="retry",
            failed=j.failed_nodes,
            annotations=revert_annotations(j, targets),
        )
    deadlines = [w + s.policy.progress_deadline for n in open_ if (w := j.nodes[n].revert_written_at)]
    return Wait(
        until=min([s.now + s.policy.recheck_every, *deadlines]),
        on="reverts",
        ends=max(deadlines) if deadlines else None,
        reason=f"waiting for {len(open_)} reverted node(s) to converge ({listed(open_)})",
    )


def _revert_unwritten(j: Journal, name: str, obs: NodeObservation | None) -> bool:
    """The revert was decided but its write never landed (no acknowledgment, and the node does
    not point at the revert target): it is written (again) at once, however long ago the intent
    was recorded; a revert that landed is never re-sent."""
    rec = j.nodes[name]
    return obs is not None and rec.revert_written_at is None and not obs.points_at(rec.revert_to)
