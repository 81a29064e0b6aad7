"""What the machine can decide: the actions, frozen values with a reason for the operator's log.

``rollout.machine`` decides which one comes next; ``rollout.loop.engine`` carries it out; the flows
show it. An action never does anything itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from rollout.journal import RolloutStatus
from rollout.model import ConfigRef, NodePhase
from rollout.drain import DrainRules
from rollout.planner import Skipped

NO_FAILED: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True)
class Action:
    """One thing the engine should do next. ``reason`` is for the operator's log."""

    reason: str

    @property
    def kind(self) -> str:
        return type(self).__name__

    @property
    def batch_index(self) -> int | None:
        value = getattr(self, "batch", None)
        return value if isinstance(value, int) else None


@dataclass(frozen=True, kw_only=True)
class AssignBatch(Action):
    """Point ``nodes`` at the target, writing ``annotations[node]`` in the same PATCH.

    ``previous`` covers every node the journal records as assigned by this action; it can name
    more nodes than ``nodes`` when some already carry this rollout's assignment (journal rebuilt):
    those are recorded but not written again.
    """

    batch: int
    nodes: tuple[str, ...]
    target: ConfigRef
    previous: Mapping[str, ConfigRef | None]
    annotations: Mapping[str, Mapping[str, str]]
    # nodes of the batch left out because they were down when it started, with why
    skipped: Mapping[str, str] = field(default_factory=lambda: NO_FAILED)

    def patch_for(self, node: str) -> dict[str, Any]:
        """The merge patch for one node: configSource (spec form) plus our annotations."""
        return {
            "metadata": {"annotations": dict(self.annotations[node])},
            "spec": {"configSource": {"configMap": self.target.unresolved().to_api()}},
        }


@dataclass(frozen=True, kw_only=True)
class DrainNodes(Action):
    """One round of a drain: cordon ``cordon`` (the nodes not cordoned yet), then evict the pods
    left on ``nodes`` through the Eviction API as ``rules`` say; the engine folds what each node
    has left into the journal (``Journal.with_drain_progress``) and looks again ``poll`` after the
    round began (at once when the round took longer), unless every node is empty."""

    nodes: tuple[str, ...]
    cordon: tuple[str, ...]
    rules: DrainRules
    batch: int | None = None
    poll: timedelta = timedelta(seconds=2)


@dataclass(frozen=True, kw_only=True)
class UncordonNodes(Action):
    """Give ``nodes`` back: uncordon each (only where this rollout cordoned it) and remove the
    drain's annotations. ``skipped``: nodes left out of their batch on the way, with why."""

    nodes: tuple[str, ...]
    batch: int | None = None
    skipped: Mapping[str, str] = field(default_factory=lambda: NO_FAILED)


@dataclass(frozen=True, kw_only=True)
class Wait(Action):
    """Nothing to do until ``until`` (or until a watch event says something changed).

    ``on`` names what the rollout waits for, in a word (``soak``, ``nodes``, ``resume``,
    ``maxUnavailable``, ``healthy nodes``, ``notReadyFor``, ``reverts``, ``analysis``), and ``ends`` when that
    wait ends at the latest (a soak's end, a progress deadline; None: when a person or a node
    acts): what `rollout status` shows. ``until`` is only the next look.
    """

    until: datetime
    batch: int | None = None
    on: str = ""
    ends: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class AwaitApproval(Action):
    """Ask a human whether to go on after ``batch``; answer with ``Journal.with_approval``."""

    batch: int
    next_batch: int
    deadline: datetime
    evidence: tuple[str, ...] = ()
    about_analysis: bool = False  # the batch's analysis was inconclusive: go on anyway?


@dataclass(frozen=True, kw_only=True)
class WaitForWindow(Action):
    """Outside every maintenance window: the next batch may start at ``until``."""

    until: datetime


@dataclass(frozen=True, kw_only=True)
class RevertNodes(Action):
    """Point each node back at ``nodes[node]`` (None = remove configSource: local config)."""

    nodes: Mapping[str, ConfigRef | None]
    scope: str  # "batch" | "all"
    batch: int | None = None
    failed: Mapping[str, str] = field(default_factory=lambda: NO_FAILED)
    # recorded as reverting, but not written now: drained first (rollout.machine.drains)
    held: frozenset[str] = frozenset()
    # written in the same PATCH, per node (a drained node's state reset)
    annotations: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def patch_for(self, node: str) -> dict[str, Any]:
        to = self.nodes[node]
        source = None if to is None else {"configMap": to.unresolved().to_api()}
        return {"spec": {"configSource": source}}


@dataclass(frozen=True, kw_only=True)
class Halt(Action):
    """Stop. ``failed`` maps each failed node to why; nodes stay as they are."""

    failed: Mapping[str, str] = field(default_factory=lambda: NO_FAILED)
    batch: int | None = None


@dataclass(frozen=True)
class RolloutReport:
    """The end of a rollout in numbers, for the final log line and the flow's artifact."""

    rollout: str
    target: ConfigRef
    status: RolloutStatus
    started_at: datetime
    finished_at: datetime
    batches_done: int
    batches_total: int
    phases: Mapping[str, NodePhase]
    tolerated: Mapping[str, str]
    skipped: tuple[Skipped, ...]

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(p.value for p in self.phases.values()).items()))

    def lines(self) -> list[str]:
        out = [
            f"rollout {self.rollout} to {self.target}: {self.status.value}",
            f"batches {self.batches_done}/{self.batches_total}, took {self.finished_at - self.started_at}",
            "nodes: " + (", ".join(f"{k} {v}" for k, v in self.counts().items()) or "none"),
        ]
        out += [f"tolerated failure: {n}: {r}" for n, r in sorted(self.tolerated.items())]
        skipped = Counter(s.reason for s in self.skipped)
        out += [f"skipped {count}: {reason}" for reason, count in sorted(skipped.items())]
        return out


@dataclass(frozen=True, kw_only=True)
class Complete(Action):
    report: RolloutReport


@dataclass(frozen=True, kw_only=True)
class RollbackDone(Action):
    """A rollback run has walked every batch back; ``failed`` names nodes that did not come back."""

    failed: Mapping[str, str] = field(default_factory=lambda: NO_FAILED)
    reverted: int = 0


