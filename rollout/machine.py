"""The decision function: (plan, journal, observations, now) -> the one next action, with a reason.

Everything a rollout decides is decided here, and nothing here acts: the Prefect flow is a loop of
observe -> ``step`` -> persist the journal -> carry out the action (kopf's "purely computational
function with no side-effects", argo-rollouts' table-testable canary maths). Time is an input, so a
test moves the clock instead of sleeping.

Three pure functions, one contract:

- ``observe(journal, observations, now=)`` folds *facts* into the journal: each assigned node's
  phase and since when, a batch meeting its done criteria, an approval gate whose time ran out.
- ``decide(plan, journal, observations, now=)`` returns the next ``Action``. It calls ``observe``
  itself, so it is correct on a journal that was not folded, except that soak and grace clocks
  only run once the folded journal is kept.
- ``record(journal, action, now=)`` folds the *intent* of an action in (who gets assigned with what
  previous source, which nodes are reverted, that approval was asked, that the rollout ended) and
  appends the decision to the log. The shell persists the journal *before* acting (write-ahead).

``step(journal, observations, now=)`` does all three and is what the flow calls.

Rules, in the order they are applied:
1. A finished rollout repeats its final action (idempotent re-runs).
2. While reverting: re-issue reverts that did not land, wait for convergence, then halt.
3. A node whose kubelet rejected the config (failed to load / validate) triggers the policy's
   failure action at once, regardless of the failure budget: the config is bad.
4. More budget failures (sync errors past their grace, crash loops, timeouts) in a batch than its
   failure budget trigger the failure action (halt / revert-batch / revert-all). Done batches are
   watched too: a node that goes down after its batch was done counts against that batch.
5. Assignments recorded but not landed (no spec, none of our annotations) are re-issued, for those
   nodes only, once ``recheckEvery`` has passed; a node whose spec another actor changed halts the
   rollout. Nodes already carrying this rollout's assignment (journal rebuilt) are never re-written.
6. Before a batch starts: the approval gate after the previous batch, the maintenance window, and
   ``maxUnavailable`` counting nodes already unavailable. Then ``AssignBatch``.
7. Otherwise ``Wait`` until the next moment something can change (soak end, deadline, recheck).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from rollout.actions import (
    NO_FAILED,
    Action,
    AssignBatch,
    AwaitApproval,
    Complete,
    Halt,
    RevertNodes,
    RollbackDone,
    RolloutReport,
    Wait,
    WaitForWindow,
)
from rollout.journal import (
    ApprovalOutcome,
    BatchStatus,
    Journal,
    NodeRecord,
    RolloutStatus,
    assignment_annotations,
    parse_assignment_annotations,
)
from rollout.model import ConfigRef, NodeObservation, NodePhase
from rollout.names import ANN_ROLLOUT
from rollout.phases import (
    NOT_OURS_PHASES,
    SETTLED_PHASES,
    PhaseVerdict,
    Revert,
    node_down,
    node_phase,
    not_ready_settles_at,
)
from rollout.policy import (
    ApprovalRejectAction,
    ApprovalTimeoutAction,
    DoneUntil,
    FailureAction,
    RevertTarget,
    RolloutPolicy,
    UnhealthyNodeAction,
)
from rollout.timefmt import human

MAX_NAMES_IN_REASON = 5


__all__ = ["decide", "landed_writes", "node_verdict", "observe", "record", "step", "verdicts"]


# --------------------------------------------------------------------------- verdicts


def _revert_of(rec: NodeRecord) -> Revert | None:
    if rec.revert_requested_at is None:
        return None
    return Revert(to=rec.revert_to, requested_at=rec.revert_requested_at, written_at=rec.revert_written_at)


def node_verdict(
    journal: Journal,
    rec: NodeRecord,
    obs: NodeObservation | None,
    *,
    now: datetime,
    watched_since: datetime | None = None,
) -> PhaseVerdict | None:
    """The phase of one planned node of this rollout (None: not assigned yet, still there): the
    one rule the run loop and ``rollout status`` both read."""
    if rec.assigned:
        return node_phase(
            obs,
            target=journal.target,
            written_at=rec.written_at,
            now=now,
            policy=journal.plan.policy,
            revert=_revert_of(rec),
            watched_since=watched_since,
        )
    if rec.skipped:
        return PhaseVerdict(NodePhase.SKIPPED, rec.skipped)
    if obs is None:
        return PhaseVerdict(NodePhase.GONE, "deleted (or no longer selected) before its assignment")
    return None


def verdicts(
    journal: Journal,
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None = None,
) -> dict[str, PhaseVerdict]:
    """The phase of every planned node that has one (all but those still waiting for their batch)."""
    out = {}
    for name, rec in journal.nodes.items():
        verdict = node_verdict(journal, rec, observations.get(name), now=now, watched_since=watched_since)
        if verdict is not None:
            out[name] = verdict
    return out


def _counts_now(rec: NodeRecord, verdict: PhaseVerdict, *, now: datetime, policy: RolloutPolicy) -> bool:
    """A budget failure counts at once, except a sync error, which gets ``syncErrorGrace``
    (a 403 right after an assignment is normal) and counts anyway past ``progressDeadline``."""
    if not verdict.counts_against_budget:
        return False
    if verdict.phase is not NodePhase.SYNC_ERROR:
        return True
    since = rec.phase_since if rec.phase is NodePhase.SYNC_ERROR and rec.phase_since else now
    late = rec.written_at is not None and now - rec.written_at > policy.progress_deadline
    return late or now - since >= policy.sync_error_grace


def _budget_failures(
    journal: Journal, batch: int, found: Mapping[str, PhaseVerdict], *, now: datetime
) -> dict[str, str]:
    policy = journal.plan.policy
    return {
        n: f"{v.phase.value}: {v.reason}"
        for n in journal.plan.batches[batch].nodes
        if (v := found.get(n)) is not None and _counts_now(journal.nodes[n], v, now=now, policy=policy)
    }


def _settled_since(rec: NodeRecord, obs: NodeObservation | None, now: datetime) -> datetime:
    since = rec.phase_since if rec.phase in SETTLED_PHASES and rec.phase_since else now
    if obs is not None and obs.is_ready and obs.ready_transition is not None:
        since = max(since, obs.ready_transition)
    return since


def _wanted_phases(policy: RolloutPolicy) -> frozenset[NodePhase]:
    """The phases that satisfy ``done.until`` (before the soak)."""
    if policy.done.until is DoneUntil.LAST_KNOWN_GOOD:
        return frozenset({NodePhase.PROMOTED})
    return SETTLED_PHASES


def _node_done(
    journal: Journal, name: str, verdict: PhaseVerdict | None, obs: NodeObservation | None, now: datetime
) -> bool:
    policy = journal.plan.policy
    if verdict is None or verdict.phase not in _wanted_phases(policy):
        return False
    if journal.nodes[name].batch in journal.soak_waived:
        return True  # a person promoted the batch: its soak is over
    return now - _settled_since(journal.nodes[name], obs, now) >= policy.done.soak


def _batch_done(
    journal: Journal,
    batch: int,
    found: Mapping[str, PhaseVerdict],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
) -> bool:
    failures = _budget_failures(journal, batch, found, now=now)
    if len(failures) > journal.plan.failure_budget(batch):
        return False
    for name in journal.plan.batches[batch].nodes:
        rec, obs = journal.nodes[name], observations.get(name)
        if not rec.assigned:
            if obs is not None and not rec.skipped:
                return False  # still to be assigned
            continue  # skipped, or deleted before its assignment: nothing to wait for
        verdict = found.get(name)
        if verdict is not None and verdict.phase in NOT_OURS_PHASES:
            continue  # deleted, or down before our write: not the config's to wait for
        if name not in failures and not _node_done(journal, name, verdict, obs, now):
            return False
    return True


# --------------------------------------------------------------------------- observe


def observe(journal: Journal, observations: Mapping[str, NodeObservation], *, now: datetime) -> Journal:
    """Fold facts into the journal: writes seen landed, node phases, a batch now done, approval
    gates timed out."""
    journal = landed_writes(journal, observations, now=now)
    return _observe(journal, verdicts(journal, observations, now=now), observations, now=now)


def landed_writes(journal: Journal, observations: Mapping[str, NodeObservation], *, now: datetime) -> Journal:
    """Writes that landed without their acknowledgment on record (the process that sent them died
    first): an assignment counts from the time its own annotations carry (stamped as it was
    sent), a revert from now, when it is first seen (no later than it landed: never earlier)."""
    written, reverted = {}, {}
    for name, rec in journal.nodes.items():
        obs = observations.get(name)
        if obs is None:
            continue
        if rec.reverting:
            if rec.revert_written_at is None and obs.points_at(rec.revert_to):
                reverted[name] = now
        elif rec.assigned and rec.written_at is None and journal.target.same_reference(obs.spec_source):
            ours = parse_assignment_annotations(obs.annotations)
            if ours is not None and ours.rollout == journal.rollout:
                written[name] = min(max(ours.assigned_at, _at(rec.assigned_at)), now)
    return journal.with_written(written).with_revert_written(reverted)


def _observe(
    journal: Journal,
    found: Mapping[str, PhaseVerdict],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
) -> Journal:
    # Folding changes phases, batch states and approvals, never what a verdict depends on
    # (assignment and revert times), so ``found`` stays valid for the folded journal.
    j = journal.with_phases({n: v.phase for n, v in found.items()}, now=now)
    j = _keep_settled_since(journal, j)
    if j.status is not RolloutStatus.RUNNING:
        return j
    current = j.current_batch()
    running = current is not None and j.batches[current].status is BatchStatus.IN_PROGRESS
    if running and current is not None and _batch_done(j, current, found, observations, now=now):
        j = j.with_batch_status(current, BatchStatus.DONE, at=now)
    return _approval_timeouts(j, now=now)


def _keep_settled_since(before: Journal, after: Journal) -> Journal:
    """ACTIVE -> PROMOTED is progress, not a new start: the soak clock keeps running."""
    fixes = {}
    for name, rec in after.nodes.items():
        old = before.nodes[name]
        if old.phase in SETTLED_PHASES and rec.phase in SETTLED_PHASES and old.phase is not rec.phase:
            fixes[name] = replace(rec, phase_since=old.phase_since)
    if not fixes:
        return after
    return replace(after, nodes=MappingProxyType({**after.nodes, **fixes}))


def _approval_timeouts(journal: Journal, *, now: datetime) -> Journal:
    j = journal
    for i, state in enumerate(journal.batches):
        gate = state.approval
        if gate is not None and gate.outcome is None and now >= gate.deadline:
            j = j.with_approval(i, ApprovalOutcome.TIMED_OUT, at=now, by="timeout")
    return j


# --------------------------------------------------------------------------- decide


def decide(
    journal: Journal,
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None = None,
) -> Action:
    """The next action for this rollout (the plan is the journal's). Pure; see the module docstring
    for the rules."""
    _check_aware(now)
    journal = landed_writes(journal, observations, now=now)
    found = verdicts(journal, observations, now=now, watched_since=watched_since)
    folded = _observe(journal, found, observations, now=now)
    return _decide(folded, found, observations, now=now, watched_since=watched_since)


def _decide(
    j: Journal,
    found: Mapping[str, PhaseVerdict],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None,
) -> Action:
    if j.status is RolloutStatus.COMPLETE:
        return _complete(j, found, now=now, reason="rollout already complete")
    if j.status is RolloutStatus.HALTED:
        return Halt(reason=j.failure_reason or "rollout halted", failed=j.failed_nodes)
    if j.status is RolloutStatus.REVERTING:
        return _revert_progress(j, found, observations, now=now)
    if j.status in (RolloutStatus.ROLLING_BACK, RolloutStatus.ROLLED_BACK):
        return _rollback_progress(j, found, observations, now=now)
    failure = _failure(j, found, now=now)
    if failure is not None:
        return _on_failure(j, failure, now=now)
    if j.abort:
        return _on_failure(j, _aborted(j), now=now)
    return _advance(j, found, observations, now=now, watched_since=watched_since)


def _aborted(j: Journal) -> _Failure:
    """Rule 3b: a person aborted the rollout: the policy's failure action, as for a failed batch."""
    started = [i for i, b in enumerate(j.batches) if b.status is not BatchStatus.PENDING]
    return _Failure(j.abort, NO_FAILED, max(started, default=0))


def _advance(
    j: Journal,
    found: Mapping[str, PhaseVerdict],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None,
) -> Action:
    current = j.current_batch()
    if current is None:
        return _complete(j, found, now=now, reason=_completion_reason(j, found))
    if j.batches[current].status is BatchStatus.PENDING:
        return _start_batch(j, current, found, observations, now=now, watched_since=watched_since)
    landed = _landing_problems(j, current, observations, now=now)
    if landed is not None:
        return landed
    return _wait_batch(j, current, found, observations, now=now)


@dataclass(frozen=True)
class _Failure:
    reason: str
    failed: Mapping[str, str]
    batch: int


def _failure(j: Journal, found: Mapping[str, PhaseVerdict], *, now: datetime) -> _Failure | None:
    """Rule 3 (bad config anywhere) first, then rule 4 per started batch, the current one first.

    A done batch is checked too: a node that goes down after its batch was done (a config that
    kills the kubelet only later, section 11.2) adds to the failures tolerated when it completed.
    """
    bad = {n: f"{v.phase.value}: {v.reason}" for n, v in found.items() if v.bad_config}
    if bad:
        return _Failure(
            f"the kubelet rejected the config on {_names(bad)} (the config is bad; "
            "acting at once, regardless of the failure budget)",
            bad,
            max(j.nodes[n].batch for n in bad),
        )
    started = [i for i, b in enumerate(j.batches) if b.status in (BatchStatus.IN_PROGRESS, BatchStatus.DONE)]
    for batch in sorted(started, key=lambda i: j.batches[i].status is BatchStatus.DONE):
        failures = _budget_failures(j, batch, found, now=now)
        budget = j.plan.failure_budget(batch)
        if len(failures) > budget:
            done = " (after it was done)" if j.batches[batch].status is BatchStatus.DONE else ""
            return _Failure(
                f"{len(failures)} node(s) of {j.plan.batches[batch].label}{done} failed ({_names(failures)}), "
                f"more than its failure budget of {budget}",
                failures,
                batch,
            )
    return None


def _revert_targets(j: Journal, nodes: Sequence[str]) -> dict[str, ConfigRef | None]:
    local = j.plan.policy.revert_target is RevertTarget.LOCAL
    return {n: None if local else j.nodes[n].previous for n in nodes}


def _on_failure(j: Journal, failure: _Failure, *, now: datetime) -> Action:
    action = j.plan.policy.failure_action
    if action is FailureAction.HALT:
        return Halt(
            reason=f"{failure.reason}; failureAction is halt: nodes are left as they are",
            failed=failure.failed,
            batch=failure.batch,
        )
    scope = "batch" if action is FailureAction.REVERT_BATCH else "all"
    nodes = j.assigned_nodes(batch=failure.batch if scope == "batch" else None)
    if not nodes:
        return Halt(
            reason=f"{failure.reason}; nothing was assigned, nothing to revert", failed=failure.failed
        )
    where = j.plan.batches[failure.batch].label if scope == "batch" else "every batch"
    return RevertNodes(
        reason=f"{failure.reason}; failureAction {action.value}: reverting {len(nodes)} node(s) of {where}",
        nodes=_revert_targets(j, sorted(nodes)),
        scope=scope,
        batch=failure.batch,
        failed=failure.failed,
    )


def _revert_progress(
    j: Journal,
    found: Mapping[str, PhaseVerdict],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
) -> Action:
    reverting = sorted(j.reverting_nodes())
    phases = {n: found[n].phase for n in reverting if n in found}
    stuck = {n: f"revert: {found[n].reason}" for n in reverting if phases.get(n) is NodePhase.TIMED_OUT}
    open_ = [n for n in reverting if phases.get(n) not in REVERT_SETTLED]
    if not open_:
        gone = [n for n in reverting if phases.get(n) is NodePhase.GONE]
        done = len(reverting) - len(stuck) - len(gone)
        tail = f"; {len(stuck)} did not come back ({_names(stuck)}; see each node's reason)" if stuck else ""
        return Halt(
            reason=f"{j.failure_reason}; reverted {done} node(s){_gone_note(gone)}{tail}",
            failed={**j.failed_nodes, **stuck},
        )
    waiting = _revert_waiting(j, open_, found, observations, now=now, recheck=j.plan.policy.recheck_every)
    assert waiting is not None, "open reverts always give a wait or a re-issue"
    return waiting


REVERT_SETTLED = frozenset({NodePhase.REVERTED, NodePhase.TIMED_OUT, NodePhase.GONE})


def _gone_note(gone: Sequence[str]) -> str:
    return f"; {len(gone)} gone ({_names(gone)}: deleted or no longer selected)" if gone else ""


def _rollback_progress(
    j: Journal,
    found: Mapping[str, PhaseVerdict],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
) -> Action:
    """A rollback run: the rollout's batches put back one at a time, the last first.

    Each batch's revert is written, then waited for like any revert (re-issued when it did not
    land, judged REVERTED from the node's status), before the batch before it is touched. A node
    that is gone holds nothing up: there is nothing to put back.
    """
    policy = j.plan.policy
    to_local = j.rollback_to == "local"
    for index in reversed(range(len(j.plan.batches))):
        nodes = [n for n in j.plan.batches[index].nodes if j.nodes[n].assigned]
        todo = [n for n in nodes if not j.nodes[n].reverting and found.get(n, _UNSEEN).phase is not NodePhase.GONE]
        if todo:
            label = j.plan.batches[index].label
            where = "local config" if to_local else "each node's previous source"
            return RevertNodes(
                reason=f"rollback: {label}: putting {len(todo)} node(s) back on {where}",
                nodes={n: None if to_local else j.nodes[n].previous for n in todo},
                scope="rollback",
                batch=index,
            )
        waiting = _revert_waiting(j, nodes, found, observations, now=now, recheck=policy.recheck_every)
        if waiting is not None:
            return waiting
    reverting = j.reverting_nodes()
    stuck = {n: f"revert: {found[n].reason}" for n in reverting if n in found and found[n].phase is NodePhase.TIMED_OUT}
    gone = sorted(n for n in j.assigned_nodes() if found.get(n, _UNSEEN).phase is NodePhase.GONE)
    back = [n for n in reverting if n not in gone]
    done = len(back) - len(stuck)
    where = "local config" if to_local else "their previous source"
    tail = f"; {len(stuck)} did not come back ({_names(stuck)})" if stuck else ""
    return RollbackDone(reason=f"rollback of {j.rollout}: {done}/{len(back)} node(s) back on {where}"
                        f"{_gone_note(gone)}{tail}", failed=stuck, reverted=done)


_UNSEEN = PhaseVerdict(NodePhase.PENDING, "")


def _revert_waiting(
    j: Journal,
    nodes: Sequence[str],
    found: Mapping[str, PhaseVerdict],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    recheck: timedelta,
) -> Action | None:
    """Re-issue reverts that did not land, or wait for the open ones; None when all settled."""
    open_ = [n for n in nodes if j.nodes[n].reverting and found.get(n, _UNSEEN).phase not in REVERT_SETTLED]
    if not open_:
        return None
    unwritten = [n for n in open_ if _revert_unwritten(j, n, observations.get(n))]
    if unwritten:
        return RevertNodes(
            reason=f"revert of {_names(unwritten)} did not land; writing it again",
            nodes={n: j.nodes[n].revert_to for n in unwritten},
            scope="retry",
            failed=j.failed_nodes,
        )
    deadlines = [w + j.plan.policy.progress_deadline for n in open_ if (w := j.nodes[n].revert_written_at)]
    return Wait(
        until=min([now + recheck, *deadlines]),
        reason=f"waiting for {len(open_)} reverted node(s) to converge ({_names(open_)})",
    )


def _revert_unwritten(j: Journal, name: str, obs: NodeObservation | None) -> bool:
    """The revert was decided but its write never landed (no acknowledgment, and the node does
    not point at the revert target): it is written (again) at once, however long ago the intent
    was recorded; a revert that landed is never re-sent."""
    rec = j.nodes[name]
    return obs is not None and rec.revert_written_at is None and not obs.points_at(rec.revert_to)


def _landing_problems(
    j: Journal, batch: int, observations: Mapping[str, NodeObservation], *, now: datetime
) -> Action | None:
    """Assignments that did not land are re-issued; a node re-pointed by someone else halts.

    Not landed: recorded as an intent, never acknowledged, and the node does not carry it (the
    run stopped or died while the batch's writes went out). Re-pointed: acknowledged, and the
    node still carries our annotations but another spec. A node that carries neither any more
    (re-created under the same name) is gone from the rollout's point of view.
    """
    lost, changed = [], {}
    for name in j.assigned_nodes(batch=batch):
        obs = observations.get(name)
        if obs is None or j.target.same_reference(obs.spec_source):
            continue
        if j.nodes[name].written_at is None:
            lost.append(name)
        elif ANN_ROLLOUT in obs.annotations:
            changed[name] = f"spec.configSource changed to {obs.spec_source or 'local'} outside the rollout"
    if changed:
        return Halt(
            reason=f"{_names(changed)} re-pointed by someone else; stopping", failed=changed, batch=batch
        )
    if lost:
        return _assign(
            j, batch, lost, now=now, reason=f"assignment of {_names(lost)} did not land; writing it again"
        )
    return None


def _previous_source(j: Journal, name: str, obs: NodeObservation) -> ConfigRef | None:
    """What the node had before us: our journal, else our annotations (lost journal), else its spec."""
    rec = j.nodes[name]
    if rec.assigned:
        return rec.previous
    ours = parse_assignment_annotations(obs.annotations)
    if ours is not None and ours.rollout == j.rollout:
        return ours.previous
    return obs.spec_source.unresolved() if obs.spec_source else None


def _assign(j: Journal, batch: int, nodes: Sequence[str], *, now: datetime, reason: str) -> AssignBatch:
    previous = {n: j.nodes[n].previous for n in nodes}
    return AssignBatch(
        reason=reason,
        batch=batch,
        nodes=tuple(nodes),
        target=j.target.unresolved(),
        previous=previous,
        annotations={
            n: assignment_annotations(j.rollout, batch=batch, previous=previous[n], now=now) for n in nodes
        },
    )


def _start_batch(
    j: Journal,
    batch: int,
    found: Mapping[str, PhaseVerdict],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None,
) -> Action:
    gate = _approval_gate(j, batch, found, now=now)
    if gate is not None:
        return gate
    policy = j.plan.policy
    if j.paused:
        return Wait(until=now + policy.recheck_every, batch=batch,
                    reason=f"paused by {j.paused}: {j.plan.batches[batch].label} waits for `rollout resume`")
    if not policy.in_window(now):
        until = policy.next_window(now) or now + policy.recheck_every
        return WaitForWindow(
            reason=f"outside the maintenance windows; {j.plan.batches[batch].label} may start at "
            f"{human(until)}",
            until=until,
        )
    plan_batch = j.plan.batches[batch]
    down = _unavailable_outside(j, batch, observations)
    if len(down) + plan_batch.size > j.plan.max_unavailable:
        return Wait(
            until=now + policy.recheck_every,
            batch=batch,
            reason=f"{len(down)} node(s) unavailable ({_names(down)}); {plan_batch.label} of {plan_batch.size} "
            f"would exceed maxUnavailable {j.plan.max_unavailable}",
        )
    present = [n for n in plan_batch.nodes if n in observations and not j.nodes[n].skipped]
    held = _unhealthy_before_start(j, batch, present, observations, now=now, watched_since=watched_since)
    if held is not None:
        return held
    skipped = _down_nodes(j, present, observations, now=now, watched_since=watched_since)
    present = [n for n in present if n not in skipped]
    previous = {n: _previous_source(j, n, observations[n]) for n in present}
    adopted = [n for n in present if _assigned_by_us(j, observations[n])]
    to_write = [n for n in present if n not in adopted]
    gone = len([n for n in plan_batch.nodes if n not in observations])
    notes = [f"{gone} planned node(s) no longer exist"] if gone else []
    if skipped:
        notes.append(f"{len(skipped)} skipped, down before the batch ({_names(skipped)})")
    if adopted:
        notes.append(f"{len(adopted)} already assigned by this rollout (journal rebuilt), not written again")
    note = f" ({'; '.join(notes)})" if notes else ""
    return AssignBatch(
        reason=f"starting {plan_batch.label}: {len(to_write)} node(s){note}",
        batch=batch,
        nodes=tuple(to_write),
        target=j.target.unresolved(),
        previous=previous,
        annotations={
            n: assignment_annotations(j.rollout, batch=batch, previous=previous[n], now=now) for n in to_write
        },
        skipped=skipped,
    )


def _down_nodes(
    j: Journal,
    names: Sequence[str],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None,
) -> dict[str, str]:
    """Nodes that are down on current evidence (not ours: none of them is assigned yet)."""
    policy = j.plan.policy
    out = {}
    for name in names:
        if j.nodes[name].assigned:
            continue
        down = node_down(observations[name], now=now, policy=policy, watched_since=watched_since)
        if down is not None:
            out[name] = f"down when {j.plan.batches[j.nodes[name].batch].label} started: {down.reason}"
    return out


def _unhealthy_before_start(
    j: Journal,
    batch: int,
    names: Sequence[str],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None,
) -> Action | None:
    """Rule 6b: a batch never starts on a node that is already down, and never blames it.

    A node NotReady for less than ``notReadyFor`` may be flapping: wait that out before judging.
    A node down for longer is skipped (recorded), waited for, or halts the rollout, per
    ``onUnhealthyNode``.
    """
    policy = j.plan.policy
    label = j.plan.batches[batch].label
    settles = (
        not_ready_settles_at(observations[n], policy=policy, watched_since=watched_since, now=now)
        for n in names
        if not j.nodes[n].assigned
    )
    settle = [t for t in settles if t is not None and t > now]
    if settle:
        return Wait(until=min(settle), batch=batch, reason=f"{label}: {len(settle)} node(s) just went NotReady; "
                    "waiting notReadyFor before judging them")
    down = _down_nodes(j, names, observations, now=now, watched_since=watched_since)
    if not down or policy.on_unhealthy_node is UnhealthyNodeAction.SKIP:
        return None
    if policy.on_unhealthy_node is UnhealthyNodeAction.WAIT:
        return Wait(until=now + policy.recheck_every, batch=batch,
                    reason=f"{label} waits for {_names(down)} to be healthy (onUnhealthyNode is wait)")
    return Halt(reason=f"{label}: {_names(down)} down before the batch started (onUnhealthyNode is halt)",
                failed=down, batch=batch)


def _assigned_by_us(j: Journal, obs: NodeObservation) -> bool:
    """The node's spec is the target and our annotations say this rollout wrote it."""
    ours = parse_assignment_annotations(obs.annotations)
    return ours is not None and ours.rollout == j.rollout and j.target.same_reference(obs.spec_source)


def _approval_gate(
    j: Journal, batch: int, found: Mapping[str, PhaseVerdict], *, now: datetime
) -> Action | None:
    if batch == 0 or not j.plan.approval_after(batch - 1):
        return None
    prev = batch - 1
    policy = j.plan.policy
    record = j.batches[prev].approval
    if record is None or record.outcome is None:
        deadline = record.deadline if record else now + policy.approval.timeout
        return AwaitApproval(
            reason=f"{j.plan.batches[prev].label} is done; approval needed before {j.plan.batches[batch].label} "
            f"(until {human(deadline)})",
            batch=prev,
            next_batch=batch,
            deadline=deadline,
            evidence=_evidence(j, prev, found),
        )
    who = f" by {record.by}" if record.by else ""
    note = f": {record.note}" if record.note else ""
    if record.outcome is ApprovalOutcome.APPROVED:
        return None
    if record.outcome is ApprovalOutcome.REJECTED:
        reason = f"approval after {j.plan.batches[prev].label} rejected{who}{note}"
        if policy.approval.on_reject is ApprovalRejectAction.FAIL:
            return _on_failure(j, _Failure(f"{reason}; approval.onReject is fail", NO_FAILED, prev), now=now)
        return Halt(reason=reason, batch=prev)
    return _approval_timed_out(j, prev, now=now)


def _approval_timed_out(j: Journal, prev: int, *, now: datetime) -> Action | None:
    on_timeout = j.plan.policy.approval.on_timeout
    timeout = j.plan.policy.approval.timeout
    reason = f"nobody answered the approval after {j.plan.batches[prev].label} within {timeout}"
    if on_timeout is ApprovalTimeoutAction.PROCEED:
        return None
    if on_timeout is ApprovalTimeoutAction.HALT:
        return Halt(reason=f"{reason}; approval.onTimeout is halt", batch=prev)
    return _on_failure(j, _Failure(f"{reason}; approval.onTimeout is fail", NO_FAILED, prev), now=now)


def _evidence(j: Journal, batch: int, found: Mapping[str, PhaseVerdict]) -> tuple[str, ...]:
    nodes = j.plan.batches[batch].nodes
    counts = Counter(found[n].phase.value for n in nodes if n in found)
    lines = [
        f"{j.plan.batches[batch].label}: {len(nodes)} node(s): "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
    ]
    lines += [
        f"{n}: {found[n].phase.value}: {found[n].reason}" for n in nodes if n in found and found[n].failed
    ]
    nxt = j.plan.batches[batch + 1]
    lines.append(f"next: {nxt.label} with {nxt.size} node(s)")
    lines += [f"caveat: {c}" for c in j.plan.caveats]
    return tuple(lines)


def _unavailable_outside(j: Journal, batch: int, observations: Mapping[str, NodeObservation]) -> list[str]:
    inside = set(j.plan.batches[batch].nodes)
    pool = [*j.plan.nodes, *j.plan.unhealthy]
    return sorted(
        n for n in pool if n not in inside and (obs := observations.get(n)) is not None and not obs.is_ready
    )


def _wait_batch(
    j: Journal,
    batch: int,
    found: Mapping[str, PhaseVerdict],
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
) -> Action:
    policy = j.plan.policy
    nodes = [n for n in j.plan.batches[batch].nodes if j.nodes[n].assigned]
    waiting = [n for n in nodes if not _node_done(j, n, found.get(n), observations.get(n), now)
               and found.get(n, _UNSEEN).phase not in NOT_OURS_PHASES]
    wanted = _wanted_phases(policy)
    soaking = {n for n in waiting if n in found and found[n].phase in wanted}
    counts = Counter("soaking" if n in soaking else found[n].phase.value for n in waiting if n in found)
    times = [now + policy.recheck_every]
    for n in waiting:
        times += _next_times(j, n, found.get(n), observations.get(n), now=now)
    until = max(now, min(times))
    return Wait(
        until=until,
        batch=batch,
        reason=f"{j.plan.batches[batch].label}: {len(nodes) - len(waiting)}/{len(nodes)} node(s) done; waiting for "
        f"{_names(waiting)} (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")",
    )


