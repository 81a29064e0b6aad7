"""What one decision reads, as one frozen value: the journal, the verdicts, the nodes, the time.

Every rule of the machine reads the same few things; passing them as one value keeps each rule's
signature to what is particular to it (a batch, some nodes) and makes sure all of them judge the
same moment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from rollout.journal import Journal
from rollout.model import NodeObservation, NodePhase
from rollout.machine.phases import FAILURE_PHASES, PhaseVerdict
from rollout.planner import RolloutPlan
from rollout.policy import RolloutPolicy

# the verdict of a node that has none yet (waiting for its batch)
UNSEEN = PhaseVerdict(NodePhase.PENDING, "")


@dataclass(frozen=True)
class BatchProgress:
    """Where a batch's nodes are, from one pass over them: the rules that read it (the soak's
    start, whether the batch is done, what it waits for and until when) each walked the batch on
    their own, and at 10,000 nodes those walks were a third of a decision while the batch landed."""

    assigned: tuple[str, ...]  # its nodes written (or to be written again), in plan order
    off_spec: tuple[str, ...]  # assigned, there, and not pointed at the target (lost, or re-pointed)
    waiting: tuple[str, ...]  # assigned, the config's to wait for (not gone or down), not done
    soaking: frozenset[str]  # waiting, and on the target: only their soak is left
    settled: tuple[str, ...]  # assigned, the config's, and on the target (done or soaking)
    off_target: bool  # an assigned node of the config's is not on the target (yet)
    to_assign: bool  # a node of the batch is still to be assigned (there, and not skipped)
    recheck_at: datetime  # the first moment a waiting node can change by time alone, or the recheck
    last_deadline: datetime | None  # the last progress deadline of a waiting node not on the target


@dataclass(frozen=True)
class Situation:
    """One decision's inputs.

    ``verdicts``: the phase of every planned node that has one (``verdicts.verdicts``), judged on
    the journal before this moment's facts were folded in (folding never changes what a verdict
    depends on). ``watched_since``: since when ``observations`` have been kept current without a
    gap (the engine's live watch); None trusts the observations' own timestamps (a one-off read).
    ``running``: the running batch and its progress, as folding found it (``verdicts.progress``).
    """

    journal: Journal
    verdicts: Mapping[str, PhaseVerdict]
    observations: Mapping[str, NodeObservation]
    now: datetime
    watched_since: datetime | None = None
    running: tuple[int, BatchProgress] | None = None
    # the nodes whose verdict is a failure (bad config, or one a budget counts), in plan order: the
    # few every failure rule looks at, found in one pass over the verdicts when the situation is
    # made (or handed over with them by the verdicts' memo, ``verdicts.failing_nodes``) and kept by
    # ``replace`` with them (folding replaces the journal, never the verdicts; at 20,000 nodes each
    # pass was a tenth of a decision)
    failing: tuple[str, ...] = ()
    _failing_of: Mapping[str, PhaseVerdict] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._failing_of is not self.verdicts:
            failing = tuple(n for n, v in self.verdicts.items() if v.phase in FAILURE_PHASES)
            object.__setattr__(self, "failing", failing)
            object.__setattr__(self, "_failing_of", self.verdicts)

    @property
    def plan(self) -> RolloutPlan:
        return self.journal.plan

    @property
    def policy(self) -> RolloutPolicy:
        return self.journal.plan.policy

    def phase_of(self, node: str) -> NodePhase:
        """The node's phase now (PENDING while it has no verdict)."""
        return self.verdicts.get(node, UNSEEN).phase
