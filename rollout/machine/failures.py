"""When a rollout has failed (rules 3 and 4, and a person's abort), and what the policy does then.

A config the kubelet rejects fails the rollout at once, whatever the budget: the config is bad.
Otherwise a batch fails when more of its nodes fail (sync errors past their grace, crash loops,
timeouts) than its failure budget allows. The policy's ``failureAction`` then halts, or reverts
the failing batch, or every batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rollout.machine.actions import NO_FAILED, Action, Halt, RevertNodes
from rollout.journal import BatchStatus, Journal
from rollout.machine.drains import revert_annotations, revert_held
from rollout.machine.reasons import listed
from rollout.machine.situation import Situation
from rollout.machine.verdicts import budget_failures
from rollout.model import ConfigRef
from rollout.policy import FailureAction, RevertTarget


@dataclass(frozen=True)
class Failure:
    """Why the rollout failed, the nodes that failed it (with why), and the batch it failed in."""

    reason: str
    failed: Mapping[str, str]
    batch: int


def find_failure(s: Situation) -> Failure | None:
    """Rule 3 (bad config anywhere) first, then rule 4 per started batch, the current one first.

    A done batch is checked too: a node that goes down after its batch was done (a config that
    kills the kubelet only later, section 11.2) adds to the failures tolerated when it completed.
    """
    j = s.journal
    bad = {n: f"{v.phase.value}: {v.reason}" for n in s.failing if (v := s.verdicts[n]).bad_config}
    if bad:
        return Failure(
            f"the kubelet rejected the config on {listed(bad)} (the config is bad; "
            "acting at once, regardless of the failure budget)",
            bad,
            max(j.nodes[n].batch for n in bad),
        )
    started = [i for i, b in enumerate(j.batches) if b.status in (BatchStatus.IN_PROGRESS, BatchStatus.DONE)]
    for batch in sorted(started, key=lambda i: j.batches[i].status is BatchStatus.DONE):
        failures = budget_failures(s, batch)
        budget = j.plan.failure_budget(batch)
        if len(failures) > budget:
            done = " (after it was done)" if j.batches[batch].status is BatchStatus.DONE else ""
            return Failure(
                f"{len(failures)} node(s) of {j.plan.batches[batch].label}{done} failed ({listed(failures)}), "
                f"more than its failure budget of {budget}",
                failures,
                batch,
            )
    return None


def aborted(j: Journal) -> Failure:
    """Rule 3b: a person aborted the rollout: the policy's failure action, as for a failed batch."""
    started = [i for i, b in enumerate(j.batches) if b.status is not BatchStatus.PENDING]
    return Failure(j.abort, NO_FAILED, max(started, default=0))


def on_failure(j: Journal, failure: Failure) -> Action:
    """The policy's ``failureAction``: halt where it stands, or revert the batch or every batch."""
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
    targets = _revert_targets(j, sorted(nodes))
    held = revert_held(j, targets)  # given back already: drained again before their revert
    later = f" ({len(held)} once drained again: {listed(sorted(held))})" if held else ""
    return RevertNodes(
        reason=f"{failure.reason}; failureAction {action.value}: reverting {len(nodes)} node(s) of {where}{later}",
        nodes=targets,
        scope=scope,
        batch=failure.batch,
        failed=failure.failed,
        held=held,
        annotations=revert_annotations(j, targets),
    )


def _revert_targets(j: Journal, nodes: Sequence[str]) -> dict[str, ConfigRef | None]:
    local = j.plan.policy.revert_target is RevertTarget.LOCAL
    return {n: None if local else j.nodes[n].previous for n in nodes}
