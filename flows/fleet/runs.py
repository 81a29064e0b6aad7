"""The clusters' runs, seen and started through Prefect: the fleet's only way to a cluster.

The fleet flow holds no cluster's credentials. Each cluster's rollout is a run of the rollout
deployment on the cluster's work pool, whose workers hold that cluster's credentials and no
other's: a deployment belongs to one work pool, so the rollout and rollback deployments are
copied onto each pool the fleet names (``kubelet-config-rollout/rollout@<pool>``: the same
entrypoint, parameters and schema; :func:`pool_deployments`). A run is started with
``run_deployment(as_subflow=True)``, so the Prefect UI shows it under the fleet's flow run,
with the tags ``fleet:<rollout>`` and ``cluster:<cluster>`` and an idempotency key: Prefect's
server returns the existing run for a second start, whoever asks (a re-run after ``kill -9``).

:func:`observe` reads every run of the fleet in one query, each cluster's newest per kind (a
rollout deferred to its maintenance window continues in a newer run with the same tags), and
turns them into ``rollout.fleet.runs`` values: the outcome from the state (``rollout.outcome``)
and the rollout's own progress events (batch, nodes done/failed). Whether a run's process lives
is Prefect's to say: its flow-run heartbeats, and the zombie-run automation
(``deployments/zombie-runs.yaml``) that marks a silent run Crashed. Every state this module sets
goes through Prefect's orchestration rules (no ``force``): a crashed deployment run may be
scheduled again, a running one cancelled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from uuid import UUID

from flows.events import ROLLOUT_PROGRESS, progress_heartbeat
from rollout.errors import NotFoundError
from rollout.fleet import (
    ClusterRun,
    ClusterRuns,
    FleetPlan,
    Observed,
    Progress,
    RunKind,
    RunPhase,
    cluster_rollout,
)
from rollout.outcome import Outcome
from rollout.timefmt import rfc3339

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.objects import FlowRun

FLEET_FLOW = "kubelet-config-fleet-rollout"
FLOWS = {"kubelet-config-rollout": RunKind.ROLLOUT, "kubelet-config-rollback": RunKind.ROLLBACK}
PAGE = 200


def fleet_tag(rollout: str) -> str:
    return f"fleet:{rollout}"


def cluster_tag(cluster_name: str) -> str:
    return f"cluster:{cluster_name}"


def idempotency_key(rollout: str, cluster_name: str, kind: RunKind) -> str:
    return f"kubelet-rollout-fleet/{rollout}/{cluster_name}/{kind.value}"


def pool_deployment(base: str, pool: str) -> str:
    """``kubelet-config-rollout/rollout`` on pool ``eu-1``: ``kubelet-config-rollout/rollout@eu-1``."""
    return f"{base}@{pool}"


def pool_deployments(plan: FleetPlan, bases: Iterable[str]) -> None:
    """Copy each base deployment onto every work pool of the fleet (created, or brought up to date).

    Refused before any cluster starts, naming what is missing: a base deployment (deploy
    ``deployments/prefect.yaml``) or a work pool (create it, and start a worker there that holds
    that cluster's credentials).
    """
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    pools: dict[str, list[str]] = {}
    for cluster in plan.clusters.values():
        pools.setdefault(cluster.work_pool, []).append(cluster.name)
    with get_client(sync_client=True) as client:
        deployments = {}
        for base in bases:
            try:
                deployments[base] = client.read_deployment_by_name(base)
            except ObjectNotFound:
                raise NotFoundError(f"deployment {base} not found: deploy deployments/prefect.yaml "
                                    "(prefect deploy --all --prefect-file deployments/prefect.yaml)") from None
        for pool, clusters in sorted(pools.items()):
            try:
                client.read_work_pool(pool)
            except ObjectNotFound:
                raise NotFoundError(f"work pool {pool!r} of cluster(s) {', '.join(clusters)} not found: create it "
                                    f"(prefect work-pool create {pool} --type process) and start a worker there "
                                    "that holds that cluster's credentials") from None
            for base, d in deployments.items():
                client.create_deployment(
                    flow_id=d.flow_id, name=pool_deployment(d.name, pool), version=d.version,
                    work_pool_name=pool, entrypoint=d.entrypoint, path=d.path, parameters=dict(d.parameters),
                    parameter_openapi_schema=d.parameter_openapi_schema, pull_steps=d.pull_steps,
                    enforce_parameter_schema=d.enforce_parameter_schema, job_variables=dict(d.job_variables or {}),
                    tags=list(d.tags), description=f"{d.description or base} On work pool {pool}, for fleet rollouts.")


def start_runs(rollout: str, plan: FleetPlan, clusters: Iterable[str], *, kind: RunKind, base: str,
               parameters: Mapping[str, Any]) -> list[FlowRun]:
    """Start each cluster's run of ``base`` on its pool, linked under the current flow run."""
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment

    started = []
    for cluster in clusters:
        pool = plan.clusters[cluster].work_pool
        params = {**parameters, "name": cluster_rollout(rollout, cluster), "policy": plan.clusters[cluster].policy,
                  "cluster_identity": plan.clusters[cluster].identity.given()}  # checked before any write
        run = run_deployment(pool_deployment(base, pool), parameters=params, timeout=0, as_subflow=True,
                             idempotency_key=idempotency_key(rollout, cluster, kind),
                             tags=[fleet_tag(rollout), cluster_tag(cluster)])
        assert isinstance(run, FlowRun)  # called outside an event loop, it answers at once
        started.append(run)
    return started


def restart(runs: Sequence[ClusterRun], reason: str) -> None:
    """Schedule these crashed runs again (the same flow runs): the next worker of each pool picks
    one up. A transition Prefect refuses is left as it is (the next look decides again)."""
    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    with get_client(sync_client=True) as client:
        for run in runs:
            client.set_flow_run_state(UUID(run.flow_run_id), Scheduled(message=f"scheduled again: {reason}"))


def cancel(runs: Sequence[ClusterRun], reason: str) -> None:
    """Cancel these runs: a scheduled one never starts; a running one's worker ends its process."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled, Cancelling

    with get_client(sync_client=True) as client:
        for run in runs:
            state = Cancelled if run.phase is RunPhase.SCHEDULED else Cancelling
            client.set_flow_run_state(UUID(run.flow_run_id), state(message=reason))


def supersede_fleet_runs(rollout: str, current: UUID | None) -> int:
    """Mark the fleet's earlier flow runs that never ended (killed mid-stage or at a gate) as
    crashed, so the UI shows one live fleet run and `rollout fleet approve` finds one gate."""
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    with get_client(sync_client=True) as client:
        stale = [run for run in fleet_flow_runs(client, rollout)
                 if run.id != current and run.state is not None and not run.state.is_final()]
        for run in stale:
            client.set_flow_run_state(run.id, Crashed(message=f"its process is gone; flow run {current} drives "
                                                              f"fleet rollout {rollout} now"))
    return len(stale)


def fleet_flow_runs(client: SyncPrefectClient, rollout: str) -> list[FlowRun]:
    """The fleet rollout's own flow runs, newest first."""
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    runs = _tagged(client, rollout, flow_filter=FlowFilter(name=FlowFilterName(any_=[FLEET_FLOW])))
    return sorted(runs, key=lambda r: r.created or datetime.min, reverse=True)


@dataclass
class RunReader:
    """Reads the fleet's cluster runs; remembers the progress of runs that ended (it cannot change)."""

    rollout: str
    plan: FleetPlan
    _final: dict[tuple[str, int], Progress | None] = field(default_factory=dict)
    _flows: dict[UUID, str] = field(default_factory=dict)

    def observe(self) -> Observed:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            newest = self._newest(client)
            progress = self._progress(client, [run for (_, kind), run in newest.items() if kind is RunKind.ROLLOUT])
        observed: dict[str, ClusterRuns] = {}
        for (cluster, kind), run in newest.items():
            if cluster not in self.plan.clusters:
                continue
            value = _cluster_run(cluster, kind, run, progress=progress.get(str(run.id)))
            runs = observed.get(cluster, ClusterRuns())
            observed[cluster] = (ClusterRuns(rollout=value, rollback=runs.rollback) if kind is RunKind.ROLLOUT
                                 else ClusterRuns(rollout=runs.rollout, rollback=value))
        return observed

    def _newest(self, client: SyncPrefectClient) -> dict[tuple[str, RunKind], FlowRun]:
        newest: dict[tuple[str, RunKind], FlowRun] = {}
        for run in _tagged(client, self.rollout):
            if run.flow_id not in self._flows:
                self._flows.update(_flow_names(client))  # a flow's id never changes: read once
            kind = FLOWS.get(self._flows.get(run.flow_id, ""))
            cluster = next((t.removeprefix("cluster:") for t in run.tags if t.startswith("cluster:")), None)
            if kind is None or cluster is None:
                continue
            held = newest.get((cluster, kind))
            if held is None or (run.created or datetime.min) > (held.created or datetime.min):
                newest[(cluster, kind)] = run
        return newest

    def _progress(self, client: SyncPrefectClient, runs: list[FlowRun]) -> dict[str, Progress | None]:
        """Each run's latest progress event; a run that ended keeps what was read once it had.

        One query reads the heartbeats of the last two periods (every live run has one there,
        however many events the rollouts sent before); a run without one (it ended, or went
        silent) is asked on its own, for its latest ever."""
        found: dict[str, Progress | None] = {}
        ask = []
        for run in runs:
            key = (str(run.id), run.run_count)
            if key in self._final:
                found[str(run.id)] = self._final[key]
            else:
                ask.append(run)
        if ask:
            recent = datetime.now(timezone.utc) - 2 * progress_heartbeat()
            latest = _progress_events(client, ask, since=recent)
            for run in ask:
                if str(run.id) not in latest:
                    latest.update(_progress_events(client, [run], limit=1))
                found[str(run.id)] = latest.get(str(run.id))
                if run.state is not None and run.state.is_final() and found[str(run.id)] is not None:
                    self._final[(str(run.id), run.run_count)] = found[str(run.id)]
        return found


def _tagged(client: SyncPrefectClient, rollout: str, **filters: Any) -> list[FlowRun]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    runs: list[FlowRun] = []
    while True:
        page = client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[fleet_tag(rollout)])),
                                     limit=PAGE, offset=len(runs), **filters)
        runs.extend(page)
        if len(page) < PAGE:
            return runs


