"""A rollout's status, read back from the cluster alone (journal ConfigMap + nodes + the lock),
through the ports ``rollout.ports.JournalReader`` and ``ClusterForStatus``: the core never imports
the client.

Nothing here needs the process that runs the rollout: `rollout status` works while a rollout
runs, after it finished, and after its orchestrator was killed. Phases come from
``rollout.machine.phases.node_phase`` with the journal's assignment/revert times. Whether the rollout
runs comes from the lock (:func:`run_state`): a journal that says running is only believed while
a live process of that rollout holds the lock.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping

from rollout.machine.actions import AssignBatch, AwaitApproval, Complete, Halt, RevertNodes, RollbackDone, Wait, WaitForWindow
from rollout.analysis import BatchEvidence, Measurement, comparison_to_json
from rollout.errors import RolloutNotFoundError
from rollout.journal import BatchStatus, Journal, NodeRecord, from_document
from rollout.lock import Holder, Liveness, LockInfo, describe, liveness
from rollout.machine import decide, landed_writes, node_verdict, verdicts
from rollout.machine.drains import drained
from rollout.model import NodeObservation, NodePhase
from rollout.machine.phases import PhaseVerdict
from rollout.planner import estimate_schedule
from rollout.ports import ClusterForStatus, EvidenceReader, JournalReader

from rollout.report import NodeRow, node_row
from rollout.timefmt import parse_rfc3339, rfc3339_seconds

STATE_NAMES = {"complete": "completed"}  # everything else reads as the journal says
NOT_RUNNING = "stopped"  # a journal that says running, with no live process holding its lock
UNRESPONSIVE = "unresponsive"  # ... held by a process that missed its renewals (an outage, or gone)
STARTING = "starting"  # no journal yet, but a live process of the rollout holds the lock: preparing


def load_journal(gateway: JournalReader, rollout: str) -> tuple[Journal, str] | None:
    """The rollout's journal and its head's resourceVersion, if it exists."""
    loaded = gateway.load_journal(rollout)
    if loaded is None:
        return None
    document, rv = loaded
    return from_document(document), rv


NOT_ASSIGNED = PhaseVerdict(NodePhase.PENDING, "not assigned yet")


def verdict_for(record: NodeRecord | None, obs: NodeObservation | None, journal: Journal, now: datetime) -> PhaseVerdict:
    """The phase of a planned node as of ``now`` (pending when we never assigned it)."""
    verdict = None if record is None else node_verdict(journal, record, obs, now=now)
    return verdict or NOT_ASSIGNED


def _drain_phase(record: NodeRecord | None) -> tuple[str, str] | None:
    """The phase shown, and why, of a node the rollout cordoned and has not written yet: the
    machine says pending (not assigned); a person watching wants to see it drained, and what holds it."""
    if record is None or not record.cordoned or record.assigned:
        return None
    if drained(record):
        return "drained", "cordoned and empty: its write is next"
    return "draining", (f"held: {record.drain_blocked}" if record.drain_blocked
                        else "cordoned: its pods are evicted before its write")


def node_rows(journal: Journal, observations: Mapping[str, NodeObservation], now: datetime,
              names: list[str] | None = None, *, watched_since: datetime | None = None,
              ) -> list[tuple[NodeRow, PhaseVerdict]]:
    """Every planned node's row (or those of ``names``, each judged on its own, as a one-off read)
    and its verdict. ``watched_since``: the engine's live view, as its decisions judged it
    (``RunResult.watched_since``), for the whole plan (``names`` None): every node is
    then judged as the decisions were, through their memo (``machine.verdicts``), so the report at
    a run's end judges again only the nodes that changed since its last decision (at 20,000 nodes
    judging each again took a second of the wait after the last node was done)."""
    journal = landed_writes(journal, observations, now=now)  # writes whose acknowledgment was lost
    judged = None if names is not None else verdicts(journal, observations, now=now, watched_since=watched_since)
    rows = []
    for name in names if names is not None else list(journal.plan.nodes):
        record = journal.nodes.get(name)
        obs = observations.get(name)
        verdict = verdict_for(record, obs, journal, now) if judged is None else judged.get(name, NOT_ASSIGNED)
        drain = _drain_phase(record) if verdict.phase is NodePhase.PENDING else None
        shown = verdict.phase.value
        if drain is not None:
            shown, verdict = drain[0], PhaseVerdict(NodePhase.PENDING, drain[1])
        if obs is None:
            obs = NodeObservation(name=name)
        converged = record.phase_since if record is not None and record.phase in (NodePhase.ACTIVE, NodePhase.PROMOTED) else None
        batch = str(record.batch + 1) if record is not None else ""
        row = node_row(obs, shown, batch=batch, converged_at=converged)
        if not row.error and name in journal.failed_nodes:  # reverted: the node's own error is gone
            row = replace(row, error=journal.failed_nodes[name])
        rows.append((row, verdict))
    return rows


def timestamp(moment: datetime | None) -> str | None:
    """Every time a status shows, in one form: UTC, to the second (``2026-11-24T02:41:40Z``)."""
    if moment is None:
        return None
    return rfc3339_seconds(moment)


def _node_json(row: NodeRow, verdict: PhaseVerdict) -> dict[str, Any]:
    """One node of `status -o json` (schemas/rollout.json): JSON types, not the table's strings."""
    assigned_at = parse_rfc3339(row.assigned_at) if row.assigned_at else None
    converged_at = parse_rfc3339(row.converged_at) if row.converged_at else None
    return {
        "name": row.node,
        "batch": int(row.batch) if row.batch.isdigit() else None,
        "phase": row.phase,
        "reason": verdict.reason,
        "ready": row.ready == "True",
        "ready_condition": row.ready if row.ready in ("True", "False", "Unknown") else None,
        "assigned": row.assigned,
        "active": row.active,
        "last_known_good": row.last_known_good,
        "error": row.error,
        "assigned_at": timestamp(assigned_at),
        "converged_at": timestamp(converged_at),
        "seconds": row.seconds,
        "backend": row.backend or None,
        "writes": row.writes or None,
    }


