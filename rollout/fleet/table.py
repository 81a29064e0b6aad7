"""The fleet as people read it: one row per cluster (stage, phase, batch, nodes done/failed), and
the evidence a person approving the next stage sees. The same rows make the flow's table
artifact, ``rollout fleet status`` and its ``-o json`` (schemas/fleet-status.json)."""

from __future__ import annotations

from typing import Any

from rollout.fleet.plan import FleetPlan, StagePlan
from rollout.fleet.runs import NO_RUNS, ClusterRun, ClusterRuns, Observed, RunPhase


def cluster_phase(runs: ClusterRuns) -> str:
    """Where a cluster stands: waiting, scheduled, running, paused, its outcome, or its rollback's."""
    back = runs.rollback
    if back is not None:
        if not back.ended:
            return "rolling-back"
        return "rolled-back" if back.succeeded else f"rollback-{back.outcome.value if back.outcome else 'failed'}"
    run = runs.rollout
    if run is None:
        return "waiting"
    if run.phase is RunPhase.ENDED:
        return run.outcome.value if run.outcome else "ended"
    if run.phase is RunPhase.RUNNING and run.progress is not None and run.progress.state not in ("", "running"):
        return run.progress.state  # reverting, paused: what its rollout says
    return str(run.phase.value)


def rows(plan: FleetPlan, observed: Observed) -> list[dict[str, Any]]:
    """One row per cluster, in stage order."""
    out = []
    for stage in plan.stages:
        for cluster in stage.clusters:
            runs = observed.get(cluster, NO_RUNS)
            run, progress = runs.rollout, runs.rollout.progress if runs.rollout else None
            out.append({
                "cluster": cluster,
                "stage": stage.index,
                "stage_name": stage.label,
                "work_pool": plan.clusters[cluster].work_pool,
                "policy": plan.clusters[cluster].policy_name,
                "phase": cluster_phase(runs),
                "batch": progress.batch if progress else None,
                "batches": progress.batches if progress else None,
                "nodes": progress.nodes if progress else None,
                "done": progress.done if progress else None,
                "failed": progress.failed if progress else None,
                "message": _message(runs),
                "flow_run_id": run.flow_run_id if run else None,
                "flow_run_name": run.flow_run_name if run else None,
                "attempts": run.attempts if run else 0,
                "rollback_flow_run_id": runs.rollback.flow_run_id if runs.rollback else None,
            })
    return out


def table_rows(plan: FleetPlan, observed: Observed) -> list[dict[str, str]]:
    """The rows as the Prefect table artifact and the terminal show them (text cells)."""
    shown = []
    for row in rows(plan, observed):
        batch = f"{row['batch']}/{row['batches']}" if row["batches"] else ""
        nodes = (f"{row['done']}/{row['nodes']}" + (f", {row['failed']} failed" if row["failed"] else "")
                 if row["nodes"] is not None else "")
        shown.append({"cluster": row["cluster"], "stage": row["stage_name"], "pool": row["work_pool"],
                      "phase": row["phase"], "batch": batch, "nodes done": nodes,
                      "flow run": row["flow_run_name"] or "", "message": (row["message"] or "")[:120]})
    return shown


def evidence(plan: FleetPlan, stage: StagePlan, observed: Observed) -> list[str]:
    """Per cluster of the stage just finished: how its rollout ended, its nodes, its flow run."""
    lines = []
    for cluster in stage.clusters:
        runs = observed.get(cluster, NO_RUNS)
        run = runs.rollout
        if run is None:
            lines.append(f"`{cluster}`: not started")
            continue
        nodes = f", nodes {run.progress.shown}, {run.progress.batches} batch(es)" if run.progress else ""
        note = f": {run.message}" if run.message else ""
        lines.append(f"`{cluster}` ({plan.clusters[cluster].work_pool}, policy {plan.clusters[cluster].policy_name}): "
                     f"**{cluster_phase(runs)}**{nodes}{note} (flow run `{run.flow_run_name or run.flow_run_id}`)")
    return lines


def _message(runs: ClusterRuns) -> str:
    run: ClusterRun | None = runs.rollback if runs.rollback is not None else runs.rollout
    if run is None:
        return ""
    return run.message
