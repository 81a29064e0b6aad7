"""A fleet rollout as `rollout fleet status` shows it, read from Prefect alone (no cluster is opened).

The journal says how the fleet stands and who drives it; the fleet's latest flow run carries the
fleet file it runs (its parameters); the clusters' runs say where each cluster stands. A journal
that says running is believed only while its holder lives: a fleet flow killed mid-stage shows
``stopped`` (run the same command again to resume), one that missed its renewals
``unresponsive`` (the rule of the rollout lock, ``rollout.lock.liveness``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from flows.budget import budget_name
from flows.leases import limit_in_use
from flows.fleet.runs import RunReader, fleet_flow_runs
from flows.fleet.store import read_journal
from rollout.errors import NotFoundError
from rollout.fleet import FleetJournal, FleetPlan, FleetStatus, load_fleet_text, rows
from rollout.lock import LockInfo, Liveness, liveness
from rollout.timefmt import rfc3339_seconds


def fleet_state(journal: FleetJournal, holder: LockInfo | None, now: datetime) -> str:
    if journal.finished:
        return journal.outcome.value if journal.outcome else "failed"
    alive = liveness(holder, now) if holder is not None else Liveness.FREE
    if alive is Liveness.LIVE:
        return journal.status.value  # running, or failing: its failure action under way
    return "unresponsive" if alive is Liveness.SILENT else "stopped"


def fleet_status(name: str) -> dict[str, Any]:
    """schemas/fleet-status.json; ``NotFoundError`` when no fleet rollout has that name."""
    from prefect.client.orchestration import get_client

    loaded = read_journal(name)
    with get_client(sync_client=True) as client:
        runs = fleet_flow_runs(client, name)
    if loaded is None or not runs:
        raise NotFoundError(f"no fleet rollout named {name!r}")
    journal, holder = loaded
    run = runs[0]
    plan = load_fleet_text(str(run.parameters.get("fleet", "")), source=f"fleet of flow run {run.name}")
    observed = RunReader(name, plan).observe()
    now = datetime.now(timezone.utc)
    return {
        "name": name,
        "state": fleet_state(journal, holder, now),
        "message": journal.message or (journal.failure if journal.status is FleetStatus.FAILING else ""),
        "flow_run_id": str(run.id),
        "flow_run_name": run.name,
        "created_at": rfc3339_seconds(journal.created_at),
        "finished_at": rfc3339_seconds(journal.finished_at) if journal.finished_at else None,
        "stages": [{"index": s.index, "name": s.label, "clusters": list(s.clusters)} for s in plan.stages],
        "gates": [{"after_stage": stage, "answer": gate.outcome.value if gate.outcome else None, "by": gate.by,
                   "note": gate.note, "deadline": rfc3339_seconds(gate.deadline)}
                  for stage, gate in sorted(journal.gates.items())],
        "clusters": rows(plan, observed),
        "disruption_budget": _budget(name, plan, journal) if plan.disruption_budget is not None else None,
    }


def _budget(name: str, plan: FleetPlan, journal: FleetJournal) -> dict[str, Any] | None:
    held = limit_in_use(budget_name(name))
    if held is None:  # not created yet (a share of the fleet: its nodes are being counted)
        return None
    return {"in_use": held[0], "limit": held[1], "given": plan.disruption_budget, "fleet_nodes": journal.fleet_nodes}
