"""The journal as the ``data`` of its ConfigMap (``kubelet-rollout-journal/v1``), and back.

The body stays small at 5,000 nodes: node records are positional arrays aligned with the plan
order (no repeated names or keys), sources are interned, timestamps are epoch milliseconds (so
journal times have millisecond precision), and fields a node does not have yet are left off the
end of its record. A journal written by an earlier release of this format is read: records end
where that release's ended. Pure: serialisation only, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from rollout.journal.state import (
    ApprovalOutcome,
    ApprovalRecord,
    BatchState,
    BatchStatus,
    DecisionRecord,
    Journal,
    NodeRecord,
    RolloutStatus,
    frozen,
)
from rollout.model import ConfigRef, NodePhase
from rollout.planner import Batch, PlanEstimate, RolloutPlan, Skipped
from rollout.policy import RolloutPolicy

FORMAT = "kubelet-rollout-journal/v1"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def to_configmap_data(journal: Journal) -> dict[str, str]:
    """The ``data`` of the journal ConfigMap: a few JSON values, each far below 1 MiB."""
    return {
        "format": FORMAT,
        "meta": _dumps(_meta_to_json(journal)),
        "policy": _dumps(journal.plan.policy.dump()),
        "plan": _dumps(_plan_to_json(journal.plan)),
        "batches": _dumps([_batch_to_json(b) for b in journal.batches]),
        "nodes": _dumps(_nodes_to_json(journal.plan, journal.nodes)),
        "decisions": _dumps([_decision_to_json(d) for d in journal.decisions]),
    }


def from_configmap_data(data: Mapping[str, str]) -> Journal:
    """Inverse of ``to_configmap_data``; raises ValueError on a body it does not understand."""
    if data.get("format") != FORMAT:
        raise ValueError(f"not a rollout journal (format {data.get('format')!r}, want {FORMAT!r})")
    meta = json.loads(data["meta"])
    policy = RolloutPolicy.model_validate(json.loads(data["policy"]))
    plan = _plan_from_json(json.loads(data["plan"]), meta=meta, policy=policy)
    return Journal(
        plan=plan,
        created_at=_t(meta["createdAt"]),
        batches=tuple(_batch_from_json(b) for b in json.loads(data["batches"])),
        nodes=frozen(_nodes_from_json(plan, json.loads(data["nodes"]))),
        status=RolloutStatus(meta["status"]),
        decisions=tuple(_decision_from_json(d) for d in json.loads(data["decisions"])),
        decisions_dropped=meta.get("decisionsDropped", 0),
        failure_reason=meta.get("failureReason", ""),
        failed_nodes=frozen(meta.get("failedNodes", {})),
        finished_at=_t_opt(meta.get("finishedAt")),
        stopped_at=_t_opt(meta.get("stoppedAt")),
        rollback_to=meta.get("rollbackTo", ""),
        paused=meta.get("paused", ""),
        abort=meta.get("abort", ""),
        soak_waived=tuple(meta.get("soakWaived", ())),
        last_request=meta.get("lastRequest", ""),
    )


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
    body = [b.status.value, _ms_opt(b.started_at), _ms_opt(b.finished_at), _approval_to_json(b.approval)]
    return body + [_ms(b.soak_started_at)] if b.soak_started_at is not None else body


def _batch_from_json(body: Sequence[Any]) -> BatchState:
    status, started, finished, approval, *later = body  # an earlier release wrote four fields
    return BatchState(BatchStatus(status), _t_opt(started), _t_opt(finished), _approval_from_json(approval),
                      soak_started_at=_t_opt(later[0]) if later else None)


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

