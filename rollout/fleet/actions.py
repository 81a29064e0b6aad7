"""What the fleet's decisions can ask for: frozen values with a reason for the operator's log.

``rollout.fleet.decide`` picks the next one; the fleet flow carries it out through Prefect (it
starts runs, reschedules them, asks a person, cancels) and shows it. An action does nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rollout.fleet.runs import ClusterRun
from rollout.outcome import Outcome


@dataclass(frozen=True, kw_only=True)
class FleetAction:
    reason: str

    @property
    def kind(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, kw_only=True)
class StartClusters(FleetAction):
    """Start these clusters' rollouts (each once: the start carries an idempotency key)."""

    stage: int
    clusters: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class RestartRuns(FleetAction):
    """Schedule these runs again, the same flow runs: their process is gone; each resumes from its
    cluster's journal on the next worker of its pool."""

    runs: tuple[ClusterRun, ...]


@dataclass(frozen=True, kw_only=True)
class AskApproval(FleetAction):
    """Ask a person whether the fleet goes on after ``stage`` (answer: ``with_gate_answer``)."""

    stage: int
    next_stage: int
    deadline: datetime


@dataclass(frozen=True, kw_only=True)
class StopRuns(FleetAction):
    """Cancel these cluster runs (an abort): a running rollout stops where it is, resumable."""

    runs: tuple[ClusterRun, ...]


@dataclass(frozen=True, kw_only=True)
class StartRollbacks(FleetAction):
    """Roll these clusters back, each through a run of the rollback deployment on its pool."""

    clusters: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Wait(FleetAction):
    """Nothing to do until ``until`` (None: until a cluster's run changes)."""

    until: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Finish(FleetAction):
    """The fleet rollout ended in ``outcome`` (``reason`` says why, naming the clusters)."""

    outcome: Outcome
