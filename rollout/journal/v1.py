"""Reading a journal written by the previous release (``kubelet-rollout-journal/v1``).

That release kept the whole journal in one ConfigMap: node records as positional arrays aligned
with the plan order, sources interned, times in epoch milliseconds, acknowledgments as
milliseconds after their intent. A rollout it started is resumed (or rolled back, or shown) by
this release; its next save writes the current format over it (``rollout.journal.configmap``).
Pure: decoding only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from rollout.journal.fields import at_after, at_ms, at_ms_opt, source_from_json
from rollout.journal.records import NodeRecord
from rollout.journal.state import (
    AnalysisRecord,
    AnalysisVerdict,
    ApprovalOutcome,
    ApprovalRecord,
    BatchState,
    BatchStatus,
    DecisionRecord,
    Journal,
    RolloutStatus,
    frozen,
)
from rollout.model import ConfigRef, NodePhase
from rollout.planner import Batch, PlanEstimate, RolloutPlan, Skipped
from rollout.policy import RolloutPolicy

FORMAT_V1 = "kubelet-rollout-journal/v1"


def from_v1_data(data: Mapping[str, str]) -> Journal:
    """A v1 journal ConfigMap's ``data`` as a journal; raises ValueError/KeyError on a broken body."""
    meta = json.loads(data["meta"])
    policy = RolloutPolicy.model_validate(json.loads(data["policy"]))
    plan = _plan(json.loads(data["plan"]), meta=meta, policy=policy)
    return Journal(
        plan=plan,
        created_at=at_ms(meta["createdAt"]),
        batches=tuple(_batch(b) for b in json.loads(data["batches"])),
        nodes=frozen(_nodes(plan, json.loads(data["nodes"]))),
        status=RolloutStatus(meta["status"]),
        decisions=tuple(_decision(d) for d in json.loads(data["decisions"])),
        decisions_dropped=meta.get("decisionsDropped", 0),
        failure_reason=meta.get("failureReason", ""),
        failed_nodes=frozen(meta.get("failedNodes", {})),
        finished_at=at_ms_opt(meta.get("finishedAt")),
        stopped_at=at_ms_opt(meta.get("stoppedAt")),
        rollback_to=meta.get("rollbackTo", ""),
        paused=meta.get("paused", ""),
        abort=meta.get("abort", ""),
        soak_waived=tuple(meta.get("soakWaived", ())),
        last_request=meta.get("lastRequest", ""),
    )


def _plan(body: Mapping[str, Any], *, meta: Mapping[str, Any], policy: RolloutPolicy) -> RolloutPlan:
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


def _approval(body: Sequence[Any] | None) -> ApprovalRecord | None:
    if body is None:
        return None
    requested, deadline, outcome, decided, by, note = body
    return ApprovalRecord(requested_at=at_ms(requested), deadline=at_ms(deadline),
                          outcome=ApprovalOutcome(outcome) if outcome else None,
                          decided_at=at_ms_opt(decided), by=by, note=note)


def _batch(body: Sequence[Any]) -> BatchState:
    status, started, finished, approval, *later = body
    record, soak_started = None, None
    for value in later:  # development builds wrote an analysis verdict (a list) or the soak's start
        if isinstance(value, list):
            verdict, at, reason, nodes = value
            record = AnalysisRecord(AnalysisVerdict(verdict), at_ms(at), reason, tuple(nodes))
        elif isinstance(value, int):
            soak_started = at_ms(value)
    return BatchState(BatchStatus(status), at_ms_opt(started), at_ms_opt(finished), _approval(approval), record,
                      soak_started)


_OPTIONAL_RECORD_FIELDS = ("", None, None)  # skipped, written, revert written: trimmed when unset


def _nodes(plan: RolloutPlan, body: Mapping[str, Any]) -> dict[str, NodeRecord]:
    sources = [source_from_json(s) for s in body["sources"]]
    batch_of = {name: b.index for b in plan.batches for name in b.nodes}
    out = {}
    for name, rec in zip(plan.nodes, body["records"], strict=True):
        assigned, prev, phase, since, revert_to, revert_at, *rest = rec
        skipped, written, revert_written = (*rest, *_OPTIONAL_RECORD_FIELDS[len(rest):])[:3]
        assigned_at, revert_requested_at = at_ms_opt(assigned), at_ms_opt(revert_at)
        out[name] = NodeRecord(
            batch=batch_of[name],
            assigned_at=assigned_at,
            previous=None if prev < 0 else sources[prev],
            phase=NodePhase(phase),
            phase_since=at_ms_opt(since),
            revert_to=None if revert_to < 0 else sources[revert_to],
            revert_requested_at=revert_requested_at,
            skipped=skipped or "",
            written_at=at_after(written, assigned_at),
            revert_written_at=at_after(revert_written, revert_requested_at),
        )
    return out


def _decision(body: Sequence[Any]) -> DecisionRecord:
    at, kind, reason, batch = body
    return DecisionRecord(at=at_ms(at), kind=kind, reason=reason, batch=batch)
