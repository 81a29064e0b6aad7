"""`kubelet-config-rollback`: put every node a rollout touched back, batch by batch, the last first.

The rollout's own journal is put in the ``rolling-back`` state (``rollout.rollback``) and the same
engine that ran the rollout walks it back: each batch's revert is written, then judged from the
nodes' status, before the batch before it is touched. What each node had before comes from the
journal or, if the journal is gone, from the ``kubelet-rollout.io/previous-source`` annotation
written in the same PATCH as the assignment. ``to="local"`` removes ``spec.configSource`` so the
kubelet runs its local ``--config``. A node that does not come back fails the run, naming it and
what its status shows.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows import events
from flows.cluster import rollback_policy
from flows.head_start import HEAD_STARTS, RollbackStarted, run_rollback
from flows.heap import freeze_more
from flows.outcome import RunEnd, ended, refuses_quietly
from flows.shell import PrefectShell, artifact_key, tag_flow_run, utcnow
from rollout import flags
from rollout.engine import RunResult
from rollout.outcome import Outcome


@flow(name="kubelet-config-rollback", flow_run_name="rollback-{name}", log_prints=False)
@refuses_quietly
def kubelet_config_rollback(
    name: str,
    to: str = "previous",
    policy: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> RunEnd:
    """Restore every node touched by rollout ``name`` to its previous config source (``to=previous``)
    or to its local config (``to=local``), in the rollout's batches (last first), waiting for each
    batch to converge, with the rollout's own policy unless ``policy`` names another. Fails naming
    the nodes that did not come back."""
    flags.rollout_name(name, flag="name")
    started = utcnow()
    pol = rollback_policy(name, policy, kubeconfig=kubeconfig, context=context)
    tag_flow_run(rollout=name, policy=pol.name)
    shell = PrefectShell(name, run_started=started)
    try:
        result = run_rollback(name=name, to=to, policy=pol, kubeconfig=kubeconfig, context=context, shell=shell)
    finally:
        shell.close()
    return finish_rollback(shell, result, name=name, to=to)


@flow(name="kubelet-config-rollback", flow_run_name="rollback-{name}", log_prints=False)
@refuses_quietly
def attach_rollback(
    head_start: str,
    name: str,
    to: str = "previous",
    policy: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> RunEnd:
    """The flow run of a rollback this process began ahead of it
    (``flows.head_start.start_rollback_ahead``): it shows and answers everything the engine does,
    to the end."""
    head = HEAD_STARTS.pop(head_start)
    started: RollbackStarted = head.started()
    tag_flow_run(rollout=name, policy=started.policy.name)
    shell = PrefectShell(name, run_started=started.began)
    freeze_more()  # attached: what Prefect built for this flow run lives as long as the loop (flows.heap)
    try:
        return finish_rollback(shell, head.relay.serve(shell, head.ended), name=name, to=to)
    finally:
        shell.close()


def finish_rollback(shell: PrefectShell, result: RunResult, *, name: str, to: str) -> RunEnd:
    """The rollback run's end: report, Prefect event, and the state of its outcome."""
    log = get_run_logger()
    if result.outcome is Outcome.STOPPED:
        return ended(Outcome.STOPPED, result.message)
    touched = sorted(result.journal.reverting_nodes())
    message = result.message
    report = shell.report(result, outcome=result.outcome.value, message=message)
    if result.outcome is not Outcome.ROLLED_BACK:
        details = "; ".join(f"{n}: {why}" for n, why in sorted(result.failed.items())[:10])
        log.error("%s; did not converge: %s", message, details)
        return ended(Outcome.FAILED, f"{message}; did not converge: {details}", nodes=sorted(result.failed),
                     report=report)
    events.emit_rollout_event(events.ROLLBACK_COMPLETED, name, {"to": to, "nodes": touched})
    log.info(message)
    return ended(Outcome.ROLLED_BACK, message, report=report, nodes=touched, artifact=artifact_key(name, "report"))
