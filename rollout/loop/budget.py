"""A fleet's disruption budget as the run loop holds it (``rollout.ports.DisruptionBudget``).

A batch's nodes are taken from the budget before the decision to write them is kept; while the
fleet's other clusters hold the rest the batch is not started and the run waits (:meth:`wait`).
A batch gives its nodes back when it is done; a batch found under way (a resumed run's) takes
them again; the run gives back everything it holds when it ends.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from rollout.journal import BatchStatus, Journal
from rollout.machine.actions import AssignBatch, Wait
from rollout.ports import DisruptionBudget

log = logging.getLogger("rollout.engine")

RETRY_S = 2.0  # how often a batch held back asks again
WAIT_ON = "disruptionBudget"  # ``Wait.on`` of a batch held back


class BudgetHold:
    """What one run holds of a fleet's budget: the batches whose nodes it took."""

    def __init__(self, budget: DisruptionBudget | None) -> None:
        self.budget = budget
        self._held: set[int] = set()

    def follow(self, journal: Journal) -> None:
        """Give back what done batches hold; hold what a batch under way needs (a resumed run's)."""
        if self.budget is None:
            return
        for index, batch in enumerate(journal.batches):
            if batch.status is BatchStatus.DONE and index in self._held:
                self.budget.release(_key(index))
                self._held.discard(index)
            elif batch.status is BatchStatus.IN_PROGRESS and index not in self._held:
                if self.budget.take(_key(index), journal.plan.batches[index].size):
                    self._held.add(index)
                else:  # its nodes were written by a run before this one: they change anyway
                    log.warning("batch %d is under way beyond the disruption budget %s", index + 1, self.budget.name)

    def taken(self, action: AssignBatch, journal: Journal) -> bool:
        """The batch's nodes are held (now, or already): it may start."""
        if self.budget is None or action.batch in self._held:
            return True
        if not self.budget.take(_key(action.batch), journal.plan.batches[action.batch].size):
            return False
        self._held.add(action.batch)
        return True

    def wait(self, action: AssignBatch, journal: Journal, now: datetime) -> Wait:
        """The decision in place of a batch the budget holds back."""
        assert self.budget is not None
        batch = journal.plan.batches[action.batch]
        return Wait(until=now + timedelta(seconds=RETRY_S), batch=action.batch, on=WAIT_ON,
                    reason=f"{batch.label} ({batch.size} node(s)) waits for the disruption budget {self.budget.name}: "
                           f"at most {self.budget.limit} node(s) change at once across the fleet, and its other "
                           "clusters hold the rest")

    def close(self) -> None:
        if self.budget is not None:
            self.budget.close()
        self._held.clear()


def _key(batch: int) -> str:
    return f"batch-{batch + 1}"
