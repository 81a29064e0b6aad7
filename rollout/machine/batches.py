"""Moving the rollout forward, batch by batch (rules 5 to 7): start the next batch when it may,
make sure the current batch's writes landed, wait for it, and complete after the last.

A batch starts only past the approval gate after the previous batch, outside a pause, inside a
maintenance window, within ``maxUnavailable`` counting the nodes already unavailable, and never on
a node that is already down (``onUnhealthyNode``: skip it, wait, or halt): a node is blamed only
for what began after its own write. :func:`_assign` is the one place an ``AssignBatch`` is built.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime

from rollout.machine.actions import (
    NO_FAILED,
    Action,
    AssignBatch,
    AwaitApproval,
    Complete,
    Halt,
    RolloutReport,
    Wait,
    WaitForWindow,
)
from rollout.journal import (
    ApprovalOutcome,
    BatchStatus,
    Journal,
    RolloutStatus,
    assignment_annotations,
    parse_assignment_annotations,
)
from rollout.machine.analysis import analysis_hold
from rollout.machine.drains import drain_first, drains, give_back_done, state_reset
from rollout.machine.failures import Failure, on_failure
from rollout.machine.reasons import gone_note, listed
from rollout.machine.situation import BatchProgress, Situation
from rollout.machine.verdicts import progress, settled_since
from rollout.model import ConfigRef, NodeObservation, NodePhase
from rollout.names import ANN_ROLLOUT
from rollout.machine.phases import node_down, not_ready_settles_at
from rollout.policy import ApprovalRejectAction, ApprovalTimeoutAction, UnhealthyNodeAction
from rollout.timefmt import human


def advance(s: Situation) -> Action:
    """The next step of a running rollout with no failure to act on."""
    given_back = give_back_done(s)  # a drained node's config proved itself: it takes pods again
    if given_back is not None:
        return given_back
    current = s.journal.current_batch()
    if current is None and not s.plan.batches and s.plan.unhealthy:
        # not "nothing to do": the nodes that need the config were down (a fleet would go on)
        return Halt(reason=f"no node to roll: {len(s.plan.unhealthy)} selected node(s) were not Ready when the "
                           f"rollout planned ({listed(list(s.plan.unhealthy))}); nothing was written")
    if current is None:
        return complete(s, reason=_completion_reason(s))
    if s.journal.batches[current].status is BatchStatus.PENDING:
        return _start_batch(s, current)
    walked = progress(s, current)
    landed = _landing_problems(s, current, walked)
    if landed is not None:
        return landed
    held = analysis_hold(s, current)
    if held is not None:
        return held
    return _wait_batch(s, current, walked)


# --------------------------------------------------------------------------- starting a batch


def _start_batch(s: Situation, batch: int) -> Action:
    held = _held_before_start(s, batch)
    if held is not None:
        return held
    j, plan_batch = s.journal, s.plan.batches[batch]
    present = [n for n in plan_batch.nodes if n in s.observations and not j.nodes[n].skipped]
    unhealthy = _unhealthy_before_start(s, batch, present)
    if unhealthy is not None:
        return unhealthy
    skipped = _down_nodes(s, present)
    present = [n for n in present if n not in skipped]
    previous = {n: _previous_source(j, n, s.observations[n]) for n in present}
    adopted = [n for n in present if _assigned_by_us(j, s.observations[n])]
    to_write = [n for n in present if n not in adopted]
    draining = drain_first(s, to_write, batch=batch, label=plan_batch.label)
    if draining is not None:
        return draining
    gone = len([n for n in plan_batch.nodes if n not in s.observations])
    notes = [f"{gone} planned node(s) no longer exist"] if gone else []
    if skipped:
        notes.append(f"{len(skipped)} skipped, down before the batch ({listed(skipped)})")
    if adopted:
        notes.append(f"{len(adopted)} already assigned by this rollout (journal rebuilt), not written again")
    note = f" ({'; '.join(notes)})" if notes else ""
    return _assign(s, batch, to_write, previous=previous, skipped=skipped,
                   reason=f"starting {plan_batch.label}: {len(to_write)} node(s){note}")


def _held_before_start(s: Situation, batch: int) -> Action | None:
    """Rule 6: the approval gate, a pause, the maintenance windows and ``maxUnavailable``."""
    gate = _approval_gate(s, batch)
    if gate is not None:
        return gate
    j, policy, now = s.journal, s.policy, s.now
    label = s.plan.batches[batch].label
    if j.paused:
        return Wait(until=now + policy.recheck_every, batch=batch, on="resume",
                    reason=f"paused by {j.paused}: {label} waits for `rollout resume {j.rollout}`")
    if not policy.in_window(now):
        until = policy.next_window(now) or now + policy.recheck_every
        return WaitForWindow(
            reason=f"outside the maintenance windows; {label} may start at {human(until)}",
            until=until,
        )
    plan_batch = s.plan.batches[batch]
    down = _unavailable_outside(s, batch)
    if len(down) + plan_batch.size > s.plan.max_unavailable:
        return Wait(
            until=now + policy.recheck_every,
            batch=batch,
            on="maxUnavailable",
            reason=f"{len(down)} node(s) unavailable ({listed(down)}); {plan_batch.label} of {plan_batch.size} "
            f"would exceed maxUnavailable {s.plan.max_unavailable}",
        )
    return None


def _assign(s: Situation, batch: int, nodes: Sequence[str], *, previous: Mapping[str, ConfigRef | None],
            reason: str, skipped: Mapping[str, str] = NO_FAILED) -> AssignBatch:
    """Write the target to ``nodes``, each with its assignment annotations; ``previous`` is what
    the journal records (it may name more nodes: those already carrying this assignment)."""
    j = s.journal
    # the nodes of a batch share a handful of previous sources: one set of annotations for each
    # (10,000 nodes at once were a tenth of a second of the decision that starts their batch)
    reset = state_reset(j, j.target)  # a drained node's kubelet starts on fresh checkpoints
    of_previous = {ref: {**assignment_annotations(j.rollout, batch=batch, previous=ref, now=s.now), **reset}
                   for ref in {previous[n] for n in nodes}}
    return AssignBatch(
        reason=reason,
        batch=batch,
        nodes=tuple(nodes),
        target=j.target.unresolved(),
        previous=previous,
        annotations={n: dict(of_previous[previous[n]]) for n in nodes},
        skipped=skipped,
    )


def _down_nodes(s: Situation, names: Sequence[str]) -> dict[str, str]:
    """Nodes that are down on current evidence (not ours: none of them is assigned yet)."""
    j = s.journal
    out = {}
    for name in names:
        if j.nodes[name].assigned:
            continue
        down = node_down(s.observations[name], now=s.now, policy=s.policy, watched_since=s.watched_since)
        if down is not None:
            out[name] = f"down when {s.plan.batches[j.nodes[name].batch].label} started: {down.reason}"
    return out


def _unhealthy_before_start(s: Situation, batch: int, names: Sequence[str]) -> Action | None:
    """Rule 6b: a batch never starts on a node that is already down, and never blames it.

    A node NotReady for less than ``notReadyFor`` may be flapping: wait that out before judging.
    A node down for longer is skipped (recorded), waited for, or halts the rollout, per
    ``onUnhealthyNode``.
    """
    policy, now = s.policy, s.now
    label = s.plan.batches[batch].label
    settles = (
        not_ready_settles_at(s.observations[n], policy=policy, watched_since=s.watched_since, now=now)
        for n in names
        if not s.journal.nodes[n].assigned
    )
    settle = [t for t in settles if t is not None and t > now]
    if settle:
        return Wait(until=min(settle), batch=batch, on="notReadyFor", ends=max(settle),
                    reason=f"{label}: {len(settle)} node(s) just went NotReady; waiting notReadyFor before judging them")
    down = _down_nodes(s, names)
    if not down or policy.on_unhealthy_node is UnhealthyNodeAction.SKIP:
        return None
    if policy.on_unhealthy_node is UnhealthyNodeAction.WAIT:
        return Wait(until=now + policy.recheck_every, batch=batch, on="healthy nodes",
                    reason=f"{label} waits for {listed(down)} to be healthy (onUnhealthyNode is wait)")
    return Halt(reason=f"{label}: {listed(down)} down before the batch started (onUnhealthyNode is halt)",
                failed=down, batch=batch)


def _previous_source(j: Journal, name: str, obs: NodeObservation) -> ConfigRef | None:
    """What the node had before us: our journal, else our annotations (lost journal), else its spec."""
    rec = j.nodes[name]
    if rec.assigned:
        return rec.previous
    ours = parse_assignment_annotations(obs.annotations)
    if ours is not None and ours.rollout == j.rollout:
        return ours.previous
    return obs.spec_source.unresolved() if obs.spec_source else None


def _assigned_by_us(j: Journal, obs: NodeObservation) -> bool:
    """The node's spec is the target and our annotations say this rollout wrote it."""
    ours = parse_assignment_annotations(obs.annotations)
    return ours is not None and ours.rollout == j.rollout and j.target.same_reference(obs.spec_source)


