"""The rollout journal's state: what a rollout has done and seen, as a frozen value.

Transitions are ``with_*`` methods returning a new journal; nothing mutates (kopf's
``HandlerState`` idea). Intents are recorded *before* the engine acts on them (write-ahead): an
assignment recorded here whose PATCH never landed is visible as a node whose spec is not the
target and which lacks our annotations, and the machine re-issues it for exactly those nodes.

Bounded so its head ConfigMap stays small whatever the plan's size: reasons are cut at
``MAX_REASON`` characters, the failed nodes listed at ``MAX_FAILED_LISTED``, and the decision log
keeps the latest ``MAX_DECISIONS`` entries. How it is stored: ``rollout.journal.configmap``.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from rollout.journal.records import NodeIntents, NodeRecord
from rollout.model import ConfigRef, NodePhase
from rollout.names import journal_configmap_name
from rollout.planner import RolloutPlan
from rollout.timefmt import human

MAX_DECISIONS = 300
PROGRESS_KINDS = frozenset({"Wait", "WaitForWindow"})  # trimmed first when the log is full
MAX_REASON = 400
MAX_FAILED_LISTED = 200


class RolloutStatus(str, enum.Enum):
    RUNNING = "running"
    REVERTING = "reverting"  # a failure action is putting nodes back; ends in HALTED
    HALTED = "halted"
    COMPLETE = "complete"
    ROLLING_BACK = "rolling-back"  # a rollback run is putting every batch back, the last first
    ROLLED_BACK = "rolled-back"


TERMINAL = frozenset({RolloutStatus.HALTED, RolloutStatus.COMPLETE, RolloutStatus.ROLLED_BACK})


class BatchStatus(str, enum.Enum):
    PENDING = "pending"
    IN_PROGRESS = "in-progress"
    DONE = "done"
    FAILED = "failed"


class ApprovalOutcome(str, enum.Enum):
    APPROVED = "approved"
    REJECTED = "rejected"
    TIMED_OUT = "timed-out"


@dataclass(frozen=True)
class ApprovalRecord:
    """The human gate after a batch: when it was asked, until when, and what came of it."""

    requested_at: datetime
    deadline: datetime
    outcome: ApprovalOutcome | None = None
    decided_at: datetime | None = None
    by: str = ""
    note: str = ""


class AnalysisVerdict(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class AnalysisRecord:
    """The verdict of a batch's analysis, once it has one: only the decision and why (the
    measurements themselves are evidence, kept beside the journal, not in it)."""

    verdict: AnalysisVerdict
    at: datetime
    reason: str = ""
    nodes: tuple[str, ...] = ()  # the nodes that drove a failure, where the query is per node


@dataclass(frozen=True)
class BatchState:
    status: BatchStatus = BatchStatus.PENDING
    started_at: datetime | None = None
    finished_at: datetime | None = None
    approval: ApprovalRecord | None = None
    analysis: AnalysisRecord | None = None
    # when every node of the batch was on the target: its soak began (what `rollout status` shows
    # the soak's end from; the nodes' own phase times are not kept in the cluster)
    soak_started_at: datetime | None = None


@dataclass(frozen=True)
class DecisionRecord:
    at: datetime
    kind: str
    reason: str
    batch: int | None = None


def frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy: the journal's mappings never change under a holder."""
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Journal:
    """What a rollout has done and seen so far. Build with ``Journal.start(plan, now=...)``."""

    plan: RolloutPlan
    created_at: datetime
    batches: tuple[BatchState, ...]
    nodes: Mapping[str, NodeRecord]
    status: RolloutStatus = RolloutStatus.RUNNING
    decisions: tuple[DecisionRecord, ...] = ()
    decisions_dropped: int = 0
    failure_reason: str = ""
    failed_nodes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    finished_at: datetime | None = None
    # set when a person stopped the run (Ctrl-C, SIGTERM); cleared when a run resumes it
    stopped_at: datetime | None = None
    rollback_to: str = ""  # "previous" | "local" while/after a rollback run
    # lifecycle requests (`rollout pause/resume/abort/promote`), applied once each by id
    paused: str = ""  # who paused it and when ("" = not paused): no new batch starts
    abort: str = ""  # why a person aborted it: the policy's failure action follows
    soak_waived: tuple[int, ...] = ()  # batches whose soak a person ended early (promote)
    last_request: str = ""
    # where its parts begin (plan positions), as it was last stored: the codec's business
    # (``rollout.journal.parts``), kept so a save rewrites only the parts that changed
    layout: tuple[int, ...] = field(default=(), compare=False)

    # ----------------------------------------------------------------- construction / queries

    @classmethod
    def start(cls, plan: RolloutPlan, *, now: datetime) -> Journal:
        nodes = {n: NodeRecord(batch=b.index) for b in plan.batches for n in b.nodes}
        return cls(
            plan=plan,
            created_at=now,
            batches=tuple(BatchState() for _ in plan.batches),
            nodes=frozen(nodes),
        )

    @property
    def rollout(self) -> str:
        return self.plan.rollout

    @property
    def target(self) -> ConfigRef:
        return self.plan.target

    @property
    def policy_name(self) -> str:
        return self.plan.policy.name

    @property
    def configmap_name(self) -> str:
        return journal_configmap_name(self.rollout)

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    @property
    def shown_status(self) -> str:
        """The status as people read it: how the run ended, or ``stopped`` when someone stopped it."""
        if self.stopped_at is not None and not self.finished:
            return "stopped"
        if self.paused and not self.finished:
            return "paused"
        if self.status is RolloutStatus.HALTED and self.reverting_nodes() and not self.rollback_to:
            return "reverted"
        return self.status.value

    def material(self) -> tuple[Any, ...]:
        """What must survive this process: the rollout's state, not per-node observations.

        The engine saves the journal only when this changes (a batch starts, finishes or fails, a
        revert, a gate, a halt), never per node event: node phases are recomputed from the nodes
        on resume, and what is per node lives in the annotations written with the assignment.
        """
        records = NodeIntents(self.nodes)
        decisions = tuple(d for d in self.decisions if d.kind not in PROGRESS_KINDS)
        return (self.status, self.batches, self.failure_reason, tuple(self.failed_nodes.items()),
                self.finished_at, self.stopped_at, self.rollback_to, records, decisions, self.paused,
                self.abort, self.soak_waived, self.last_request)

    def current_batch(self) -> int | None:
        """The first batch that is not done; None when all are."""
        for i, state in enumerate(self.batches):
            if state.status is not BatchStatus.DONE:
                return i
        return None

    def assigned_nodes(self, *, batch: int | None = None) -> list[str]:
        if batch is not None:  # the batch's own nodes, in the same (plan) order: not every node's
            return [n for n in self.plan.batches[batch].nodes if self.nodes[n].assigned]
        return [n for n, r in self.nodes.items() if r.assigned]

    def reverting_nodes(self) -> list[str]:
        return [n for n, r in self.nodes.items() if r.reverting]

    def cordoned_nodes(self) -> list[str]:
        """The nodes this rollout cordoned and has not given back."""
        return [n for n, r in self.nodes.items() if r.cordoned]

    # ----------------------------------------------------------------- transitions

    def with_assigned(self, batch: int, previous: Mapping[str, ConfigRef | None], *, at: datetime) -> Journal:
        """Record (before the PATCH) that these nodes of ``batch`` get the target at ``at``."""
        nodes = dict(self.nodes)
        for name, prev in previous.items():
            rec = nodes[name]
            if rec.assigned:  # never overwrite what a node had before *our* first assignment
                continue
            nodes[name] = replace(
                rec, assigned_at=at, previous=prev, phase=NodePhase.ASSIGNED, phase_since=at
            )
        state = self.batches[batch]
        if state.status is BatchStatus.PENDING:
            state = replace(state, status=BatchStatus.IN_PROGRESS, started_at=at)
        return replace(self, nodes=frozen(nodes), batches=_set(self.batches, batch, state))

    def with_written(self, acknowledged: Mapping[str, datetime]) -> Journal:
        """Record when each node's assignment write was acknowledged (the first one counts)."""
        return self._with_records({
            n: replace(rec, written_at=at) for n, at in acknowledged.items()
            if (rec := self.nodes.get(n)) is not None and rec.assigned and rec.written_at is None
        })

    def with_revert_written(self, acknowledged: Mapping[str, datetime]) -> Journal:
        """Record when each node's revert write was acknowledged (the first one counts)."""
        return self._with_records({
            n: replace(rec, revert_written_at=at) for n, at in acknowledged.items()
            if (rec := self.nodes.get(n)) is not None and rec.reverting and rec.revert_written_at is None
        })

    def with_cordoned(self, nodes: Iterable[str], *, at: datetime) -> Journal:
        """Record (before the PATCH) that this rollout cordons these nodes: a new drain cycle for a
        node given back before (a rollback drains it again)."""
        return self._with_records({
            n: replace(rec, cordoned_at=at, drained_at=None, drain_blocked="", uncordoned_at=None)
            for n in nodes if (rec := self.nodes.get(n)) is not None and not rec.cordoned
        })

    def with_drain_progress(self, progress: Mapping[str, tuple[bool, str]], *, at: datetime) -> Journal:
        """Fold a drain round in: per node whether it is empty now (the first time counts) and
        what holds it back ("" = nothing)."""
        changed = {}
        for n, (drained, blocked) in progress.items():
            rec = self.nodes.get(n)
            if rec is None or not rec.cordoned:
                continue
            drained_at = rec.drained_at or (at if drained else None)
            blocked = "" if drained_at else blocked[:MAX_REASON]
            if (drained_at, blocked) != (rec.drained_at, rec.drain_blocked):
                changed[n] = replace(rec, drained_at=drained_at, drain_blocked=blocked)
        return self._with_records(changed)

    def with_uncordoned(self, nodes: Iterable[str], *, at: datetime) -> Journal:
        """Record (before the PATCH) that this rollout gives these nodes back."""
        return self._with_records({
            n: replace(rec, uncordoned_at=at) for n in nodes if (rec := self.nodes.get(n)) is not None and rec.cordoned
        })

    def _with_records(self, changed: Mapping[str, NodeRecord]) -> Journal:
        return replace(self, nodes=frozen({**self.nodes, **changed})) if changed else self

    def with_skipped(self, reasons: Mapping[str, str], *, at: datetime) -> Journal:
        """Leave these nodes out of their batch (down when it started), saying why."""
        nodes = dict(self.nodes)
        for name, why in reasons.items():
            rec = nodes[name]
            if not rec.assigned and not rec.skipped:
                nodes[name] = replace(rec, skipped=why[:MAX_REASON], phase=NodePhase.SKIPPED, phase_since=at)
        return replace(self, nodes=frozen(nodes))

    def with_request(self, request_id: str, action: str, *, by: str, at: datetime) -> Journal:
        """Apply a person's lifecycle request once (``pause``, ``resume``, ``abort``, ``promote``);
        what it does, in words, is ``rollout.machine.requests`` (which records it as a decision)."""
        if not request_id or request_id == self.last_request or self.finished:
            return self
        who = f"{by or 'someone'} at {human(at)}"[:MAX_REASON]
        j = replace(self, last_request=request_id)
        if action == "pause":
            return replace(j, paused=who)
        if action == "resume":
            return replace(j, paused="")
        if action == "abort":
            return replace(j, abort=f"aborted by {who}", paused="")
        if action == "promote":  # the running batch's soak only, never a batch not started yet
            current = j.current_batch()
            if current is None or j.batches[current].status is not BatchStatus.IN_PROGRESS:
                return j
            return replace(j, soak_waived=tuple(sorted({*j.soak_waived, current})))
        return j

    def with_retry(self, *, at: datetime, by: str) -> Journal:
        """Run a halted rollout again (``rollout retry``): every batch that failed, or whose nodes
        were reverted, starts again from pending (its gate asked again); a reverted or skipped
        node of it is planned afresh, one still assigned is adopted, never written twice. A
        rollout that did not halt is returned as it is."""
        if self.status is not RolloutStatus.HALTED or self.rollback_to:
            return self
        nodes, batches, again = dict(self.nodes), list(self.batches), []
        for index, state in enumerate(self.batches):
            names = self.plan.batches[index].nodes
            reverted = [n for n in names if self.nodes[n].reverting or self.nodes[n].skipped]
            if state.status is not BatchStatus.FAILED and not any(self.nodes[n].reverting for n in names):
                continue
            again.append(self.plan.batches[index].label)
            batches[index] = BatchState()
            nodes.update({n: NodeRecord(batch=index) for n in reverted})
        retried = replace(self, status=RolloutStatus.RUNNING, batches=tuple(batches), nodes=frozen(nodes),
                          failure_reason="", failed_nodes=frozen({}), finished_at=None, stopped_at=None, abort="",
                          paused="", soak_waived=())
        what = ", ".join(again) or "the next batch"
        return retried.with_decision("Retry", f"retried by {by or 'someone'} at {human(at)}: {what} again", at=at)

    def with_stopped(self, *, at: datetime | None) -> Journal:
        """Mark the run stopped by a person (``at``), or resumed (None)."""
        return replace(self, stopped_at=at)

    def with_rollback(self, to: str, *, at: datetime, reason: str) -> Journal:
        """Start walking every touched batch back, the last first (see ``rollout.machine``)."""
        if self.status in (RolloutStatus.ROLLING_BACK, RolloutStatus.ROLLED_BACK) and self.rollback_to == to:
            return self
        return replace(
            self, status=RolloutStatus.ROLLING_BACK, rollback_to=to, finished_at=None, stopped_at=None,
            failure_reason=reason[:MAX_REASON],
        )

    def with_phases(self, phases: Mapping[str, NodePhase], *, now: datetime) -> Journal:
        """Fold observed phases in; ``phase_since`` moves only when the phase changes."""
        changed = {
            n: replace(self.nodes[n], phase=p, phase_since=now)
            for n, p in phases.items()
            if n in self.nodes and self.nodes[n].phase is not p
        }
        if not changed:
            return self
        return replace(self, nodes=frozen({**self.nodes, **changed}))

    def with_batch_status(self, batch: int, status: BatchStatus, *, at: datetime) -> Journal:
        state = self.batches[batch]
        if state.status is status:
            return self
        started = state.started_at or at
        finished = at if status in (BatchStatus.DONE, BatchStatus.FAILED) else state.finished_at
        new = replace(state, status=status, started_at=started, finished_at=finished)
        return replace(self, batches=_set(self.batches, batch, new))

    def with_analysis(self, batch: int, verdict: AnalysisVerdict, *, at: datetime, reason: str,
                      nodes: tuple[str, ...] = ()) -> Journal:
        """Record the verdict of ``batch``'s analysis; the first verdict stands."""
        state = self.batches[batch]
        if state.analysis is not None:
            return self
        record = AnalysisRecord(verdict, at, reason[:MAX_REASON], nodes[:MAX_FAILED_LISTED])
        return replace(self, batches=_set(self.batches, batch, replace(state, analysis=record)))

    def with_soak_started(self, batch: int, at: datetime | None) -> Journal:
        """Record when every node of ``batch`` was on the target (None: one fell off it again)."""
        state = self.batches[batch]
        if state.soak_started_at == at:
            return self
        return replace(self, batches=_set(self.batches, batch, replace(state, soak_started_at=at)))

    def with_approval_requested(self, batch: int, *, at: datetime, deadline: datetime) -> Journal:
        state = self.batches[batch]
        if state.approval is not None:
            return self  # asked already: keep the first request time and its deadline
        new = replace(state, approval=ApprovalRecord(requested_at=at, deadline=deadline))
        return replace(self, batches=_set(self.batches, batch, new))

    def with_approval(
        self, batch: int, outcome: ApprovalOutcome, *, at: datetime, by: str = "", note: str = ""
    ) -> Journal:
        """Record a human's (or the clock's) answer to the gate after ``batch``; first answer wins."""
        state = self.batches[batch]
        current = state.approval or ApprovalRecord(requested_at=at, deadline=at)
        if current.outcome is not None:
            return self
        record = replace(current, outcome=outcome, decided_at=at, by=by, note=note[:MAX_REASON])
        return replace(self, batches=_set(self.batches, batch, replace(state, approval=record)))

    def with_revert_requested(
        self, targets: Mapping[str, ConfigRef | None], *, at: datetime, reason: str
    ) -> Journal:
        nodes = dict(self.nodes)
        for name, to in targets.items():
            if not nodes[name].reverting:
                nodes[name] = replace(
                    nodes[name],
                    revert_to=to,
                    revert_requested_at=at,
                    phase=NodePhase.REVERTING,
                    phase_since=at,
                )
        status = RolloutStatus.REVERTING if self.status is RolloutStatus.RUNNING else self.status
        return replace(
            self,
            nodes=frozen(nodes),
            status=status,
            failure_reason=self.failure_reason or reason[:MAX_REASON],
        )

    def with_status(
        self,
        status: RolloutStatus,
        *,
        at: datetime,
        reason: str = "",
        failed: Mapping[str, str] | None = None,
    ) -> Journal:
        finished = at if status in TERMINAL else self.finished_at
        listed = dict(list((failed or self.failed_nodes).items())[:MAX_FAILED_LISTED])
        return replace(
            self,
            status=status,
            finished_at=finished,
            failure_reason=(reason or self.failure_reason)[:MAX_REASON],
            failed_nodes=frozen({k: v[:MAX_REASON] for k, v in listed.items()}),
        )

    def with_decision(self, kind: str, reason: str, *, at: datetime, batch: int | None = None) -> Journal:
        """Append to the decision log; a repeat of the last entry (same kind and reason) is skipped,
        and waits are not logged at all (they are progress, in the run's log, not decisions)."""
        if kind in PROGRESS_KINDS:
            return self
        text = reason[:MAX_REASON]
        last = self.decisions[-1] if self.decisions else None
        if last is not None and (last.kind, last.reason, last.batch) == (kind, text, batch):
            return self
        decisions = (*self.decisions, DecisionRecord(at=at, kind=kind, reason=text, batch=batch))
        if len(decisions) <= MAX_DECISIONS:
            return replace(self, decisions=decisions)
        return replace(self, decisions=_trim(decisions), decisions_dropped=self.decisions_dropped + 1)


def _trim(decisions: tuple[DecisionRecord, ...]) -> tuple[DecisionRecord, ...]:
    """Drop one entry: the oldest Wait if there is one (progress chatter), else the oldest."""
    for i, d in enumerate(decisions[:-1]):
        if d.kind in PROGRESS_KINDS:
            return decisions[:i] + decisions[i + 1 :]
    return decisions[1:]


def _set(items: tuple[BatchState, ...], index: int, value: BatchState) -> tuple[BatchState, ...]:
    return (*items[:index], value, *items[index + 1 :])

