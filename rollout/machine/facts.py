"""Folding what was observed into the journal, before each decision: facts, never intents.

Writes that landed without their acknowledgment on record, each node's phase and since when, a
batch meeting its done criteria, an approval gate whose time ran out. What the engine decided to
do is recorded separately (``decision.record``), after the decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType

from rollout.journal import ApprovalOutcome, BatchStatus, Journal, NodeRecord, RolloutStatus, parse_assignment_annotations
from rollout.machine.changes import changed_names
from rollout.machine.situation import BatchProgress, Situation
from rollout.machine.verdicts import batch_done, batch_progress, settled_since, unfolded_phases
from rollout.model import NodeObservation
from rollout.machine.phases import SETTLED_PHASES


def landed_writes(journal: Journal, observations: Mapping[str, NodeObservation], *, now: datetime) -> Journal:
    """Writes that landed without their acknowledgment on record (the process that sent them died
    first): an assignment counts from the time its own annotations carry (stamped as it was
    sent), a revert from now, when it is first seen (no later than it landed: never earlier)."""
    written, reverted = {}, {}
    for name in _unacknowledged(journal):
        rec = journal.nodes[name]
        obs = observations.get(name)
        if obs is None:
            continue
        if rec.reverting:
            if obs.points_at(rec.revert_to):
                reverted[name] = now
        elif journal.target.same_reference(obs.spec_source):
            ours = parse_assignment_annotations(obs.annotations)
            if ours is not None and ours.rollout == journal.rollout:
                written[name] = min(max(ours.assigned_at, _at(rec.assigned_at)), now)
    return journal.with_written(written).with_revert_written(reverted)


def _is_unacknowledged(rec: NodeRecord) -> bool:
    return rec.revert_written_at is None if rec.reverting else rec.assigned and rec.written_at is None


# The nodes with a write not acknowledged, per rollout, for the records they were found in: nearly
# every node's writes are acknowledged, and walking 20,000 records for the few that are not was a
# fifth of a decision while a batch landed; only the records changed since are looked at again.
_UNACKNOWLEDGED: dict[str, tuple[Mapping[str, NodeRecord], list[str]]] = {}
_UNACKNOWLEDGED_MAX = 64


def _unacknowledged(journal: Journal) -> list[str]:
    """The nodes whose last write (assignment or revert) has no acknowledgment on record."""
    nodes = journal.nodes
    kept = _UNACKNOWLEDGED.get(journal.rollout)
    changed = changed_names(kept[0], nodes) if kept is not None else None
    if kept is None or changed is None:
        found = [name for name, rec in nodes.items() if _is_unacknowledged(rec)]
    elif not changed:
        found = kept[1]
    else:
        again = set(changed)
        now_unacknowledged = {name for name in again if _is_unacknowledged(nodes[name])}
        still = [name for name in kept[1] if name not in again]
        found = still + [name for name in changed if name in now_unacknowledged]
    if len(_UNACKNOWLEDGED) >= _UNACKNOWLEDGED_MAX:
        _UNACKNOWLEDGED.clear()
    _UNACKNOWLEDGED[journal.rollout] = (nodes, found)
    return found


def fold(s: Situation) -> Situation:
    """``s`` with the verdicts folded into its journal: phases, a batch now done, approval gates
    timed out; and the running batch's progress, kept for the decision (``verdicts.progress``)."""
    # Folding changes phases, batch states and approvals, never what a verdict depends on
    # (assignment and revert times), so the verdicts stay valid for the folded journal.
    moved = unfolded_phases(s.journal, s.verdicts, watched_since=s.watched_since)
    j = _keep_settled_since(s.journal, s.journal.with_phases(moved, now=s.now), moved)
    if j.status is not RolloutStatus.RUNNING:
        return replace(s, journal=j)
    current = j.current_batch()
    kept = None
    if current is not None and j.batches[current].status is BatchStatus.IN_PROGRESS:
        now_folded = replace(s, journal=j)
        progress = batch_progress(now_folded, current)  # the soak's start moves no node
        j = j.with_soak_started(current, _soak_start(now_folded, current, progress))
        if batch_done(replace(s, journal=j), current, progress):
            j = j.with_batch_status(current, BatchStatus.DONE, at=s.now)
        else:
            kept = (current, progress)
    return replace(s, journal=_approval_timeouts(j, now=s.now), running=kept)


def _soak_start(s: Situation, batch: int, progress: BatchProgress) -> datetime | None:
    """When the batch's soak began: the last of its nodes settled on the target (None: one has not)."""
    if progress.off_target or not progress.settled:
        return None
    known = s.journal.batches[batch].soak_started_at
    return known or max(settled_since(s.journal.nodes[n], s.observations.get(n), s.now) for n in progress.settled)


def _keep_settled_since(before: Journal, after: Journal, moved: Mapping[str, object]) -> Journal:
    """ACTIVE -> PROMOTED is progress, not a new start: the soak clock keeps running (``moved``:
    the nodes whose phase changed)."""
    fixes = {}
    for name in moved:
        rec, old = after.nodes[name], before.nodes[name]
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


def _at(value: datetime | None) -> datetime:
    assert value is not None, "journal invariant: the timestamp is set once the node is assigned"
    return value
