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
from rollout.timefmt import human

# A cluster's run whose process died (its worker went away, or the process crashed) is scheduled
# again, the same flow run, up to this many runs in all: its rollout resumes from its journal.
MAX_ATTEMPTS = 10
# A running rollout says where it stands (a progress event) at least this often, as its heartbeat
# (as Prefect's workers do, every 30 s by default).
PROGRESS_HEARTBEAT = timedelta(seconds=30)
# A run is judged dead only when its worker is offline *and* the run itself has missed this many
# heartbeats: a worker is marked offline when Prefect misses its heartbeats, which a busy or
# briefly unreachable Prefect server also causes while the run's own process goes on.
MISSED_HEARTBEATS = 3


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


def process_gone(*, worker: str, worker_offline: str | None, known_worker: bool,
                 last_sign_of_life: datetime | None, now: datetime, server_heard_at: datetime | None,
                 heartbeat: timedelta = PROGRESS_HEARTBEAT) -> str:
    """Why a run that Prefect shows running has lost its process ("" while it is not known to).

    Its worker is offline or gone from its pool, *and* the run itself has said nothing (no progress
    event, no state change) for ``MISSED_HEARTBEATS`` of its heartbeats, *and* the Prefect server
    has heard from another worker since then (``server_heard_at``: the freshest heartbeat of the
    fleet's other workers): a server too busy to take writes (SQLite under load) silences every
    worker and run at once, and a run rescheduled while alive runs a second process against its
    cluster's lock."""
    if worker_offline is None and known_worker:
        return ""
    overdue = last_sign_of_life + MISSED_HEARTBEATS * heartbeat if last_sign_of_life else None
    if overdue is not None and (now < overdue or server_heard_at is None or server_heard_at < overdue):
        return ""
    silent = f", silent since {human(last_sign_of_life)}" if last_sign_of_life else ""
    if worker_offline is not None:
        return f"its worker {worker} went offline (last heartbeat {worker_offline}){silent}"
    return f"its worker {worker} is gone from its work pool{silent}"


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
    gone: str = ""  # why its process is known to be gone while Prefect still shows it running
    progress: Progress | None = None

    @property
    def ended(self) -> bool:
        return self.phase is RunPhase.ENDED

    @property
    def crashed(self) -> bool:
        """Its process died without saying how the rollout ended: run it again (it resumes)."""
        return (self.ended and self.outcome is Outcome.CRASHED) or (not self.ended and bool(self.gone))

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
