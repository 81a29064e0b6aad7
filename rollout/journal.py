"""The rollout journal: everything needed to resume a rollout, as a frozen value.

A rollout must survive its own process dying at any moment. So its state is never held only in
memory: the journal is a frozen value (kopf's ``HandlerState`` idea) that the shell stores in a
``kube-system`` ConfigMap after every decision, and each node additionally carries annotations
written in the same PATCH as its assignment (system-upgrade-controller keeps progress on the nodes
the same way). Re-running a rollout with the same name loads the journal, observes the nodes
again, and ``rollout.machine.decide`` continues where it stopped.

Transitions are ``with_*`` methods returning a new journal; nothing mutates. Intents are written
*before* the shell acts on them (write-ahead): an assignment recorded here whose PATCH never
landed is visible as a node whose spec is not the target and which lacks our annotations, and the
machine re-issues it for exactly those nodes.

The ConfigMap body stays small at 5,000 nodes: node records are positional arrays aligned with the
plan order (no repeated names or keys), sources are interned, timestamps are epoch milliseconds,
and the decision log keeps the most recent ``MAX_DECISIONS`` entries. Journal times therefore have
millisecond precision. Pure: serialisation only, no I/O.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

from rollout.model import ConfigRef, NodePhase
from rollout.names import (
    ANN_ASSIGNED_AT,
    ANN_BATCH,
    ANN_PREVIOUS_SOURCE,
    ANN_ROLLOUT,
    LABEL_ROLLOUT,
    LOCAL_SOURCE,
    journal_configmap_name,
    label_value,
)
from rollout.planner import Batch, PlanEstimate, RolloutPlan, Skipped
from rollout.policy import RolloutPolicy
from rollout.timefmt import human, parse_rfc3339, rfc3339

FORMAT = "kubelet-rollout-journal/v1"
MAX_DECISIONS = 300
PROGRESS_KINDS = frozenset({"Wait", "WaitForWindow"})  # trimmed first when the log is full
MAX_REASON = 400
MAX_FAILED_LISTED = 200
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


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


@dataclass(frozen=True)
class BatchState:
    status: BatchStatus = BatchStatus.PENDING
    started_at: datetime | None = None
    finished_at: datetime | None = None
    approval: ApprovalRecord | None = None


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

    @property
    def assigned(self) -> bool:
        return self.assigned_at is not None

    @property
    def reverting(self) -> bool:
        return self.revert_requested_at is not None


@dataclass(frozen=True)
class DecisionRecord:
    at: datetime
    kind: str
    reason: str
    batch: int | None = None


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
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

    # ----------------------------------------------------------------- construction / queries

    @classmethod
    def start(cls, plan: RolloutPlan, *, now: datetime) -> Journal:
        nodes = {n: NodeRecord(batch=b.index) for b in plan.batches for n in b.nodes}
        return cls(
            plan=plan,
            created_at=now,
            batches=tuple(BatchState() for _ in plan.batches),
            nodes=_frozen(nodes),
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

        The shell saves the journal only when this changes (a batch starts, finishes or fails, a
        revert, a gate, a halt), never per node event: node phases are recomputed from the nodes
        on resume, and what is per node lives in the annotations written with the assignment.
        """
        records = tuple(
            (n, r.assigned_at, r.previous, r.revert_to, r.revert_requested_at, r.skipped, r.written_at,
             r.revert_written_at)
            for n, r in self.nodes.items()
        )
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
        return [n for n, r in self.nodes.items() if r.assigned and (batch is None or r.batch == batch)]

    def reverting_nodes(self) -> list[str]:
        return [n for n, r in self.nodes.items() if r.reverting]

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
        return replace(self, nodes=_frozen(nodes), batches=_set(self.batches, batch, state))

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

    def _with_records(self, changed: Mapping[str, NodeRecord]) -> Journal:
        return replace(self, nodes=_frozen({**self.nodes, **changed})) if changed else self

    def with_skipped(self, reasons: Mapping[str, str], *, at: datetime) -> Journal:
        """Leave these nodes out of their batch (down when it started), saying why."""
        nodes = dict(self.nodes)
        for name, why in reasons.items():
            rec = nodes[name]
            if not rec.assigned and not rec.skipped:
                nodes[name] = replace(rec, skipped=why[:MAX_REASON], phase=NodePhase.SKIPPED, phase_since=at)
        return replace(self, nodes=_frozen(nodes))

    def with_request(self, request_id: str, action: str, *, by: str, at: datetime) -> Journal:
        """Apply a person's lifecycle request once (``pause``, ``resume``, ``abort``, ``promote``)."""
        if not request_id or request_id == self.last_request or self.finished:
            return self
        who = f"{by or 'someone'} at {human(at)}"
        j = replace(self, last_request=request_id)
        if action == "pause":
            return replace(j, paused=who)
        if action == "resume":
            return replace(j, paused="")
        if action == "abort":
            return replace(j, abort=f"aborted by {who}", paused="")
        if action == "promote":
            current = j.current_batch()
            waived = j.soak_waived if current is None else tuple(sorted({*j.soak_waived, current}))
            return replace(j, soak_waived=waived)
        return j

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
        return replace(self, nodes=_frozen({**self.nodes, **changed}))

    def with_batch_status(self, batch: int, status: BatchStatus, *, at: datetime) -> Journal:
        state = self.batches[batch]
        if state.status is status:
            return self
        started = state.started_at or at
        finished = at if status in (BatchStatus.DONE, BatchStatus.FAILED) else state.finished_at
        new = replace(state, status=status, started_at=started, finished_at=finished)
        return replace(self, batches=_set(self.batches, batch, new))

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
            nodes=_frozen(nodes),
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
            failed_nodes=_frozen({k: v[:MAX_REASON] for k, v in listed.items()}),
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

    # ----------------------------------------------------------------- ConfigMap body

    def to_configmap_data(self) -> dict[str, str]:
        """The ``data`` of the journal ConfigMap: a few JSON values, each far below 1 MiB."""
        return {
            "format": FORMAT,
            "meta": _dumps(_meta_to_json(self)),
            "policy": _dumps(self.plan.policy.dump()),
            "plan": _dumps(_plan_to_json(self.plan)),
            "batches": _dumps([_batch_to_json(b) for b in self.batches]),
            "nodes": _dumps(_nodes_to_json(self.plan, self.nodes)),
            "decisions": _dumps([_decision_to_json(d) for d in self.decisions]),
        }

    @classmethod
    def from_configmap_data(cls, data: Mapping[str, str]) -> Journal:
        """Inverse of ``to_configmap_data``; raises ValueError on a body it does not understand."""
        if data.get("format") != FORMAT:
            raise ValueError(f"not a rollout journal (format {data.get('format')!r}, want {FORMAT!r})")
        meta = json.loads(data["meta"])
        policy = RolloutPolicy.model_validate(json.loads(data["policy"]))
        plan = _plan_from_json(json.loads(data["plan"]), meta=meta, policy=policy)
        return cls(
            plan=plan,
            created_at=_t(meta["createdAt"]),
            batches=tuple(_batch_from_json(b) for b in json.loads(data["batches"])),
            nodes=_frozen(_nodes_from_json(plan, json.loads(data["nodes"]))),
            status=RolloutStatus(meta["status"]),
            decisions=tuple(_decision_from_json(d) for d in json.loads(data["decisions"])),
            decisions_dropped=meta.get("decisionsDropped", 0),
            failure_reason=meta.get("failureReason", ""),
            failed_nodes=_frozen(meta.get("failedNodes", {})),
            finished_at=_t_opt(meta.get("finishedAt")),
            stopped_at=_t_opt(meta.get("stoppedAt")),
            rollback_to=meta.get("rollbackTo", ""),
            paused=meta.get("paused", ""),
            abort=meta.get("abort", ""),
            soak_waived=tuple(meta.get("soakWaived", ())),
            last_request=meta.get("lastRequest", ""),
        )