def _unavailable_outside(s: Situation, batch: int) -> list[str]:
    inside = set(s.plan.batches[batch].nodes)
    pool = [*s.plan.nodes, *s.plan.unhealthy]
    # a plan that drains counts a cordoned node as unavailable too: its pods had to go elsewhere
    cordons = drains(s.journal)
    return sorted(
        n for n in pool if n not in inside and (obs := s.observations.get(n)) is not None
        and (not obs.is_ready or (cordons and obs.unschedulable))
    )


# --------------------------------------------------------------------------- the approval gate


def _approval_gate(s: Situation, batch: int) -> Action | None:
    j = s.journal
    if batch == 0 or not j.plan.approval_after(batch - 1):
        return None
    prev = batch - 1
    record = j.batches[prev].approval
    if record is None or record.outcome is None:
        deadline = record.deadline if record else s.now + s.policy.approval.timeout
        return AwaitApproval(
            reason=f"{j.plan.batches[prev].label} is done; approval needed before {j.plan.batches[batch].label} "
            f"(until {human(deadline)})",
            batch=prev,
            next_batch=batch,
            deadline=deadline,
            evidence=_evidence(s, prev),
        )
    who = f" by {record.by}" if record.by else ""
    note = f": {record.note}" if record.note else ""
    if record.outcome is ApprovalOutcome.APPROVED:
        return None
    if record.outcome is ApprovalOutcome.REJECTED:
        reason = f"approval after {j.plan.batches[prev].label} rejected{who}{note}"
        if s.policy.approval.on_reject is ApprovalRejectAction.FAIL:
            return on_failure(j, Failure(f"{reason}; approval.onReject is fail", NO_FAILED, prev))
        return Halt(reason=reason, batch=prev)
    return _approval_timed_out(j, prev)


