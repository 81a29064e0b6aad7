"""The fleet's decisions: (journal, plan, the clusters' runs, now) -> the one next action.

Everything a fleet rollout decides is decided here, and nothing here acts: the fleet flow
(``flows/fleet/flow.py``) observes the clusters' runs in Prefect, calls :func:`step`, saves the
journal when it changed (before acting) and carries the action out. Time is an input, so a test
moves the clock instead of sleeping (``tests/core/test_fleet_decide.py``).

Rules, in the order they are applied:

1. A finished fleet repeats how it ended (a re-run with the same name changes nothing).
2. A cluster run Prefect marked Crashed (its process died, or sent no heartbeat within the
   zombie-run automation's bound) is scheduled again, the same flow run, and resumes from its
   cluster's journal (a process only stopped finds on waking that it lost its lock); one that found its
   cluster's lock held (by its own earlier process, whose lease has not lapsed) is tried again a
   minute later. After ``MAX_ATTEMPTS`` runs it counts as failed.
3. ``rollout fleet abort`` (applied once): cancel the cluster runs under way, then the failure
   action.
4. More failed clusters than the failure budget: the failure action. ``halt``: start no more
   clusters, let the running ones end, end Halted. ``rollback``: the same, then roll back every
   cluster this fleet completed (or stopped) through rollback runs, and end Reverted once they
   are back (Failed, naming the cluster, when one does not come back).
5. Stages in order: start the stage's clusters not started yet, at most ``maxConcurrent``
   running at once; wait for them to end; then the stage's soak (from the end of its last
   cluster run); then its approval gate (the deadline is the first asking's, whatever re-runs
   came between; a rejection or a timeout does what ``approval.onReject`` / ``onTimeout`` say).
6. Every stage done: Completed, naming any cluster that failed within the budget.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from rollout.fleet.actions import (
    AskApproval,
    FleetAction,
    Finish,
    RestartRuns,
    StartClusters,
    StartRollbacks,
    StopRuns,
    Wait,
)
from rollout.fleet.journal import AbortRequest, FleetJournal, FleetStatus
from rollout.fleet.model import FleetFailureAction
from rollout.fleet.plan import FleetPlan, StagePlan
from rollout.fleet.runs import MAX_ATTEMPTS, NO_RUNS, ClusterRun, Observed, RunPhase
from rollout.journal import ApprovalOutcome
from rollout.outcome import Outcome
from rollout.policy import ApprovalRejectAction, ApprovalTimeoutAction

# a run that found its cluster's lock held is tried again this long after it ended
LOCKED_RETRY = timedelta(seconds=60)
SHOWN = 5  # clusters named in a progress reason; more are counted (the journal names every one)


def step(journal: FleetJournal, plan: FleetPlan, observed: Observed, *, now: datetime,
         abort: AbortRequest | None = None) -> tuple[FleetJournal, FleetAction]:
    """The next action, and the journal with what this decision learned folded in."""
    if journal.finished:
        return journal, Finish(outcome=journal.outcome or Outcome.FAILED, reason=journal.message)
    restart = _restartable(observed, now)
    if restart:
        return journal, RestartRuns(runs=restart, reason=f"the process of {_runs(restart)} is gone "
                                                          f"({_why_gone(restart[0])}): scheduled again, "
                                                          "it resumes from its cluster's journal")
    if abort is not None and abort.request_id != journal.abort_id and journal.status is FleetStatus.RUNNING:
        journal = journal.with_abort(abort.request_id, f"aborted by {abort.by or 'someone'}")
        under_way = _under_way(plan, observed)
        if under_way:
            return journal, StopRuns(runs=under_way, reason=f"{journal.failure}: stopping {_runs(under_way)}")
    journal = _fold_failures(journal, plan, observed)
    if journal.status is FleetStatus.FAILING:
        return _failing(journal, plan, observed, now)
    for stage in plan.stages:
        pending = _stage(journal, plan, stage, observed, now)
        if pending is not None:
            return pending
    return _end(journal, Outcome.COMPLETED, _completed(plan, observed), now)


def failed_clusters(plan: FleetPlan, observed: Observed) -> list[str]:
    """Clusters whose rollout run ended failed, in the plan's order."""
    return [c for c in _clusters(plan) if (run := observed.get(c, NO_RUNS).rollout) is not None and run.failed]


# -- rule 2: runs whose process is gone -----------------------------------------------------


