"""The journal as ConfigMaps (``kubelet-rollout-journal/v2``): a small head and its parts.

The API server refuses a ConfigMap whose data exceeds 1 MiB. One ConfigMap per journal, as the
previous release kept it, reached that at about 10,000 nodes; so the journal is split:

- the **head** (the ConfigMap ``kubelet-rollout-journal-<rollout>``, the name the previous release
  used) holds what does not grow with the plan: the rollout's status and why, the policy, the
  plan's settings, the decision log, who asked what (lifecycle requests are annotations on it);
- its **parts** (``rollout.journal.parts``) hold what does: nodes, batches, skipped nodes, each
  part far below the limit by construction.

How a head and its parts are written so that a process dying between them loses nothing (the
head names the parts it commits) is the store's business (``rollout.gateway``); here they are only
encoded and decoded. The head stays below :data:`HEAD_LIMIT`: its lists are capped
(``rollout.journal.state``), and should its text still be too large (reasons full of escaped
characters) the oldest decisions, then failed nodes beyond the first, are left out of it; a policy
too large to leave room for them is refused before anything is written.

A journal of the previous format (``kubelet-rollout-journal/v1``, one ConfigMap) is read
(``rollout.journal.v1``); the next save writes it in this format. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from rollout.errors import ConfigError
from rollout.journal.fields import at_after, at_ms, data_bytes, dumps, ms, ms_after
from rollout.journal.parts import PART_LIMIT, decode_parts, encode_parts, first_of
from rollout.journal.state import DecisionRecord, Journal, RolloutStatus, frozen
from rollout.journal.v1 import FORMAT_V1, from_v1_data
from rollout.model import ConfigRef
from rollout.planner import DrainPlan, PlanEstimate, RolloutPlan
from rollout.policy import RolloutPolicy

FORMAT = "kubelet-rollout-journal/v2"
# the head's data, as the codec writes it; the store adds its table of parts, one short line per
# part (room for over a thousand parts is kept below the 1 MiB limit)
HEAD_LIMIT = 960 * 1024
# a new journal's head leaves this much room for what it gathers later (decisions, failed nodes)
HEAD_ROOM = 512 * 1024


@dataclass(frozen=True)
class JournalDocument:
    """A journal as the ``data`` of its ConfigMaps: the head's, and each part's by key."""

    head: Mapping[str, str]
    parts: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def layout(self) -> tuple[int, ...]:
        """Where each part begins (plan positions): what the next encoding keeps."""
        return tuple(sorted(first_of(key) for key in self.parts))

    def largest(self) -> int:
        """The largest ConfigMap's data in bytes, as the API server counts it (the head
        without the store's table of parts)."""
        return max([data_bytes(self.head), *(data_bytes(p) for p in self.parts.values())])


def to_document(journal: Journal, *, phases: bool = True) -> JournalDocument:
    """The journal's ConfigMaps (their ``data``); the parts keep ``journal.layout`` where they can.
    ``phases=False``: node phases may lag in the parts (``rollout.journal.parts.encode_parts``)."""
    parts = encode_parts(journal, phases=phases)
    return JournalDocument(head=_head(journal), parts=parts)


def from_document(document: JournalDocument) -> Journal:
    """Inverse of :func:`to_document` (and the reader of the previous format); ValueError on a
    body it does not understand, naming what to do."""
    head = document.head
    found = head.get("format")
    if found == FORMAT_V1:
        return from_v1_data(head)
    if found != FORMAT:
        newer = isinstance(found, str) and found.startswith("kubelet-rollout-journal/")
        raise ValueError(
            f"journal format {found!r} is not one this release reads ({FORMAT_V1}, {FORMAT}): "
            + ("it was written by a newer release of kubelet-rollout; run that release"
               if newer else "not a rollout journal"))
    meta, plan_meta = json.loads(head["meta"]), json.loads(head["plan"])
    created = at_ms(meta["createdAt"])
    counts = plan_meta["counts"]
    whole = decode_parts(document.parts, base=created, nodes=counts["nodes"], skipped=counts["skipped"],
                         batches=counts["batches"], rollout=meta["rollout"])
    target = ConfigRef.from_api({"configMap": meta["target"]})
    assert target is not None
    plan = RolloutPlan(
        rollout=meta["rollout"], target=target, policy=RolloutPolicy.model_validate(json.loads(head["policy"])),
        batches=whole.batches, skipped=whole.skipped, unselected=plan_meta["unselected"],
        max_unavailable=plan_meta["maxUnavailable"], batch_cap=plan_meta["batchCap"],
        estimate=PlanEstimate(per_batch=whole.estimates, approval_gates=plan_meta["approvalGates"]),
        caveats=tuple(plan_meta["caveats"]), zones=whole.zones, drain=DrainPlan.from_json(plan_meta.get("drain")),
    )
    return Journal(
        plan=plan,
        created_at=created,
        batches=whole.states,
        nodes=frozen(whole.records),
        status=RolloutStatus(meta["status"]),
        decisions=tuple(_decision(d, created) for d in json.loads(head["decisions"])),
        decisions_dropped=meta["decisionsDropped"],
        failure_reason=meta["failureReason"],
        failed_nodes=frozen(meta["failedNodes"]),
        finished_at=at_after(meta["finishedAt"], created),
        stopped_at=at_after(meta["stoppedAt"], created),
        rollback_to=meta["rollbackTo"],
        paused=meta["paused"],
        abort=meta["abort"],
        soak_waived=whole.soak_waived,
        last_request=meta["lastRequest"],
        layout=whole.layout,
    )


