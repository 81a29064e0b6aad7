"""The machine's entry points (``step``, ``observe``, ``decide``, ``record``) and the order of its
rules (``_decide``); see the package docstring for the rules themselves."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from rollout.machine.actions import (
    Action,
    AssignBatch,
    AwaitApproval,
    Complete,
    DrainNodes,
    Halt,
    RevertNodes,
    RollbackDone,
    UncordonNodes,
)
from rollout.journal import BatchStatus, Journal, RolloutStatus
from rollout.machine.analysis import analysis_failure
from rollout.machine.batches import advance, complete
from rollout.machine.facts import fold, landed_writes
from rollout.machine.failures import aborted, find_failure, on_failure
from rollout.machine.reverts import revert_progress, rollback_progress
from rollout.machine.situation import Situation
from rollout.machine.verdicts import failing_nodes, verdicts
from rollout.model import NodeObservation


def step(
    journal: Journal,
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None = None,
) -> tuple[Journal, Action]:
    """Observe, decide, record: the journal to save (before acting) and the action to take.

    ``watched_since``: since when ``observations`` have been kept current without a gap (the
    engine's live watch); a Lease is judged stale only over that time. None: trust the
    observations' own timestamps (a one-off read).
    """
    return step_on(look(journal, observations, now=now, watched_since=watched_since))


def look(
    journal: Journal,
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None = None,
) -> Situation:
    """The first half of ``step``: what a decision at ``now`` reads, its journal (``.journal``)
    with the facts folded in. The engine takes ``step`` apart to write a batch's end before the
    decision plans the next batch."""
    _check_aware(now)
    return _situation(journal, observations, now=now, watched_since=watched_since)


def step_on(s: Situation) -> tuple[Journal, Action]:
    """The second half of ``step``: decide on what ``look`` saw, and record it."""
    action = _decide(s)
    return record(s.journal, action, now=s.now), action


def observe(journal: Journal, observations: Mapping[str, NodeObservation], *, now: datetime) -> Journal:
    """Fold facts into the journal: writes seen landed, node phases, a batch now done, approval
    gates timed out."""
    return _situation(journal, observations, now=now, watched_since=None).journal


def decide(
    journal: Journal,
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None = None,
) -> Action:
    """The next action for this rollout (the plan is the journal's)."""
    return _decide(look(journal, observations, now=now, watched_since=watched_since))


def record(journal: Journal, action: Action, *, now: datetime) -> Journal:
    """Fold an action's intent into the journal (before the engine carries it out)."""
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
    elif isinstance(action, DrainNodes):
        j = j.with_cordoned(action.cordon, at=now)
    elif isinstance(action, UncordonNodes):
        j = j.with_uncordoned(action.nodes, at=now)
        j = j.with_skipped(action.skipped, at=now)
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


def _situation(
    journal: Journal,
    observations: Mapping[str, NodeObservation],
    *,
    now: datetime,
    watched_since: datetime | None,
) -> Situation:
    """What a decision at ``now`` reads: each node's verdict, and the journal with it folded in."""
    journal = landed_writes(journal, observations, now=now)
    found = verdicts(journal, observations, now=now, watched_since=watched_since)
    failing = failing_nodes(journal, found, watched_since=watched_since)
    if failing is None:
        return fold(Situation(journal, found, observations, now, watched_since))
    return fold(Situation(journal, found, observations, now, watched_since, failing=failing, _failing_of=found))


def _decide(s: Situation) -> Action:
    """The rules in their order (the package docstring numbers them)."""
    j = s.journal
    if j.status is RolloutStatus.COMPLETE:
        return complete(s, reason="rollout already complete")
    if j.status is RolloutStatus.HALTED:
        return Halt(reason=j.failure_reason or "rollout halted", failed=j.failed_nodes)
    if j.status is RolloutStatus.REVERTING:
        return revert_progress(s)
    if j.status in (RolloutStatus.ROLLING_BACK, RolloutStatus.ROLLED_BACK):
        return rollback_progress(s)
    failure = find_failure(s) or analysis_failure(j)
    if failure is not None:
        return on_failure(j, failure)
    if j.abort:
        return on_failure(j, aborted(j))
    return advance(s)


def _check_aware(now: datetime) -> None:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware (UTC), e.g. datetime.now(timezone.utc)")