def run_state(journal: Journal, lock: LockInfo | None, now: datetime, *,
              gone: Callable[[Holder], bool] | None = None) -> tuple[str, str]:
    """The state people see, and why it differs from the journal's ("" when it does not).

    A journal not finished nor stopped says a process runs the rollout; that process holds the
    lock (taken before the journal is written, kept until the run ends). With no live holder of
    this rollout the journal cannot be believed: a process killed mid-run (or during an outage)
    never marked it stopped.
    """
    shown = STATE_NAMES.get(journal.shown_status, journal.shown_status)
    if journal.finished:
        return shown, ""
    if journal.stopped_at is not None:  # stopped, unless a process of it took the lock to resume it
        if lock is not None and lock.rollout == journal.rollout and liveness(lock, now, gone=gone) is Liveness.LIVE:
            return STARTING, f"{lock.held_by or lock.holder} resumes it from its journal"
        return shown, ""
    if lock is None or not lock.holder or lock.rollout != journal.rollout:
        holder = "the lock is free" if lock is None or not lock.holder else f"the lock is held by {lock.held_by}"
        return NOT_RUNNING, f"not running: no process of this rollout holds its lock ({holder})"
    state = liveness(lock, now, gone=gone)
    if state is Liveness.LIVE:
        return shown, ""
    if state is Liveness.SILENT:
        return UNRESPONSIVE, f"its process has not renewed the lock: {describe(lock, now, gone=gone)}"
    return NOT_RUNNING, f"not running: {describe(lock, now, gone=gone)}"


def lock_dict(lock: LockInfo | None, now: datetime, *, gone: Callable[[Holder], bool] | None = None,
              ) -> dict[str, Any] | None:
    """The lock as `status -o json` shows it (null when it was never taken)."""
    if lock is None:
        return None
    held_by = lock.held_by or Holder(identity="", rollout="")
    return {
        "holder": lock.holder or None,
        "rollout": lock.rollout or None,
        "host": held_by.host or None,
        "pid": held_by.pid or None,
        "run": held_by.run or None,
        "since": timestamp(lock.acquired) if lock.holder else None,
        "renewed_at": timestamp(lock.renewed),
        "expires_at": timestamp(lock.expires) if lock.holder else None,
        "liveness": liveness(lock, now, gone=gone).value,
    }


def measurement_json(m: Measurement) -> dict[str, Any]:
    return {"at": timestamp(m.at), "verdict": m.verdict.value, "reason": m.reason, "query": m.query,
            "values": {k: v for k, v in m.values}, "control_query": m.control_query or None, "control": m.control,
            "bound": m.bound, "nodes": list(m.nodes), "no_data": m.no_data,
            "comparison": comparison_to_json(m.comparison) if m.comparison is not None else None}