def _restartable(observed: Observed, now: datetime) -> tuple[ClusterRun, ...]:
    due = []
    for runs in observed.values():
        for run in (runs.rollout, runs.rollback):
            if run is None or run.attempts >= MAX_ATTEMPTS:
                continue
            if run.crashed or (run.locked and run.ended_at is not None and now >= run.ended_at + LOCKED_RETRY):
                due.append(run)
    return tuple(due)


def _why_gone(run: ClusterRun) -> str:
    return "its cluster's lock was held" if run.locked else run.message or "crashed"


# -- rules 3 and 4: the failure action -------------------------------------------------------


def _fold_failures(journal: FleetJournal, plan: FleetPlan, observed: Observed) -> FleetJournal:
    failed = failed_clusters(plan, observed)
    if journal.status is not FleetStatus.RUNNING or len(failed) <= plan.failure_budget:
        return journal
    details = "; ".join(f"{c}: {_run_word(observed[c].rollout)}" for c in failed)
    return journal.with_failure(f"{len(failed)} cluster(s) failed, more than the fleet's failure budget "
                                f"({plan.failure_budget}): {details}")


def _failing(journal: FleetJournal, plan: FleetPlan, observed: Observed,
             now: datetime) -> tuple[FleetJournal, FleetAction]:
    scheduled = tuple(run for c in _clusters(plan) if (run := observed.get(c, NO_RUNS).rollout) is not None
                      and run.phase is RunPhase.SCHEDULED)
    if scheduled:  # not started yet (a deferred rollout's next run): it never will
        return journal, StopRuns(runs=scheduled, reason=f"{journal.failure}: cancelling {_runs(scheduled)}, "
                                                        "not started yet")
    running = [c for c in _clusters(plan) if (run := observed.get(c, NO_RUNS).rollout) is not None and not run.settled]
    if running:
        return journal, Wait(reason=f"{journal.failure}; no cluster starts any more; waiting for "
                                    f"{_names(running)} to end")
    untouched = [c for c in _clusters(plan) if observed.get(c, NO_RUNS).rollout is None]
    left = f"; not started: {_every(untouched)}" if untouched else ""
    if plan.failure_action is FleetFailureAction.HALT:
        return _end(journal, Outcome.HALTED, f"{journal.failure}{left}", now)
    return _rolling_back(journal, plan, observed, now, left)


def _rolling_back(journal: FleetJournal, plan: FleetPlan, observed: Observed, now: datetime,
                  left: str) -> tuple[FleetJournal, FleetAction]:
    # what this fleet changed and no failure action of the cluster's own put back
    targets = [c for c in _clusters(plan) if (run := observed.get(c, NO_RUNS).rollout) is not None
               and run.ended and (run.succeeded or run.outcome is Outcome.STOPPED)]
    to_start = tuple(c for c in targets if observed.get(c, NO_RUNS).rollback is None)
    if to_start:
        return journal, StartRollbacks(clusters=to_start, reason=f"{journal.failure}; rolling back {_names(to_start)}")
    rollbacks = [(c, run) for c in targets if (run := observed[c].rollback) is not None]
    going = [c for c, run in rollbacks if not run.settled]
    if going:
        return journal, Wait(reason=f"{journal.failure}; waiting for the rollback of {_names(going)}")
    failed = [f"{c}: {_run_word(run)}" for c, run in rollbacks if run.failed]
    if failed:
        return _end(journal, Outcome.FAILED, f"{journal.failure}; the rollback of {len(failed)} cluster(s) did not "
                                             f"complete: {'; '.join(failed)}", now)
    back = f"; rolled back {_every(targets)}" if targets else "; no cluster to roll back"
    return _end(journal, Outcome.REVERTED, f"{journal.failure}{back}{left}", now)


# -- rule 5: the stages ---------------------------------------------------------------------


def _stage(journal: FleetJournal, plan: FleetPlan, stage: StagePlan, observed: Observed,
           now: datetime) -> tuple[FleetJournal, FleetAction] | None:
    """The action this stage needs, or None when it is done (soak and gate passed)."""
    runs = {c: observed.get(c, NO_RUNS).rollout for c in stage.clusters}
    active = [c for c, run in runs.items() if run is not None and not run.settled]
    waiting = [c for c, run in runs.items() if run is None]
    if waiting and len(active) < stage.max_concurrent:
        chosen = tuple(waiting[: stage.max_concurrent - len(active)])
        return journal, StartClusters(stage=stage.index, clusters=chosen,
                                      reason=f"{stage.label}: starting {_names(chosen)}")
    if active or waiting:
        queued = f"; then {_names(waiting)}" if waiting else ""
        return journal, Wait(reason=f"{stage.label}: waiting for {_names(active)}{queued}")
    if stage.index == len(plan.stages) - 1:
        return None
    ended = [run.ended_at for run in runs.values() if run is not None and run.ended_at is not None]
    soak_until = max(ended, default=now) + stage.soak
    if now < soak_until:
        return journal, Wait(until=soak_until, reason=f"{stage.label}: soaking until {soak_until:%H:%M:%S} "
                                                      "before the next stage")
    if stage.approval_after:
        return _gate(journal, plan, stage, observed, now)
    return None