def _next_times(
    j: Journal, name: str, verdict: PhaseVerdict | None, obs: NodeObservation | None, *, now: datetime
) -> list[datetime]:
    policy, rec = j.plan.policy, j.nodes[name]
    times = [rec.written_at + policy.progress_deadline] if rec.written_at else []
    if verdict is not None and verdict.settled:
        times.append(_settled_since(rec, obs, now) + policy.done.soak)
    if verdict is not None and verdict.phase is NodePhase.SYNC_ERROR and rec.phase_since:
        times.append(rec.phase_since + policy.sync_error_grace)
    return [t for t in times if t > now]


def _completion_reason(j: Journal, found: Mapping[str, PhaseVerdict]) -> str:
    if not j.plan.batches:
        return f"nothing to do: no selected node needs the target ({len(j.plan.skipped)} skipped)"
    gone = [n for n, v in found.items() if v.phase is NodePhase.GONE]
    down = [n for n, v in found.items() if v.phase is NodePhase.UNAVAILABLE]
    early = f"; {len(down)} failed on their own before their write ({_names(down)})" if down else ""
    return f"all {len(j.plan.batches)} batch(es) done{_gone_note(gone)}{early}"


def _complete(j: Journal, found: Mapping[str, PhaseVerdict], *, now: datetime, reason: str) -> Complete:
    tolerated = {n: f"{v.phase.value}: {v.reason}" for n, v in found.items() if v.failed}
    report = RolloutReport(
        rollout=j.rollout,
        target=j.target,
        status=RolloutStatus.COMPLETE,
        started_at=j.created_at,
        finished_at=j.finished_at or now,
        batches_done=sum(1 for b in j.batches if b.status is BatchStatus.DONE),
        batches_total=len(j.batches),
        phases={n: (found[n].phase if n in found else r.phase) for n, r in j.nodes.items()},
        tolerated=tolerated,
        skipped=j.plan.skipped,
    )
    return Complete(reason=reason, report=report)


