"""The loop's seams: what it tells whoever watches it, where a gate's answer comes from, and how it ends.

Nothing here decides: the loop (``rollout.loop.engine``) takes these, a run (``rollout.run``)
implements the watcher and the gates, and every screen reads the :class:`RunResult`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from rollout.machine.actions import Action, AwaitApproval
from rollout.errors import TransientGatewayError
from rollout.journal import ApprovalOutcome, Journal
from rollout.model import NodeObservation
from rollout.outcome import Outcome


@dataclass(frozen=True)
class Answer:
    """A person's (or the clock's) answer to an approval gate."""

    outcome: ApprovalOutcome
    by: str = ""
    note: str = ""


class RunWatcher(Protocol):
    """Who is told what the run does (a terminal's live screen, a Prefect flow run): told, never
    asked, so nobody watching can hold the loop up."""

    def decided(self, action: Action, journal: Journal, observations: Mapping[str, NodeObservation]) -> None:
        """Every decision, as made."""

    def batch_finished(self, index: int, journal: Journal, observations: Mapping[str, NodeObservation]) -> None:
        """A batch reached DONE or FAILED."""

    def cluster_away(self, since: datetime | None, until: datetime | None) -> None:
        """The live view of the nodes was lost at ``since`` and the run rides the outage out until
        ``until`` at the latest (None, None: it is back)."""


class Gates(Protocol):
    """Where a person's answer to an approval gate comes from (the Prefect UI, `rollout approve`)."""

    answered: threading.Event  # set when an answer comes in: the loop decides again at once

    def answer(self, gate: AwaitApproval) -> Answer | None:
        """The answer to ``gate`` once one was given (None: not yet). Never blocks: while a gate
        waits the loop goes on deciding, so a request (abort, pause) or the gate's deadline is
        applied as at any other time."""


class NoGates:
    """A run nobody answers (a rollback, a test): every gate waits for its deadline."""

    answered = threading.Event()

    def answer(self, gate: AwaitApproval) -> Answer | None:
        return None


class Either:
    """Set when either event is: the loop's waits end on a stop or an answer alike."""

    def __init__(self, first: threading.Event, second: threading.Event) -> None:
        self._first, self._second = first, second

    def is_set(self) -> bool:
        return self._first.is_set() or self._second.is_set()


@dataclass
class RunResult:
    outcome: Outcome
    message: str
    journal: Journal
    observations: Mapping[str, NodeObservation]
    failed: Mapping[str, str] = field(default_factory=dict)
    action: Action | None = None
    watched_since: datetime | None = None  # the live view the decisions judged on (``status.node_rows``)


class OutageError(TransientGatewayError):
    """The API server stayed out of reach longer than the policy's ``apiOutageTolerance``."""


__all__ = ["Answer", "Either", "Gates", "NoGates", "OutageError", "RunResult", "RunWatcher"]