def analysis_json(journal: Journal, evidence: Mapping[int, BatchEvidence]) -> list[dict[str, Any]]:
    """Each analysed batch: the journal's verdict and the evidence's measurements (schemas/rollout.json)."""
    out = []
    for batch, e in sorted(evidence.items()):
        record = journal.batches[batch].analysis if batch < len(journal.batches) else None
        out.append({
            "batch": batch + 1, "label": e.label, "verdict": record.verdict.value if record else None,
            "reason": record.reason if record else "", "started_at": timestamp(e.started_at),
            "nodes": list(e.nodes), "control": list(e.control),
            "checks": [{"name": c.name, "query": c.query, "condition": c.condition, "no_data": c.no_data,
                        "dry_run": c.dry_run, "measured": c.taken, "failed": c.failures,
                        "inconclusive": c.inconclusive, "skipped": c.skipped,
                        "measurements": [measurement_json(m) for m in c.measurements]}
                       for c in e.checks.values()],
        })
    return out


def load_evidence(gateway: EvidenceReader, journal: Journal) -> dict[int, BatchEvidence]:
    """The analysis evidence of every started batch (none when the policy has no checks)."""
    if not journal.plan.policy.analysis.enabled:
        return {}
    found = {}
    for batch, state in enumerate(journal.batches):
        if state.started_at is None:
            continue
        loaded = gateway.load_evidence(journal.rollout, batch)
        if loaded is not None:
            found[batch] = loaded[0]
    return found


def waiting(journal: Journal, observations: Mapping[str, NodeObservation], now: datetime, *,
            state: str, why: str) -> dict[str, Any] | None:
    """What the rollout waits for and until when: the decision the machine would make now
    (read only: nothing is recorded), in a word, with the moment the wait ends at the latest and
    the command that ends it when a person must act; None once it has ended."""
    name = journal.rollout
    if journal.finished:
        return None
    if state == STARTING:
        return _waits("preparation", None, why, None)
    if state == NOT_RUNNING:
        return _waits("a run", None, why or f"stopped by request at {timestamp(journal.stopped_at)}",
                      f"rollout start --name {name}")
    if state == UNRESPONSIVE:
        return _waits("its process", None, why, None)
    action = decide(journal, observations, now=now)
    if isinstance(action, AwaitApproval):
        return _waits("approval", action.deadline, action.reason, f"rollout approve {name}")
    if isinstance(action, WaitForWindow):
        return _waits("window", action.until, action.reason, None)
    if isinstance(action, Wait):
        command = f"rollout resume {name}" if action.on == "resume" else None
        return _waits(action.on or "nodes", action.ends, action.reason, command)
    if isinstance(action, (AssignBatch, RevertNodes)):
        return _waits("writes", None, action.reason, None)
    return _waits("its end", None, action.reason, None)


def estimate(journal: Journal, now: datetime) -> dict[str, Any] | None:
    """When the rollout should end, the waits for maintenance windows included
    (``planner.estimate_schedule``; a person's time at a gate is not known, so not counted); None
    once it has ended. The running batch is taken to end at its own estimate (now, when past it)."""
    if journal.finished or journal.rollback_to:
        return None
    plan, current = journal.plan, journal.current_batch()
    if current is None:
        return None
    start, moment = current, now
    state = journal.batches[current]
    if state.status is BatchStatus.IN_PROGRESS:
        per_batch = plan.estimate.per_batch
        took = per_batch[current] if current < len(per_batch) else timedelta(0)
        moment = max(now, (state.started_at or now) + took)
        start = current + 1
    schedule = estimate_schedule(plan, plan.policy, moment, from_batch=start)
    ends = schedule.ends_at if start < len(plan.batches) else moment
    return {"ends_at": timestamp(ends), "remaining_seconds": round((ends - now).total_seconds()) if ends else None,
            "window_wait_seconds": round(schedule.waiting.total_seconds())}


def _waits(what: str, until: datetime | None, reason: str, command: str | None) -> dict[str, Any]:
    return {"for": what, "until": timestamp(until), "reason": reason, "command": command}