def _flow_names(client: SyncPrefectClient) -> dict[UUID, str]:
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    flows = client.read_flows(flow_filter=FlowFilter(name=FlowFilterName(any_=list(FLOWS))))
    return {f.id: f.name for f in flows}


def _progress_events(client: SyncPrefectClient, runs: list[FlowRun], *, since: datetime | None = None,
                     limit: int = 50) -> dict[str, Progress]:
    """The latest progress event of each of ``runs`` (since ``since``, else since the first began)."""
    names = {f"kubelet-rollout.rollout.{run.parameters.get('name', '')}": run for run in runs}
    since = since or min((run.start_time or run.created or datetime.now(timezone.utc)) for run in runs)
    response = client.request("POST", "/events/filter", json={
        "filter": {"occurred": {"since": rfc3339(since)}, "resource": {"id": sorted(names)},
                   "event": {"name": [ROLLOUT_PROGRESS]}, "order": "DESC"},
        "limit": limit})
    latest: dict[str, Progress] = {}
    for event in response.json().get("events", []):
        run = names.get(str(event.get("resource", {}).get("prefect.resource.id", "")))
        if run is None or str(run.id) in latest:
            continue
        payload = event.get("payload") or {}
        try:
            latest[str(run.id)] = Progress(state=str(payload.get("state", "")), batch=int(payload.get("batch", 0)),
                                           batches=int(payload.get("batches", 0)), nodes=int(payload.get("nodes", 0)),
                                           done=int(payload.get("done", 0)), failed=int(payload.get("failed", 0)),
                                           at=datetime.fromisoformat(str(event["occurred"]).replace("Z", "+00:00")))
        except (KeyError, TypeError, ValueError):
            continue
    return latest


def _cluster_run(cluster_name: str, kind: RunKind, run: FlowRun, *, progress: Progress | None) -> ClusterRun:
    from prefect.client.schemas.objects import StateType

    state = run.state
    phase = {StateType.SCHEDULED: RunPhase.SCHEDULED, StateType.PAUSED: RunPhase.PAUSED}.get(
        state.type, RunPhase.RUNNING) if state is not None else RunPhase.SCHEDULED
    outcome = None
    if state is not None and state.is_final():
        phase, outcome = RunPhase.ENDED, Outcome.of_state(state.type.value, state.name)
    return ClusterRun(cluster=cluster_name, kind=kind, flow_run_id=str(run.id), flow_run_name=run.name, phase=phase,
                      outcome=outcome, message=(state.message or "") if state is not None else "",
                      started_at=run.start_time, ended_at=run.end_time, attempts=run.run_count,
                      progress=progress)
