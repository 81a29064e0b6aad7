"""How a run ends: one word per outcome, and one table of what each word means outside the run.

A rollout or rollback run ends in exactly one :class:`Outcome`. The engine returns the ones a run
reaches by running (completed, rolled-back, deferred, stopped, halted, reverted, failed); each
``RolloutError`` names the one a refusal ends in (``rollout.errors``: invalid, locked, ...);
``crashed`` is a run that died without saying. :data:`ENDINGS` gives, per outcome, the Prefect
state the flow run ends in and the exit code of ``rollout start``/``rollback``; the outcome's
value is its word in ``-o json`` (``rollout_cli/schemas/run.json``, which
tests/cli/test_outcome_table.py holds to this table). Whatever else reads an outcome derives it
from here.

``ok`` is exit code 0: the run did everything it was asked. A deferred run has not rolled anything
out yet (a run of the same deployment continues it at the next window), so it is not ok and exits
6, as the README promises scripts.

Nothing here imports Prefect: a state is named by its type and its name, as text.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass


class Outcome(enum.StrEnum):
    """How a run ended; its value is how ``-o json`` and the flow run's result say it."""

    COMPLETED = "completed"
    ROLLED_BACK = "rolled-back"
    DEFERRED = "deferred"
    STOPPED = "stopped"
    FAILED = "failed"
    HALTED = "halted"
    REVERTED = "reverted"
    REJECTED = "rejected"
    INVALID = "invalid"
    CLUSTER_ERROR = "cluster-error"
    LOCKED = "locked"
    NOT_FOUND = "not-found"
    CRASHED = "crashed"

    @property
    def state_type(self) -> str:
        return ENDINGS[self].state_type

    @property
    def state_name(self) -> str:
        return ENDINGS[self].state_name

    @property
    def exit_code(self) -> int:
        return ENDINGS[self].exit_code

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @classmethod
    def of_state(cls, state_type: str, state_name: str | None) -> Outcome:
        """The outcome a final state stands for, from its type and name alone (a run elsewhere
        whose result cannot be read here): the first row ending in that state, else the first row
        of that type (its plain reading: ``Completed``, ``Failed``...), else failed."""
        of_type = [outcome for outcome, ending in ENDINGS.items() if ending.state_type == state_type]
        named = [outcome for outcome in of_type if ENDINGS[outcome].state_name == state_name]
        return (named or of_type or [cls.FAILED])[0]

    @classmethod
    def read(cls, word: object, *, otherwise: Outcome) -> Outcome:
        """The outcome a word names (a run's result, written by any version), else ``otherwise``."""
        try:
            return cls(str(word))
        except ValueError:
            return otherwise


@dataclass(frozen=True)
class Ending:
    state_type: str  # Prefect's StateType: COMPLETED, FAILED, CANCELLED, CRASHED
    state_name: str  # the state's name, as the Prefect UI shows it
    exit_code: int  # of `rollout start` / `rollout rollback`; scripts rely on it


# Each state type's plain state comes first among its rows: Outcome.of_state falls back to it.
ENDINGS: Mapping[Outcome, Ending] = {
    Outcome.COMPLETED: Ending("COMPLETED", "Completed", 0),
    Outcome.ROLLED_BACK: Ending("COMPLETED", "Completed", 0),
    Outcome.DEFERRED: Ending("COMPLETED", "Deferred", 6),  # ends the run, not the rollout: not ok
    Outcome.STOPPED: Ending("CANCELLED", "Cancelled", 130),  # as a shell reports a process ended by SIGINT
    Outcome.FAILED: Ending("FAILED", "Failed", 1),
    Outcome.HALTED: Ending("FAILED", "Halted", 1),
    Outcome.REVERTED: Ending("FAILED", "Reverted", 1),
    Outcome.REJECTED: Ending("FAILED", "Rejected", 1),
    Outcome.INVALID: Ending("FAILED", "Invalid", 2),
    Outcome.CLUSTER_ERROR: Ending("FAILED", "ClusterError", 3),
    Outcome.LOCKED: Ending("FAILED", "Locked", 4),
    Outcome.NOT_FOUND: Ending("FAILED", "NotFound", 5),
    Outcome.CRASHED: Ending("CRASHED", "Crashed", 1),
}