# --------------------------------------------------------------------------- record / step


def record(journal: Journal, action: Action, *, now: datetime) -> Journal:
    """Fold an action's intent into the journal (before the shell carries it out)."""
    j = journal
    if isinstance(action, AssignBatch):
        j = j.with_skipped(action.skipped, at=now)
        j = j.with_assigned(action.batch, action.previous, at=now)
    elif isinstance(action, RevertNodes) and j.status is RolloutStatus.ROLLING_BACK:
        j = j.with_revert_requested(action.nodes, at=now, reason=action.reason)
    elif isinstance(action, RevertNodes):
        j = j.with_revert_requested(action.nodes, at=now, reason=action.reason)
        j = j.with_status(RolloutStatus.REVERTING, at=now, failed=action.failed)
        if action.batch is not None:
            j = j.with_batch_status(action.batch, BatchStatus.FAILED, at=now)
    elif isinstance(action, AwaitApproval):
        j = j.with_approval_requested(action.batch, at=now, deadline=action.deadline)
    elif isinstance(action, Halt):
        j = j.with_status(RolloutStatus.HALTED, at=now, reason=action.reason, failed=action.failed)
        failed_batch = action.batch if action.batch is not None else j.current_batch()
        if action.failed and failed_batch is not None:
            j = j.with_batch_status(failed_batch, BatchStatus.FAILED, at=now)
    elif isinstance(action, Complete):
        j = j.with_status(RolloutStatus.COMPLETE, at=now, reason="")
    elif isinstance(action, RollbackDone):
        j = j.with_status(RolloutStatus.ROLLED_BACK, at=now, reason=action.reason, failed=action.failed)
    return j.with_decision(action.kind, action.reason, at=now, batch=action.batch_index)


def step(
    journal: Journal,
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None = None,
) -> tuple[Journal, Action]:
    """Observe, decide, record: the journal to persist (before acting) and the action to take.

    ``watched_since``: since when ``observations`` have been kept current without a gap (the
    shell's live watch); a Lease is judged stale only over that time. None: trust the
    observations' own timestamps (a one-off read).
    """
    _check_aware(now)
    journal = landed_writes(journal, observations, now=now)
    found = verdicts(journal, observations, now=now, watched_since=watched_since)
    folded = _observe(journal, found, observations, now=now)
    action = _decide(folded, found, observations, now=now, watched_since=watched_since)
    return record(folded, action, now=now), action


# --------------------------------------------------------------------------- helpers


def _names(nodes: Mapping[str, Any] | Sequence[str]) -> str:
    names = sorted(nodes)
    shown = ", ".join(names[:MAX_NAMES_IN_REASON])
    more = len(names) - MAX_NAMES_IN_REASON
    return f"{shown} and {more} more" if more > 0 else shown


def _check_aware(now: datetime) -> None:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware (UTC), e.g. datetime.now(timezone.utc)")


def _at(value: datetime | None) -> datetime:
    assert value is not None, "journal invariant: the timestamp is set once the node is assigned"
    return value
