"""`kubelet-config-rollback`: put every node a rollout touched back, batch by batch.

What each node had before comes from the rollout's journal (or, if the journal is gone, from the
``kubelet-rollout.io/previous-source`` annotation written in the same PATCH as the assignment).
``to="previous"`` restores that source; ``to="local"`` removes ``spec.configSource`` so the
kubelet runs its local ``--config``. Batches are the rollout's own, in reverse order (the last
batch first, the canary last); each must converge (``rollout.phases.revert_phase``: REVERTED,
i.e. spec/assigned/active back and the node Ready) before the next starts. A node that does not
converge within the policy's progress deadline fails the run, naming it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Mapping

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows import events
from flows.common import load_policy_ref, open_gateway, utcnow
from flows.outcome import RolloutFailed
from flows.report import node_row, rows_markdown, table_artifact_rows
from flows.rollout_flow import RolloutRun, _merge_spec, artifact_key
from flows.status import load_journal
from rollout.errors import NotFoundError
from rollout.gateway import EVENT_REVERTED, LockKeeper
from rollout.journal import Journal, RolloutStatus, annotations_by_rollout
from rollout.model import ConfigRef, NodeObservation, NodePhase
from rollout.phases import Revert, revert_phase
from rollout.policy import RolloutPolicy


@task(name="rollback-batch", task_run_name="rollback-batch-{label}", cache_policy=NO_CACHE)
def rollback_batch(run: RolloutRun, targets: Mapping[str, ConfigRef | None], label: str) -> dict[str, str]:
    """Re-point the batch's nodes and wait until each converged back (or timed out)."""
    log = get_run_logger()
    requested = utcnow()
    for node, to in sorted(targets.items()):
        obs = run.gateway.assign(node, to, annotations={})
        run.observations[node] = _merge_spec(run.observations.get(node), obs)
        where = f"{to.namespace}/{to.name}" if to else "local config"
        run.gateway.record_node_event(node, EVENT_REVERTED, f"rollback of rollout {run.name}: back to {where}")
    reverts = {n: Revert(to=to, requested_at=requested) for n, to in targets.items()}
    while True:
        now = utcnow()
        verdicts = {n: revert_phase(run.observations.get(n), revert=r, now=now, policy=run.policy)
                    for n, r in reverts.items()}
        open_ = [n for n, v in verdicts.items() if v.phase is NodePhase.REVERTING]
        if not open_:
            return {n: f"{v.phase.value}: {v.reason}" for n, v in verdicts.items()}
        log.info("rollback batch %s: waiting for %s", label, ", ".join(sorted(open_)))
        run.wait_until(min(now + timedelta(seconds=5), requested + run.policy.progress_deadline + timedelta(seconds=1)))


def _touched(gateway: Any, name: str, observations: Mapping[str, NodeObservation]) -> tuple[Journal | None, str | None, list[list[str]], dict[str, ConfigRef | None]]:
    """(journal, rv, batches of touched nodes in plan order, previous source per node)."""
    loaded = load_journal(gateway, name)
    if loaded is not None:
        journal, rv = loaded
        batches = [[n for n in b.nodes if journal.nodes[n].assigned] for b in journal.plan.batches]
        previous = {n: r.previous for n, r in journal.nodes.items() if r.assigned}
        return journal, rv, [b for b in batches if b], previous
    found = annotations_by_rollout(name, [(o.name, o.annotations) for o in observations.values()])
    if not found:
        raise NotFoundError(f"rollout {name!r} has no journal and no node carries its annotations: "
                            "nothing to roll back")
    by_batch: dict[int, list[str]] = {}
    for node, ann in sorted(found.items()):
        by_batch.setdefault(ann.batch, []).append(node)
    return None, None, [by_batch[i] for i in sorted(by_batch)], {n: a.previous for n, a in found.items()}


