"""What the fleet sees of its clusters: each cluster's runs, as Prefect shows them (values only).

The fleet holds no cluster's credentials: everything it knows of a cluster comes from the flow
runs it started there (the rollout run, and a rollback run when its failure action rolls the
cluster back), read from Prefect by the flows and handed to the decisions as these values. A
run's outcome is read with ``rollout.outcome`` (the one table) from its state's type and name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from rollout.outcome import Outcome

# A cluster's run whose process died (its worker went away, or the process crashed) is scheduled
# again, the same flow run, up to this many runs in all: its rollout resumes from its journal.
MAX_ATTEMPTS = 10
# A running rollout says where it stands (a progress event) at least this often: what the fleet's
# screens show of it. Whether its process lives is Prefect's to say (its flow-run heartbeats and
# the zombie-run automation of deployments/zombie-runs.yaml mark a dead one Crashed).
PROGRESS_HEARTBEAT = timedelta(seconds=30)


class RunKind(str, enum.Enum):
    ROLLOUT = "rollout"
    ROLLBACK = "rollback"


class RunPhase(str, enum.Enum):
    SCHEDULED = "scheduled"  # waiting for a worker of its pool (or for its time)
    RUNNING = "running"
    PAUSED = "paused"  # at an approval gate of its own policy
    ENDED = "ended"


@dataclass(frozen=True)
class Progress:
    """The rollout's own report of where it stands (its latest progress event)."""

    state: str  # the journal's status as people read it: running, reverting, complete, ...
    batch: int  # the batch under way (1-based), 0 when none has started
    batches: int
    nodes: int
    done: int  # nodes on the target
    failed: int  # nodes failed or reverted

    at: datetime | None = None  # when the run said it (its latest sign of life)

    @property
    def shown(self) -> str:
        failed = f", {self.failed} failed" if self.failed else ""
        return f"{self.done}/{self.nodes} done{failed}"


@dataclass(frozen=True)
class ClusterRun:
    """One flow run of a cluster, as last read."""

    cluster: str
    kind: RunKind
    flow_run_id: str
    flow_run_name: str = ""
    phase: RunPhase = RunPhase.SCHEDULED
    outcome: Outcome | None = None  # once ended
    message: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    attempts: int = 0  # how many times it entered Running
    progress: Progress | None = None

    @property
    def ended(self) -> bool:
        return self.phase is RunPhase.ENDED

    @property
    def crashed(self) -> bool:
        """Prefect marked it Crashed (its process died, or stopped sending heartbeats): run it again
        (it resumes from its cluster's journal; the cluster's lock keeps a stopped one from acting)."""
        return self.ended and self.outcome is Outcome.CRASHED

    @property
    def locked(self) -> bool:
        """It found its cluster's lock held: by its own earlier process, until that lease lapses."""
        return self.ended and self.outcome is Outcome.LOCKED

    @property
    def succeeded(self) -> bool:
        return self.ended and self.outcome is not None and self.outcome.ok

    @property
    def deferred(self) -> bool:
        """Ended for now: a run of the same deployment continues it at the cluster's next window."""
        return self.ended and self.outcome is Outcome.DEFERRED

    @property
    def retrying(self) -> bool:
        """Its process is gone or its cluster's lock was held, and it will be run again."""
        return (self.crashed or self.locked) and self.attempts < MAX_ATTEMPTS

    @property
    def settled(self) -> bool:
        """Ended for good: nothing more will run for it (unlike a deferred or a retried run)."""
        return self.ended and not self.deferred and not self.retrying

    @property
    def failed(self) -> bool:
        """Ended in an outcome that counts against the fleet's failure budget."""
        if not self.ended or self.succeeded or self.deferred:
            return False
        if self.crashed or self.locked:
            return self.attempts >= MAX_ATTEMPTS
        return True


@dataclass(frozen=True)
class ClusterRuns:
    """A cluster's latest rollout run and rollback run (None: not started)."""

    rollout: ClusterRun | None = None
    rollback: ClusterRun | None = None


NO_RUNS = ClusterRuns()
Observed = Mapping[str, ClusterRuns]