def _trim(decisions: tuple[DecisionRecord, ...]) -> tuple[DecisionRecord, ...]:
    """Drop one entry: the oldest Wait if there is one (progress chatter), else the oldest."""
    for i, d in enumerate(decisions[:-1]):
        if d.kind in PROGRESS_KINDS:
            return decisions[:i] + decisions[i + 1 :]
    return decisions[1:]


def _set(items: tuple[BatchState, ...], index: int, value: BatchState) -> tuple[BatchState, ...]:
    return (*items[:index], value, *items[index + 1 :])


# --------------------------------------------------------------------------- JSON helpers


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _ms(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(milliseconds=1)


def _ms_opt(at: datetime | None) -> int | None:
    return None if at is None else _ms(at)


def _t(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def _t_opt(ms: int | None) -> datetime | None:
    return None if ms is None else _t(ms)


def _ref_opt(body: Mapping[str, Any] | None) -> ConfigRef | None:
    return None if body is None else ConfigRef.from_api({"configMap": body})


def _meta_to_json(j: Journal) -> dict[str, Any]:
    return {
        "rollout": j.rollout,
        "target": j.target.to_api(),
        "policy": j.policy_name,
        "status": j.status.value,
        "createdAt": _ms(j.created_at),
        "finishedAt": _ms_opt(j.finished_at),
        "failureReason": j.failure_reason,
        "failedNodes": dict(j.failed_nodes),
        "decisionsDropped": j.decisions_dropped,
        "stoppedAt": _ms_opt(j.stopped_at),
        "rollbackTo": j.rollback_to,
        "paused": j.paused,
        "abort": j.abort,
        "soakWaived": list(j.soak_waived),
        "lastRequest": j.last_request,
    }


def _plan_to_json(plan: RolloutPlan) -> dict[str, Any]:
    order = plan.nodes
    zones = sorted(set(plan.zones.values()))
    reasons = sorted({s.reason for s in plan.skipped})
    return {
        "order": list(order),
        "batches": [[b.step, b.size] for b in plan.batches],
        "zones": zones,
        "zoneOf": [zones.index(plan.zones[n]) if n in plan.zones else -1 for n in order],
        "skipReasons": reasons,
        "skipped": [[s.node, reasons.index(s.reason)] for s in plan.skipped],
        "unselected": plan.unselected,
        "maxUnavailable": plan.max_unavailable,
        "batchCap": plan.batch_cap,
        "estimateS": [d.total_seconds() for d in plan.estimate.per_batch],
        "approvalGates": plan.estimate.approval_gates,
        "caveats": list(plan.caveats),
    }


def _plan_from_json(
    body: Mapping[str, Any], *, meta: Mapping[str, Any], policy: RolloutPolicy
) -> RolloutPlan:
    order: list[str] = body["order"]
    batches, pos = [], 0
    for i, (step, size) in enumerate(body["batches"]):
        batches.append(Batch(i, step, tuple(order[pos : pos + size])))
        pos += size
    zones: list[str] = body["zones"]
    target = ConfigRef.from_api({"configMap": meta["target"]})
    assert target is not None
    return RolloutPlan(
        rollout=meta["rollout"],
        target=target,
        policy=policy,
        batches=tuple(batches),
        skipped=tuple(Skipped(n, body["skipReasons"][r]) for n, r in body["skipped"]),
        unselected=body["unselected"],
        max_unavailable=body["maxUnavailable"],
        batch_cap=body["batchCap"],
        estimate=PlanEstimate(
            per_batch=tuple(timedelta(seconds=s) for s in body["estimateS"]),
            approval_gates=body["approvalGates"],
        ),
        caveats=tuple(body["caveats"]),
        zones={n: zones[z] for n, z in zip(order, body["zoneOf"], strict=True) if z >= 0},
    )


def _approval_to_json(a: ApprovalRecord | None) -> list[Any] | None:
    if a is None:
        return None
    outcome = a.outcome.value if a.outcome else None
    return [_ms(a.requested_at), _ms(a.deadline), outcome, _ms_opt(a.decided_at), a.by, a.note]


def _approval_from_json(body: Sequence[Any] | None) -> ApprovalRecord | None:
    if body is None:
        return None
    requested, deadline, outcome, decided, by, note = body
    return ApprovalRecord(
        requested_at=_t(requested),
        deadline=_t(deadline),
        outcome=ApprovalOutcome(outcome) if outcome else None,
        decided_at=_t_opt(decided),
        by=by,
        note=note,
    )


def _batch_to_json(b: BatchState) -> list[Any]:
    return [b.status.value, _ms_opt(b.started_at), _ms_opt(b.finished_at), _approval_to_json(b.approval)]


def _batch_from_json(body: Sequence[Any]) -> BatchState:
    status, started, finished, approval = body
    return BatchState(BatchStatus(status), _t_opt(started), _t_opt(finished), _approval_from_json(approval))


class _Interner:
    """Sources are few (a handful of ConfigMaps) while nodes are many: store each source once."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._index: dict[str, int] = {}

    def index(self, ref: ConfigRef | None) -> int:
        if ref is None:
            return -1
        body = ref.to_api()
        key = _dumps(body)
        if key not in self._index:
            self._index[key] = len(self.items)
            self.items.append(body)
        return self._index[key]


def _nodes_to_json(plan: RolloutPlan, nodes: Mapping[str, NodeRecord]) -> dict[str, Any]:
    sources = _Interner()
    records = []
    for name in plan.nodes:
        r = nodes[name]
        record = [
            _ms_opt(r.assigned_at),
            sources.index(r.previous),
            r.phase.value,
            _ms_opt(r.phase_since),
            sources.index(r.revert_to),
            _ms_opt(r.revert_requested_at),
            r.skipped,
            # the acknowledgments as milliseconds after their intent: a few digits, not thirteen
            _ms_after(r.written_at, r.assigned_at),
            _ms_after(r.revert_written_at, r.revert_requested_at),
        ]
        while len(record) > 6 and record[-1] in (None, ""):
            record.pop()  # fields a node does not have yet cost nothing
        records.append(record)
    return {"sources": sources.items, "records": records}


def _ms_after(at: datetime | None, intent: datetime | None) -> int | None:
    return None if at is None or intent is None else _ms(at) - _ms(intent)


def _t_after(offset: int | None, intent: datetime | None) -> datetime | None:
    return None if offset is None or intent is None else intent + timedelta(milliseconds=offset)


_OPTIONAL_RECORD_FIELDS = ("", None, None)  # skipped, written, revert written: trimmed when unset


def _nodes_from_json(plan: RolloutPlan, body: Mapping[str, Any]) -> dict[str, NodeRecord]:
    sources = [_ref_opt(s) for s in body["sources"]]

    def src(i: int) -> ConfigRef | None:
        return None if i < 0 else sources[i]

    out = {}
    for batch in plan.batches:
        for name in batch.nodes:
            out[name] = NodeRecord(batch=batch.index)
    for name, rec in zip(plan.nodes, body["records"], strict=True):
        assigned, prev, phase, since, revert_to, revert_at, *rest = rec
        skipped, written, revert_written = (*rest, *_OPTIONAL_RECORD_FIELDS[len(rest):])[:3]
        assigned_at, revert_requested_at = _t_opt(assigned), _t_opt(revert_at)
        out[name] = replace(
            out[name],
            assigned_at=assigned_at,
            previous=src(prev),
            phase=NodePhase(phase),
            phase_since=_t_opt(since),
            revert_to=src(revert_to),
            revert_requested_at=revert_requested_at,
            skipped=skipped or "",
            written_at=_t_after(written, assigned_at),
            revert_written_at=_t_after(revert_written, revert_requested_at),
        )
    return out


def _decision_to_json(d: DecisionRecord) -> list[Any]:
    return [_ms(d.at), d.kind, d.reason, d.batch]


def _decision_from_json(body: Sequence[Any]) -> DecisionRecord:
    at, kind, reason, batch = body
    return DecisionRecord(at=_t(at), kind=kind, reason=reason, batch=batch)


# --------------------------------------------------------------------------- node annotations


@dataclass(frozen=True)
class AssignmentAnnotations:
    """What a node's annotations say about the rollout that assigned it (the journal on the node)."""

    rollout: str
    batch: int
    previous: ConfigRef | None  # None = the node ran its local config
    assigned_at: datetime


def encode_previous(previous: ConfigRef | None) -> str:
    if previous is None:
        return LOCAL_SOURCE
    return _dumps(previous.to_api())


def decode_previous(text: str) -> ConfigRef | None:
    if text == LOCAL_SOURCE:
        return None
    body = json.loads(text)
    if not isinstance(body, dict):
        raise ValueError(f"previous-source is neither 'local' nor a configMap object: {text!r}")
    return ConfigRef.from_api({"configMap": body})


def assignment_annotations(
    rollout: str, *, batch: int, previous: ConfigRef | None, now: datetime
) -> dict[str, str]:
    """Annotations to write in the same PATCH as the assignment (keys in ``rollout.model``)."""
    return {
        ANN_ROLLOUT: rollout,
        ANN_BATCH: str(batch),
        ANN_PREVIOUS_SOURCE: encode_previous(previous),
        ANN_ASSIGNED_AT: rfc3339(now),
    }


def stamped(annotations: Mapping[str, str], *, at: datetime) -> dict[str, str]:
    """The assignment annotations with ``assigned-at`` set to ``at`` (the moment of sending)."""
    return {**annotations, ANN_ASSIGNED_AT: rfc3339(at)}


def node_labels(annotations: Mapping[str, str | None]) -> dict[str, str | None]:
    """The labels written in the same PATCH as ``annotations``: an assignment labels the node with
    its rollout, so ``kubectl get nodes -l kubelet-rollout.io/rollout=NAME`` lists what a rollout
    touched; a revert (no assignment annotations) removes the label."""
    rollout = annotations.get(ANN_ROLLOUT)
    return {LABEL_ROLLOUT: label_value(rollout) if rollout else None}


def parse_assignment_annotations(annotations: Mapping[str, str]) -> AssignmentAnnotations | None:
    """Read them back; None when the node carries no (complete, well-formed) assignment record."""
    keys = (ANN_ROLLOUT, ANN_BATCH, ANN_PREVIOUS_SOURCE, ANN_ASSIGNED_AT)
    if not all(k in annotations for k in keys):
        return None
    try:
        return AssignmentAnnotations(
            rollout=annotations[ANN_ROLLOUT],
            batch=int(annotations[ANN_BATCH]),
            previous=decode_previous(annotations[ANN_PREVIOUS_SOURCE]),
            assigned_at=parse_rfc3339(annotations[ANN_ASSIGNED_AT]),
        )
    except (ValueError, json.JSONDecodeError):
        return None


def annotations_by_rollout(
    rollout: str, annotations: Iterable[tuple[str, Mapping[str, str]]]
) -> dict[str, AssignmentAnnotations]:
    """Node name -> its record, for the nodes this rollout assigned (rebuilds a lost journal)."""
    found = {}
    for name, anns in annotations:
        parsed = parse_assignment_annotations(anns)
        if parsed is not None and parsed.rollout == rollout:
            found[name] = parsed
    return found