def _approval_timed_out(j: Journal, prev: int) -> Action | None:
    on_timeout = j.plan.policy.approval.on_timeout
    timeout = j.plan.policy.approval.timeout
    reason = f"nobody answered the approval after {j.plan.batches[prev].label} within {timeout}"
    if on_timeout is ApprovalTimeoutAction.PROCEED:
        return None
    if on_timeout is ApprovalTimeoutAction.HALT:
        return Halt(reason=f"{reason}; approval.onTimeout is halt", batch=prev)
    return on_failure(j, Failure(f"{reason}; approval.onTimeout is fail", NO_FAILED, prev))


def _evidence(s: Situation, batch: int) -> tuple[str, ...]:
    """What the person deciding at the gate sees: the batch's phases, its failures, what is next."""
    found, plan = s.verdicts, s.plan
    nodes = plan.batches[batch].nodes
    counts = Counter(found[n].phase.value for n in nodes if n in found)
    lines = [
        f"{plan.batches[batch].label}: {len(nodes)} node(s): "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
    ]
    lines += [
        f"{n}: {found[n].phase.value}: {found[n].reason}" for n in nodes if n in found and found[n].failed
    ]
    nxt = plan.batches[batch + 1]
    lines.append(f"next: {nxt.label} with {nxt.size} node(s)")
    lines += [f"caveat: {c}" for c in plan.caveats]
    return tuple(lines)


# --------------------------------------------------------------------------- the running batch


