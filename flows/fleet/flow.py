"""`kubelet-config-fleet-rollout`: one kubelet config across a fleet of clusters, stage by stage.

A few lines composing the fleet's core (``rollout.fleet``: the plan, the decisions) with Prefect:
each cluster's rollout is a run of the rollout deployment on that cluster's work pool, whose
workers hold that cluster's credentials and no other's (``flows.fleet.runs``); this flow holds
none and never opens a cluster. It observes the clusters' runs, asks ``rollout.fleet.step`` for
the next action, saves the fleet journal (a Prefect Variable: ``flows.fleet.store``) when it
changed, then carries the action out, until the fleet ends.

Running it again with the same name resumes it: the journal and the clusters' runs are in
Prefect, the runs already started are found (and never started twice: each start carries an
idempotency key), runs still going are waited for, a gate is asked again with its first
deadline. A cluster whose worker died mid-rollout is scheduled again on its pool and resumes
from its own journal in its own cluster.
"""

from __future__ import annotations

import hashlib
import threading
import time

from prefect import flow, get_run_logger
from prefect.context import FlowRunContext

from flows.budget import set_budget
from flows.fleet.identity import PROBE_DEPLOYMENT, count_fleet_nodes
from flows.fleet.runs import RunReader, cancel, pool_deployments, restart, start_runs, supersede_fleet_runs
from flows.fleet.shell import FleetShell
from flows.fleet.store import FleetKeeper, read_abort
from flows.outcome import RunEnd, ended, refuses_quietly
from flows.shell import STOP, tag_flow_run, utcnow
from rollout.errors import FleetError
from rollout.fleet import (
    AskApproval,
    Finish,
    FleetAction,
    FleetJournal,
    FleetPlan,
    Observed,
    RestartRuns,
    RunKind,
    StartClusters,
    StartRollbacks,
    StopRuns,
    Wait,
    check_rollout_name,
    load_fleet_text,
    rows,
    step,
)
from rollout.outcome import Outcome
from rollout.policy import load_policy_ref
from rollout.usecases import refuse_invalid_config

API_PATIENCE_S = 300.0  # how long the fleet waits for a Prefect API that does not answer


@flow(name="kubelet-config-fleet-rollout", flow_run_name="{name}", log_prints=False)
@refuses_quietly
def kubelet_config_fleet_rollout(
    name: str,
    fleet: str,
    config: str | None = None,
    configmap: str | None = None,
    rollout_deployment: str = "kubelet-config-rollout/rollout",
    rollback_deployment: str = "kubelet-config-rollback/rollback",
    poll_seconds: float = 2.0,
    approval_poll_seconds: int = 2,
    probe_timeout_seconds: float = 300.0,
) -> RunEnd:
    """Roll a kubelet config out across a fleet of clusters: the canary cluster, then each stage.

    Args:
        name: the fleet rollout's name; each cluster's rollout is ``<name>-<cluster>`` in its own
            cluster. Run again with the same name to resume.
        fleet: the fleet file's text (YAML): clusters with their work pools, stages, policies,
            soak, approval, failure budget and action (README, Fleet).
        config: the KubeletConfiguration (YAML or JSON text) every cluster rolls out, or
        configmap: one already published in every cluster, ``NAMESPACE/NAME``.
        rollout_deployment, rollback_deployment: the deployments each cluster's runs are copies
            of, one per work pool.
        probe_timeout_seconds: with a disruption budget given as a share of the fleet, how long
            each pool's worker has to count its cluster's nodes (its identity probe) first.

    Ends Completed when every stage completed (within the fleet's failure budget), Failed
    (``Halted``, ``Reverted``, ``Rejected``) naming the clusters and why otherwise, Cancelled
    when stopped (the clusters' runs under way go on; run it again to follow them).
    """
    plan = load_fleet_text(fleet, source="<fleet>")
    check_rollout_name(name, plan)
    _check_config(plan, config, configmap)
    tag_flow_run(fleet=name)
    bases = {RunKind.ROLLOUT: rollout_deployment, RunKind.ROLLBACK: rollback_deployment}
    pool_deployments(plan, [*bases.values(), *([PROBE_DEPLOYMENT] if plan.budget_needs_fleet_size else [])])
    digest = hashlib.sha256(f"{config}\0{configmap}".encode()).hexdigest()[:16]
    with FleetKeeper(name, start=lambda now: FleetJournal(rollout=name, digest=digest, created_at=now)) as keeper:
        if keeper.journal.digest != digest:
            raise FleetError(f"fleet rollout {name} was started with another config; give this one a new name",
                             path="name")
        ctx = FlowRunContext.get()
        supersede_fleet_runs(name, ctx.flow_run.id if ctx is not None and ctx.flow_run is not None else None)
        shell = FleetShell(name, plan, approval_poll_s=approval_poll_seconds)
        budget = _disruption_budget(keeper, plan, probe_timeout_s=probe_timeout_seconds)
        params = {"config": config, "configmap": configmap, "disruption_budget": budget}
        journal, observed = _drive(keeper, plan, shell, bases=bases, params=params, poll_s=poll_seconds, stop=STOP)
    if not journal.finished:
        message = ("stopped by request; the clusters' runs under way go on on their workers: run the same "
                   "command again to follow them")
        get_run_logger().warning(message)
        return ended(Outcome.STOPPED, message, clusters=rows(plan, observed))
    report = shell.report(journal, observed)
    outcome = journal.outcome or Outcome.FAILED
    (get_run_logger().info if outcome.ok else get_run_logger().error)("fleet rollout %s %s: %s", name, outcome,
                                                                        journal.message)
    return ended(outcome, journal.message, report=report, clusters=rows(plan, observed))