def status_dict(journal: Journal, observations: Mapping[str, NodeObservation], now: datetime, *,
                lock: LockInfo | None, gone: Callable[[Holder], bool] | None = None,
                evidence: Mapping[int, BatchEvidence] | None = None) -> dict[str, Any]:
    """A rollout as every `-o json` shows it (`status`, and `start`/`rollback` under "rollout")."""
    current = journal.current_batch()
    last = journal.decisions[-1] if journal.decisions else None
    state, why = run_state(journal, lock, now, gone=gone)
    waits = waiting(journal, observations, now, state=state, why=why)
    paused = f"paused by {journal.paused}; " if journal.paused and waits and waits["for"] != "pause" else ""
    live = paused + waits["reason"] if waits else ""
    return {
        "name": journal.rollout,
        "state": state,
        "target": str(journal.target),
        "configmap": f"{journal.target.namespace}/{journal.target.name}",
        "policy": journal.policy_name,
        "batches": len(journal.plan.batches),
        "current_batch": None if current is None else current + 1,
        "batch_status": [b.status.value for b in journal.batches],
        "reason": why or journal.failure_reason or live or (last.reason if last else ""),
        "waiting": waits,
        "failed_nodes": dict(journal.failed_nodes),
        "created_at": timestamp(journal.created_at),
        "finished_at": timestamp(journal.finished_at),
        "nodes": [_node_json(row, verdict) for row, verdict in node_rows(journal, observations, now)],
        "skipped": [{"node": s.node, "reason": s.reason} for s in journal.plan.skipped],
        "decisions": [
            {"at": timestamp(d.at), "kind": d.kind, "reason": d.reason,
             "batch": None if d.batch is None else d.batch + 1}
            for d in journal.decisions[-20:]
        ],
        "lock": lock_dict(lock, now, gone=gone),
        "analysis": analysis_json(journal, evidence or {}),
        "estimate": estimate(journal, now),
    }


def starting_dict(rollout: str, lock: LockInfo, now: datetime) -> dict[str, Any]:
    """A rollout whose process has taken the lock and prepares its first batch (no journal yet)."""
    reason = (f"{lock.held_by or lock.holder} probes the cluster, validates and publishes the config, then plans "
              "the batches")
    return {
        "name": rollout, "state": STARTING, "target": None, "configmap": None, "policy": None, "batches": 0,
        "current_batch": None, "batch_status": [], "reason": reason, "waiting": _waits("preparation", None, reason, None),
        "failed_nodes": {}, "created_at": timestamp(lock.acquired), "finished_at": None, "nodes": [], "skipped": [],
        "decisions": [], "lock": lock_dict(lock, now), "analysis": [], "estimate": None,
    }


def final_status(gateway: ClusterForStatus, journal: Journal,
                 observations: Mapping[str, NodeObservation]) -> dict[str, Any]:
    """What :func:`rollout_status` shows of a run this process has just ended, from the run's own
    last journal and view of the nodes (current when it ended): not the journal read and every
    node listed again once the last one is done (0.7 s at 1,000 nodes)."""
    return _status_read(gateway, journal, observations, datetime.now(timezone.utc))


def _status_read(gateway: ClusterForStatus, journal: Journal, observations: Mapping[str, NodeObservation],
                 now: datetime) -> dict[str, Any]:
    """The status of ``journal`` over ``observations``, with the lock and the analysis evidence read."""
    return status_dict(journal, observations, now, lock=gateway.read_lock(), evidence=load_evidence(gateway, journal))


def rollout_status(gateway: ClusterForStatus, rollout: str) -> dict[str, Any]:
    """Per-node status of ``rollout``: from its journal, or starting while a live process of it
    holds the lock before it wrote one (``RolloutNotFoundError`` when neither)."""
    loaded = load_journal(gateway, rollout)
    now = datetime.now(timezone.utc)
    if loaded is None:
        lock = gateway.read_lock()
        if lock is not None and lock.rollout == rollout and liveness(lock, now) is Liveness.LIVE:
            return starting_dict(rollout, lock, now)
        raise RolloutNotFoundError(f"no rollout named {rollout!r}: journal ConfigMap "
                                   f"{gateway.namespace}/{gateway.journal_name(rollout)} not found")
    journal, _ = loaded
    observations, _ = gateway.list_nodes()
    return _status_read(gateway, journal, {o.name: o for o in observations}, now)