# ------------------------------------------------------------------------------ the head


def _head(journal: Journal) -> dict[str, str]:
    """The head's data, within :data:`HEAD_LIMIT` (see the module doc)."""
    head = _head_data(journal)
    if data_bytes(head) - len(head["decisions"].encode()) - len(head["meta"].encode()) > HEAD_LIMIT - HEAD_ROOM:
        raise ConfigError(
            f"rollout {journal.rollout!r}: the policy and plan settings take {data_bytes(head) // 1024} KiB, too "
            f"much to keep in the journal (at most {(HEAD_LIMIT - HEAD_ROOM) // 1024} KiB): shorten the policy "
            "(nodes.excludeNames? use nodes.excludeSelector); nothing was written to the cluster")
    trimmed = journal
    while data_bytes(head) > HEAD_LIMIT and trimmed.decisions:
        keep = len(trimmed.decisions) // 2  # the oldest half goes: the latest say the most
        trimmed = replace(trimmed, decisions=trimmed.decisions[len(trimmed.decisions) - keep:],
                          decisions_dropped=trimmed.decisions_dropped + len(trimmed.decisions) - keep)
        head = _head_data(trimmed)
    while data_bytes(head) > HEAD_LIMIT and len(trimmed.failed_nodes) > 1:
        listed = list(trimmed.failed_nodes.items())
        trimmed = replace(trimmed, failed_nodes=frozen(dict(listed[: len(listed) // 2])))
        head = _head_data(trimmed)
    return head


def _head_data(j: Journal) -> dict[str, str]:
    created = j.created_at
    plan = j.plan
    meta = {
        "rollout": j.rollout,
        "target": j.target.to_api(),
        "policy": j.policy_name,
        "status": j.status.value,
        "createdAt": ms(created),
        "finishedAt": ms_after(j.finished_at, created),
        "failureReason": j.failure_reason,
        "failedNodes": dict(j.failed_nodes),
        "decisionsDropped": j.decisions_dropped,
        "stoppedAt": ms_after(j.stopped_at, created),
        "rollbackTo": j.rollback_to,
        "paused": j.paused,
        "abort": j.abort,
        "lastRequest": j.last_request,
    }
    plan_meta = {
        "unselected": plan.unselected,
        "maxUnavailable": plan.max_unavailable,
        "batchCap": plan.batch_cap,
        "approvalGates": plan.estimate.approval_gates,
        "caveats": list(plan.caveats),
        "drain": None if plan.drain is None else plan.drain.as_json(),
        "counts": {"nodes": sum(b.size for b in plan.batches), "skipped": len(plan.skipped),
                   "batches": len(plan.batches)},
    }
    return {
        "format": FORMAT,
        "meta": dumps(meta),
        "policy": dumps(plan.policy.dump()),
        "plan": dumps(plan_meta),
        "decisions": dumps([[ms_after(d.at, created), d.kind, d.reason, d.batch] for d in j.decisions]),
    }


def _decision(body: list[Any], created: Any) -> DecisionRecord:
    at, kind, reason, batch = body
    when = at_after(at, created)
    assert when is not None
    return DecisionRecord(at=when, kind=kind, reason=reason, batch=batch)


__all__ = ["FORMAT", "HEAD_LIMIT", "PART_LIMIT", "JournalDocument", "from_document", "to_document"]