def _gate(journal: FleetJournal, plan: FleetPlan, stage: StagePlan, observed: Observed,
          now: datetime) -> tuple[FleetJournal, FleetAction] | None:
    gate = journal.gates.get(stage.index)
    if gate is not None and gate.outcome is None and now >= gate.deadline:
        journal = journal.with_gate_answer(stage.index, ApprovalOutcome.TIMED_OUT, by="timeout", note="", at=now)
        gate = journal.gates[stage.index]
    if gate is None or gate.outcome is None:
        deadline = gate.deadline if gate is not None else now + plan.approval.timeout
        journal = journal.with_gate_asked(stage.index, at=now, deadline=deadline)
        nxt = plan.stages[stage.index + 1]
        return journal, AskApproval(stage=stage.index, next_stage=nxt.index, deadline=deadline,
                                    reason=f"approval needed before {nxt.label} ({_names(nxt.clusters)})")
    if gate.outcome is ApprovalOutcome.APPROVED:
        return None
    if gate.outcome is ApprovalOutcome.REJECTED:
        why = f"{_stage_word(stage)}: rejected by {gate.by}" + (f": {gate.note}" if gate.note else "")
        if plan.approval.on_reject is ApprovalRejectAction.HALT:
            return _end(journal, Outcome.REJECTED, why, now)
        return _failing(journal.with_failure(why), plan, observed, now)
    why = f"{_stage_word(stage)}: nobody answered the approval gate by {gate.deadline:%Y-%m-%d %H:%M:%S}"
    if plan.approval.on_timeout is ApprovalTimeoutAction.PROCEED:
        return None
    if plan.approval.on_timeout is ApprovalTimeoutAction.HALT:
        return _end(journal, Outcome.HALTED, why, now)
    return _failing(journal.with_failure(why), plan, observed, now)


# -- words and helpers ----------------------------------------------------------------------


def _end(journal: FleetJournal, outcome: Outcome, message: str, now: datetime) -> tuple[FleetJournal, FleetAction]:
    ended = journal.with_end(outcome, message, at=now)
    return ended, Finish(outcome=outcome, reason=ended.message)


def _completed(plan: FleetPlan, observed: Observed) -> str:
    failed = failed_clusters(plan, observed)
    done = len(plan.clusters) - len(failed)
    within = f"; failed within the budget ({plan.failure_budget}): {_every(failed)}" if failed else ""
    return f"{done}/{len(plan.clusters)} cluster(s) completed in {len(plan.stages)} stage(s){within}"


def _under_way(plan: FleetPlan, observed: Observed) -> tuple[ClusterRun, ...]:
    return tuple(run for c in _clusters(plan) if (run := observed.get(c, NO_RUNS).rollout) is not None
                 and not run.ended)


def _clusters(plan: FleetPlan) -> list[str]:
    return [c for stage in plan.stages for c in stage.clusters]


def _stage_word(stage: StagePlan) -> str:
    return f"after {stage.label}"


def _run_word(run: ClusterRun | None) -> str:
    if run is None:
        return "not started"
    outcome = run.outcome.value if run.outcome else run.phase.value
    return f"{outcome}: {run.message}" if run.message else outcome


def _every(clusters: tuple[str, ...] | list[str]) -> str:
    """Every cluster by name: for what the journal keeps (a fleet's failure and its end)."""
    return ", ".join(clusters)


def _names(clusters: tuple[str, ...] | list[str]) -> str:
    """The first few by name, the rest counted: for what a run is waiting on (the live screen)."""
    shown = ", ".join(clusters[:SHOWN])
    return shown + (f" and {len(clusters) - SHOWN} more" if len(clusters) > SHOWN else "")


def _runs(runs: tuple[ClusterRun, ...]) -> str:
    return _names([f"{run.cluster}'s {run.kind.value} run" if run.kind.value != "rollout" else run.cluster
                   for run in runs])