def _landing_problems(s: Situation, batch: int, progress: BatchProgress) -> Action | None:
    """Rule 5: assignments that did not land are re-issued; a node re-pointed by someone else halts.

    Not landed: recorded as an intent, never acknowledged, and the node does not carry it (the
    run stopped or died while the batch's writes went out). Re-pointed: acknowledged, and the
    node still carries our annotations but another spec. A node that carries neither any more
    (re-created under the same name) is gone from the rollout's point of view.
    """
    j = s.journal
    lost, changed = [], {}
    for name in progress.off_spec:
        obs = s.observations[name]
        if j.nodes[name].written_at is None:
            lost.append(name)
        elif ANN_ROLLOUT in obs.annotations:
            changed[name] = f"spec.configSource changed to {obs.spec_source or 'local'} outside the rollout"
    if changed:
        return Halt(
            reason=f"{listed(changed)} re-pointed by someone else; stopping", failed=changed, batch=batch
        )
    if lost:
        return _assign(s, batch, lost, previous={n: j.nodes[n].previous for n in lost},
                       reason=f"assignment of {listed(lost)} did not land; writing it again")
    return None


def _wait_batch(s: Situation, batch: int, progress: BatchProgress) -> Action:
    """Rule 7: wait for the batch's nodes, until the next moment one of them can change."""
    found, now = s.verdicts, s.now
    nodes, waiting, soaking = progress.assigned, progress.waiting, progress.soaking
    counts = Counter("soaking" if n in soaking else found[n].phase.value for n in waiting if n in found)
    until = max(now, progress.recheck_at)
    if not waiting:  # every node is done: what is left is the analysis (rollout.machine.analysis)
        return Wait(until=until, batch=batch, on="analysis", reason=f"{s.plan.batches[batch].label}: "
                    f"{len(nodes)}/{len(nodes)} node(s) done; the analysis is measuring")
    on, ends = _waits_on(s, progress)
    return Wait(
        until=until,
        batch=batch,
        on=on,
        ends=ends,
        reason=f"{s.plan.batches[batch].label}: {len(nodes) - len(waiting)}/{len(nodes)} node(s) done; waiting for "
        f"{listed(waiting)} (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")",
    )


def _waits_on(s: Situation, progress: BatchProgress) -> tuple[str, datetime | None]:
    """What a running batch waits for, and until when at the latest: its soak (every node still
    waiting is on the target), or its nodes to get there (by their progress deadline)."""
    policy, journal, waiting = s.policy, s.journal, progress.waiting
    if waiting and len(progress.soaking) == len(waiting):
        # the batch's recorded start (a reader of the saved journal has no node's own phase time)
        began = journal.batches[journal.nodes[waiting[0]].batch].soak_started_at
        if began is not None:
            return "soak", began + policy.done.soak
        return "soak", max(settled_since(journal.nodes[n], s.observations.get(n), s.now) for n in waiting) \
            + policy.done.soak
    return "nodes", progress.last_deadline


# --------------------------------------------------------------------------- the end


def complete(s: Situation, *, reason: str) -> Complete:
    j, found = s.journal, s.verdicts
    tolerated = {n: f"{v.phase.value}: {v.reason}" for n, v in found.items() if v.failed}
    report = RolloutReport(
        rollout=j.rollout,
        target=j.target,
        status=RolloutStatus.COMPLETE,
        started_at=j.created_at,
        finished_at=j.finished_at or s.now,
        batches_done=sum(1 for b in j.batches if b.status is BatchStatus.DONE),
        batches_total=len(j.batches),
        phases={n: (found[n].phase if n in found else r.phase) for n, r in j.nodes.items()},
        tolerated=tolerated,
        skipped=j.plan.skipped,
    )
    return Complete(reason=reason, report=report)


def _completion_reason(s: Situation) -> str:
    if not s.plan.batches:
        return f"nothing to do: no selected node needs the target ({len(s.plan.skipped)} skipped)"
    gone = [n for n, v in s.verdicts.items() if v.phase is NodePhase.GONE]
    down = [n for n, v in s.verdicts.items() if v.phase is NodePhase.UNAVAILABLE]
    early = f"; {len(down)} failed on their own before their write ({listed(down)})" if down else ""
    return f"all {len(s.plan.batches)} batch(es) done{gone_note(gone)}{early}"
