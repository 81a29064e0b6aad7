"""`kubelet-config-rollback`: put every node a rollout touched back, batch by batch, the last first.

The rollout's own journal is put in the ``rolling-back`` state (``rollout.usecases.rollback``) and the same
run (``rollout.run.Run``) walks it back: each batch's revert is written, then judged from the
nodes' status, before the batch before it is touched. What each node had before comes from the
journal or, if the journal is gone, from the ``kubelet-rollout.io/previous-source`` annotation
written in the same PATCH as the assignment. ``to="local"`` removes ``spec.configSource`` so the
kubelet runs its local ``--config``. A node that does not come back fails the run, naming it and
what its status shows. As the rollout flow, it begins the run itself on a deployment and shows the
run a local ``rollout rollback`` began (``flows.rollout_flow.showing``).
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows import events
from flows.cluster import begin_run
from flows.outcome import RunEnd, ended, refuses_quietly
from flows.rollout_flow import begun_here
from flows.shell import PrefectShell, artifact_key, tag_flow_run
from rollout.gateway import open_gateway
from rollout.identity import ClusterIdentity
from rollout.outcome import Outcome
from rollout.run import Run, rollback_request
from rollout.usecases.status import load_journal


@flow(name="kubelet-config-rollback", flow_run_name="rollback-{name}", log_prints=False)
@refuses_quietly
def kubelet_config_rollback(
    name: str,
    to: str = "previous",
    policy: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    cluster_identity: dict[str, str] | None = None,
) -> RunEnd:
    """Restore every node touched by rollout ``name`` to its previous config source (``to=previous``)
    or to its local config (``to=local``), in the rollout's batches (last first), waiting for each
    batch to converge, with the rollout's own policy unless ``policy`` names another. Fails naming
    the nodes that did not come back. ``cluster_identity``: the cluster it is for (a fleet's run;
    ``rollout.identity``), checked before any write."""
    run = begun_here(name, rollback=True)
    if run is None:  # a deployment's run (or a direct call): no CLI checked these parameters
        journal = None if policy else load_journal(open_gateway(kubeconfig, context), name)
        run = begin_run(rollback_request(journal[0] if journal else None, name=name, to=to, policy=policy,
                                         kubeconfig=kubeconfig, context=context,
                                         expected_cluster=ClusterIdentity.from_params(cluster_identity)))
    return show_rollback(run)


def show_rollback(run: Run) -> RunEnd:
    """Show the rollback ``run`` in this flow run to its end; the state of its outcome."""
    tag_flow_run(rollout=run.name, policy=run.request.policy.name)
    try:
        run.began()  # raises what refused it (the lock, a cluster error)
        shell = PrefectShell(run)
        try:
            shell.follow()
        finally:
            shell.close()
        return finish_rollback(shell, run)
    finally:
        run.stop()  # a flow run that ended early leaves no run behind it (nothing when it ended)
        run.wait_ended()


def finish_rollback(shell: PrefectShell, run: Run) -> RunEnd:
    """The rollback run's end: the report published, a Prefect event, and the state of its outcome."""
    log = get_run_logger()
    end = run.ending()
    if end.outcome is Outcome.STOPPED:
        return ended(Outcome.STOPPED, end.message)
    report = run.report()
    shell.publish_report(report, end.outcome.value)
    if end.outcome is not Outcome.ROLLED_BACK:
        log.error("%s", end.message)
        return ended(end.outcome, end.message, nodes=end.nodes, report=report)
    events.emit_rollout_event(events.ROLLBACK_COMPLETED, run.name, {"to": run.request.rollback_to,
                                                                     "nodes": list(end.nodes)})
    log.info(end.message)
    return ended(Outcome.ROLLED_BACK, end.message, report=report, nodes=end.nodes,
                 artifact=artifact_key(run.name, "report"))
