"""A planned node's record in the journal, and what of it must survive the process.

Pure values (``rollout.journal.state`` holds the journal around them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rollout.model import ConfigRef, NodePhase


@dataclass(frozen=True)
class NodeRecord:
    """One planned node. ``previous`` is meaningful once ``assigned_at`` is set (None = local).

    ``assigned_at``/``revert_requested_at`` are intents (recorded before the write);
    ``written_at``/``revert_written_at`` are facts: when the write was acknowledged (or, when the
    process that wrote it died before recording it, when the node was first seen carrying it).
    Every clock of the node (its progress deadline, whether a failure came after our write)
    starts at the fact, so a write re-sent an hour after its intent is judged from the new write.
    """

    batch: int
    assigned_at: datetime | None = None
    previous: ConfigRef | None = None
    phase: NodePhase = NodePhase.PENDING
    phase_since: datetime | None = None
    revert_to: ConfigRef | None = None
    revert_requested_at: datetime | None = None
    skipped: str = ""  # why the node was left out when its batch started ("" = it was not)
    written_at: datetime | None = None
    revert_written_at: datetime | None = None
    # a drain (rollout.machine.drains): the cordon (intent), the node seen empty (fact), what holds
    # it back now (a pod and its budget, "" = nothing), the node given back (intent)
    cordoned_at: datetime | None = None
    drained_at: datetime | None = None
    drain_blocked: str = ""
    uncordoned_at: datetime | None = None

    @property
    def assigned(self) -> bool:
        return self.assigned_at is not None

    @property
    def reverting(self) -> bool:
        return self.revert_requested_at is not None

    @property
    def cordoned(self) -> bool:
        """This rollout has cordoned the node and not given it back yet."""
        return self.cordoned_at is not None and self.uncordoned_at is None


def node_intents(rec: NodeRecord) -> tuple[Any, ...]:
    """What of a node's record must survive the process: its writes, never its phase."""
    return (rec.assigned_at, rec.previous, rec.revert_to, rec.revert_requested_at, rec.skipped, rec.written_at,
            rec.revert_written_at, rec.cordoned_at, rec.drained_at, rec.drain_blocked, rec.uncordoned_at)


class NodeIntents:
    """Every node's :func:`node_intents`, compared without copying them out: the journal's records are
    frozen and most of them are the same objects from one decision to the next (at 20,000 nodes a
    copy of them all was a tenth of a decision while a batch landed)."""

    __slots__ = ("nodes",)

    def __init__(self, nodes: Mapping[str, NodeRecord]) -> None:
        self.nodes = nodes

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeIntents):
            return NotImplemented
        mine, theirs = self.nodes, other.nodes
        if mine is theirs:
            return True
        if len(mine) != len(theirs):
            return False
        for name, rec in mine.items():
            was = theirs.get(name)
            if rec is not was and (was is None or node_intents(rec) != node_intents(was)):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]  # compared, never hashed (it holds a mapping)