def _record(journal: Journal, targets: Mapping[str, ConfigRef | None], *, reason: str, rv_holder: RolloutRun) -> None:
    """Mark the nodes as reverted-by-rollback in the journal (so `rollout status` tells the truth)."""
    now = utcnow()
    nodes = dict(journal.nodes)
    for name, to in targets.items():
        nodes[name] = replace(nodes[name], revert_to=to, revert_requested_at=now,
                              phase=NodePhase.REVERTING, phase_since=now)
    j = replace(journal, nodes=MappingProxyType(nodes))
    j = j.with_status(RolloutStatus.HALTED, at=now, reason=reason)
    rv_holder.journal = j.with_decision("Rollback", reason, at=now)
    rv_holder.save()


@flow(name="kubelet-config-rollback", log_prints=False)
def kubelet_config_rollback(
    name: str,
    to: str = "previous",
    policy: str = "canary",
    kubeconfig: str | None = None,
    context: str | None = None,
) -> dict[str, Any]:
    """Restore every node touched by rollout ``name`` to its previous config source (``to=previous``)
    or to its local config (``to=local``), in the rollout's batches (last first), waiting for each
    batch to converge. Fails naming the nodes that did not come back."""
    if to not in ("previous", "local"):
        raise ValueError(f"to must be 'previous' or 'local', not {to!r}")
    log = get_run_logger()
    pol: RolloutPolicy = load_policy_ref(policy)
    gateway = open_gateway(kubeconfig, context)
    run = RolloutRun(name=name, gateway=gateway, policy=pol)
    with LockKeeper(gateway, f"kubelet-rollout/{name}", rollout=name, duration_s=60.0) as lock:
        run.observe_all()
        journal, rv, batches, previous = _touched(gateway, name, run.observations)
        if journal is not None:
            run.journal, run.journal_rv, run.saved = journal, rv, journal.to_configmap_data()
            run.policy = replace_policy_deadline(pol, journal.plan.policy)
        else:
            run.journal = None
        touched = [n for b in batches for n in b if n in run.observations]
        targets = {n: (previous[n] if to == "previous" else None) for n in touched}
        reason = f"rolled back to {'each node’s previous source' if to == 'previous' else 'local config'} by a rollback run"
        if run.journal is not None:
            _record(run.journal, targets, reason=reason, rv_holder=run)
        results: dict[str, str] = {}
        rows = []
        for i, batch in reversed(list(enumerate(batches, 1))):
            lock.check()
            part = {n: targets[n] for n in batch if n in targets}
            if not part:
                continue
            results.update(rollback_batch(run, part, str(i)))
            for n in part:
                rows.append(node_row(run.observations.get(n) or NodeObservation(name=n),
                                     results[n].split(":")[0], batch=str(i)))
        failed = {n: why for n, why in results.items() if not why.startswith(NodePhase.REVERTED.value)}
        create_table_artifact(table=table_artifact_rows(rows), key=artifact_key(name, "rollback"),
                              description=f"Rollback of `{name}` to {to}")
        outcome = "rolled-back" if not failed else "failed"
        message = (f"rollback of {name}: {len(results) - len(failed)}/{len(results)} node(s) back on "
                   f"{'their previous source' if to == 'previous' else 'local config'}")
        report = "\n".join([f"# Rollback of `{name}` to {to}: {outcome}", "", message, "", rows_markdown(rows)])
        create_markdown_artifact(markdown=report, key=artifact_key(name, "rollback-report"))
        if failed:
            raise RolloutFailed("failed", message + "; did not converge", nodes=sorted(failed), report=report)
        events.emit_rollout_event(events.ROLLBACK_COMPLETED, name, {"to": to, "nodes": sorted(results)})
        log.info(message)
        return {"outcome": "rolled-back", "message": message, "report": report, "nodes": sorted(results)}


def replace_policy_deadline(given: RolloutPolicy, original: RolloutPolicy) -> RolloutPolicy:
    """The rollback waits as patiently as the rollout did (its progress deadline and lease rule)."""
    return given.model_copy(update={"progress_deadline": max(given.progress_deadline, original.progress_deadline),
                                    "lease_stale_after": original.lease_stale_after})