def _drive(keeper: FleetKeeper, plan: FleetPlan, shell: FleetShell, *, bases: dict[RunKind, str],
           params: dict[str, str | None], poll_s: float, stop: threading.Event) -> tuple[FleetJournal, Observed]:
    """observe -> decide -> save -> act, until the fleet ends or is stopped.

    A Prefect API that does not answer for a while (a busy or restarting server) is waited for, up
    to ``API_PATIENCE_S``: the clusters' runs go on meanwhile, and every action is safe to repeat
    (starts carry idempotency keys, the journal is written whole), so the next round decides again.
    """
    reader = RunReader(keeper.rollout, plan)
    observed: Observed = {}
    trouble_since: float | None = None
    while True:
        keeper.check()
        try:
            observed = reader.observe()
            journal, action = step(keeper.journal, plan, observed, now=utcnow(), abort=read_abort(keeper.rollout))
            if journal != keeper.journal:
                keeper.save(journal)  # before acting: a re-run knows what was asked
            shell.show(action, observed)
            if isinstance(action, Finish):
                return journal, observed
            _act(action, keeper, plan, shell, observed, bases=bases, params=params, poll_s=poll_s, stop=stop)
            trouble_since = None
        except Exception as exc:
            if not _transient(exc):
                raise
            trouble_since = trouble_since or time.monotonic()
            if time.monotonic() - trouble_since > API_PATIENCE_S:
                raise
            get_run_logger().warning("the Prefect API did not answer (%s); trying again", exc)
            stop.wait(poll_s)
        if stop.is_set():
            return keeper.journal, observed


def _act(action: FleetAction, keeper: FleetKeeper, plan: FleetPlan, shell: FleetShell, observed: Observed, *,
         bases: dict[RunKind, str], params: dict[str, str | None], poll_s: float, stop: threading.Event) -> None:
    if isinstance(action, StartClusters):
        start_runs(keeper.rollout, plan, action.clusters, kind=RunKind.ROLLOUT, base=bases[RunKind.ROLLOUT],
                   parameters={k: v for k, v in params.items() if v is not None})
    elif isinstance(action, StartRollbacks):
        start_runs(keeper.rollout, plan, action.clusters, kind=RunKind.ROLLBACK, base=bases[RunKind.ROLLBACK],
                   parameters={"to": "previous"})
    elif isinstance(action, RestartRuns):
        restart(action.runs, action.reason)
    elif isinstance(action, StopRuns):
        cancel(action.runs, action.reason)
    elif isinstance(action, AskApproval):
        answer = shell.approve(action, observed)
        if answer is not None:
            outcome, by, note = answer
            keeper.save(keeper.journal.with_gate_answer(action.stage, outcome, by=by, note=note, at=utcnow()))
    elif isinstance(action, Wait):
        pause = poll_s if action.until is None else min(poll_s, max(0.0, (action.until - utcnow()).total_seconds()))
        stop.wait(pause)


def _disruption_budget(keeper: FleetKeeper, plan: FleetPlan, *, probe_timeout_s: float) -> str | None:
    """The Prefect limit the clusters' batches take their nodes from (None: no budget), sized in
    nodes: a percentage is of the fleet's nodes, counted once by the clusters' identity probes
    and kept in the journal, so a re-run sizes it alike without asking the clusters again."""
    if plan.disruption_budget is None:
        return None
    if plan.budget_needs_fleet_size and keeper.journal.fleet_nodes is None:
        keeper.save(keeper.journal.with_fleet_nodes(count_fleet_nodes(plan, timeout_s=probe_timeout_s)))
    nodes = plan.budget_nodes(keeper.journal.fleet_nodes)
    assert nodes is not None
    return set_budget(keeper.rollout, nodes)


def _transient(exc: Exception) -> bool:
    """A Prefect API that did not answer, or answered 5xx: worth asking again."""
    import httpx
    from prefect.exceptions import PrefectHTTPStatusError

    if isinstance(exc, PrefectHTTPStatusError):
        return exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


def _check_config(plan: FleetPlan, config: str | None, configmap: str | None) -> None:
    """The config, as every cluster's policy would judge it before touching anything (offline)."""
    if (config is None) == (configmap is None):
        raise FleetError("give exactly one of config (a KubeletConfiguration) or configmap (NAMESPACE/NAME)")
    if config is not None:
        for policy in {c.policy for c in plan.clusters.values()}:
            refuse_invalid_config(config, source="config", policy_ref=policy, suffix=": no cluster was started")
