"""The journal as the previous release wrote it (``kubelet-rollout-journal/v1``, one ConfigMap).

A frozen copy of that release's encoder (rollout/journal/configmap.py before the journal was split
into a head and parts), so the tests can hand this release journals exactly as its users' clusters
hold them. Not product code: the product only reads this format (``rollout.journal.v1``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from rollout.journal import ApprovalRecord, BatchState, DecisionRecord, Journal, NodeRecord
from rollout.model import ConfigRef
from rollout.planner import RolloutPlan

FORMAT = "kubelet-rollout-journal/v1"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

def to_v1_data(journal: Journal) -> dict[str, str]:
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


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _ms(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(milliseconds=1)


def _ms_opt(at: datetime | None) -> int | None:
    return None if at is None else _ms(at)


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


def _approval_to_json(a: ApprovalRecord | None) -> list[Any] | None:
    if a is None:
        return None
    outcome = a.outcome.value if a.outcome else None
    return [_ms(a.requested_at), _ms(a.deadline), outcome, _ms_opt(a.decided_at), a.by, a.note]


def _batch_to_json(b: BatchState) -> list[Any]:
    return [b.status.value, _ms_opt(b.started_at), _ms_opt(b.finished_at), _approval_to_json(b.approval)]


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


def _decision_to_json(d: DecisionRecord) -> list[Any]:
    return [_ms(d.at), d.kind, d.reason, d.batch]

