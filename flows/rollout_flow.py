"""`kubelet-config-rollout`: a staged canary rollout of a kubelet config, shown in a Prefect flow run.

The run itself is the core's (``rollout.run.Run``: the lock, probe, validate, review, publish,
plan or resume, then the loop); this flow shows it: ``prepare-config`` and ``plan-rollout`` report
what the run prepared and planned, :class:`flows.shell.PrefectShell` follows it to its end (logs,
batch task runs, artifacts, events, approval pauses), and the flow run ends in its outcome's state.
The journal lives in the cluster, so running the flow again with the same rollout name resumes
where it stopped, whoever ran it before.

One flow, two ways in: a deployment's worker calls it with parameters and it begins the run
itself; a local ``rollout start`` begins the run at once (before a Prefect API even answers) and
then calls it with the same parameters inside :func:`showing`, so it shows that run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext

from flows import events
from flows.approval import supersede_gates
from flows.cluster import begin_run
from flows.outcome import RunEnd, ended, refuses_quietly
from flows.shell import PrefectShell, tag_flow_run
from rollout.identity import ClusterIdentity
from rollout.journal import BatchStatus
from rollout.loop.heap import freeze_more
from rollout.outcome import Outcome
from rollout.usecases.prepare import rollout_name_for
from rollout.run import Began, PrometheusAddress, Run, rollout_request

# the run this process began for the flow call made inside ``showing`` (a local `rollout start`)
_BEGUN_HERE: ContextVar[Run | None] = ContextVar("kubelet_rollout_begun_here", default=None)


@contextlib.contextmanager
def showing(run: Run) -> Iterator[None]:
    """Calls of the rollout or rollback flow inside the block show ``run`` rather than begin one."""
    token = _BEGUN_HERE.set(run)
    try:
        yield
    finally:
        _BEGUN_HERE.reset(token)


def begun_here(name: str, *, rollback: bool) -> Run | None:
    """The run of ``name`` this call is to show, when the caller began it (taken once)."""
    run = _BEGUN_HERE.get()
    if run is None or run.name != name or run.request.is_rollback != rollback:
        return None
    _BEGUN_HERE.set(None)  # a flow it calls in turn begins its own
    return run


def on_a_deployment() -> bool:
    """This flow run belongs to a deployment: outside every window it hands the rest to a run
    scheduled at the window rather than hold its worker."""
    ctx = FlowRunContext.get()
    return bool(ctx is not None and ctx.flow_run is not None and ctx.flow_run.deployment_id)


@task(name="prepare-config", task_run_name="prepare config of {name}", cache_policy=NO_CACHE)
def prepare_config(run: Run, *, name: str) -> Began:
    """The run probes DKC (zero writes), validates the config (1.23 rules + the DKC danger review
    against a sample of the nodes) and publishes it: what it found."""
    began = run.began()
    prepared = began.prepared
    assert prepared is not None, "a rollout run prepares its config"
    log = get_run_logger()
    if prepared.created:
        events.emit_config_published(namespace=prepared.target.namespace, name=prepared.target.name, rollout=name,
                                     policy=run.request.policy.name, origin="flow")
    for warning in prepared.warnings:
        log.warning("config: %s", warning)
    log.info("target config: %s", prepared.target)
    return began


@task(name="plan-rollout", task_run_name="plan {name}", cache_policy=NO_CACHE)
def plan_rollout(began: Began, *, name: str) -> None:
    """The plan the run made, or the journal it resumes (``retry``: a halted one's failed batches again)."""
    log = get_run_logger()
    journal = began.journal
    if began.resumed:
        if journal.decisions and journal.decisions[-1].kind == "Retry":
            log.info("%s", journal.decisions[-1].reason)
        done = sum(1 for b in journal.batches if b.status is BatchStatus.DONE)
        log.info("resuming rollout %s from its journal: %s, %d/%d batch(es) done, %d node(s) assigned",
                 name, journal.shown_status, done, len(journal.batches), len(journal.assigned_nodes()))
        return
    plan = journal.plan
    for b in plan.batches:
        log.info("%s: %s", b.label, _listed(b.nodes))
    for s in plan.skipped[:LISTED]:
        log.info("skipped %s: %s", s.node, s.reason)
    log.info("plan: %d batch(es), %d node(s)%s", len(plan.batches), len(plan.nodes),
             f", {len(plan.skipped)} skipped" if plan.skipped else "")


LISTED = 50  # nodes named in one log line; a 10,000-node batch is counted beyond them


def _listed(nodes: tuple[str, ...]) -> str:
    shown = ", ".join(nodes[:LISTED])
    return shown + (f" and {len(nodes) - LISTED} more" if len(nodes) > LISTED else "")


def run_name() -> str:
    """The flow run is named after its rollout (derived from the config when not given)."""
    from prefect.runtime import flow_run

    params = flow_run.parameters
    try:
        return str(params.get("name") or rollout_name_for(config=params.get("config"),
                                                          configmap=params.get("configmap")))
    except Exception:  # noqa: BLE001 - the flow itself reports a bad config
        return "unnamed-rollout"


@flow(name="kubelet-config-rollout", flow_run_name=run_name, log_prints=False)
@refuses_quietly
def kubelet_config_rollout(
    name: str | None = None,
    config: str | None = None,
    configmap: str | None = None,
    policy: str = "canary",
    node_selector: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    skip_validation: bool = False,
    approval_poll_seconds: int = 2,
    prometheus: str | None = None,
    prometheus_token_file: str | None = None,
    prometheus_ca_file: str | None = None,
    time_scale: float | None = None,
    retry: bool = False,
    cluster_identity: dict[str, str] | None = None,
    disruption_budget: str | None = None,
) -> RunEnd:
    """Roll a kubelet config out to the cluster's nodes in canary-first batches.

    Args:
        name: the rollout's name; re-run with the same name to resume it from the cluster journal.
            None: the config's content-hash ConfigMap name (what a scheduled deployment uses).
        config: the KubeletConfiguration (YAML or JSON text) to publish and roll out, or
        configmap: an already published ConfigMap, ``NAMESPACE/NAME``.
        policy: a shipped policy name (``canary``, ``cautious``, ``fast``: ``policies/``),
            a file path, or the policy's YAML text.
        node_selector: label selector overriding the policy's.
        kubeconfig, context: cluster credentials; none = in-cluster service account.
        skip_validation: roll out even a config that fails validation or the DKC review
            (rehearsals on kubesim only; errors are still logged).
        prometheus, prometheus_token_file, prometheus_ca_file: where the policy's analysis checks
            are queried (else ``KUBELET_ROLLOUT_PROMETHEUS_URL``/``_TOKEN_FILE``/``_CA_FILE``, else the
            policy's ``analysis.prometheus``).
        time_scale: a rehearsal on kubesim: every policy duration divided by it
            (``RolloutPolicy.rehearsal``); refused against any other cluster.
        retry: run a halted rollout's failed batches again (``rollout retry``).
        cluster_identity: the cluster this run is for (a fleet's run: ``server``, ``caSha256``,
            ``kubeSystemUID``; ``rollout.identity``), checked before any write; refused naming
            both identities when the credentials reach another.
        disruption_budget: a fleet's run: the Prefect global concurrency limit (nodes changing at once
            across the fleet) each batch takes its nodes from before its first write.

    The run ends Completed when every batch is done, Failed (message naming the nodes and the
    reason) when the rollout halted or was reverted, Cancelled when it was stopped. Approval
    gates pause the run; answer them in the UI or with ``rollout approve/reject``.
    """
    run = begun_here(name or "", rollback=False) if name else None
    if run is None:  # a deployment's run (or a direct call): no CLI checked these parameters
        request = rollout_request(name=name, config=config, configmap=configmap, policy=policy,
                                  node_selector=node_selector, time_scale=time_scale, kubeconfig=kubeconfig,
                                  context=context, retry=retry, skip_validation=skip_validation,
                                  prometheus=PrometheusAddress(prometheus, prometheus_token_file, prometheus_ca_file),
                                  expected_cluster=ClusterIdentity.from_params(cluster_identity),
                                  disruption_budget=disruption_budget)
        run = begin_run(request, deferrable=on_a_deployment())
    return show_rollout(run, approval_poll_s=approval_poll_seconds)


def show_rollout(run: Run, *, approval_poll_s: int) -> RunEnd:
    """Show ``run`` in this flow run to its end; the state of its outcome."""
    name, policy = run.name, run.request.policy
    tag_flow_run(rollout=name, policy=policy.name)
    try:
        if run.request.prometheus.url or policy.analysis.enabled:
            get_run_logger().info("analysis: %d check(s)", len(policy.analysis.checks))
        began = prepare_config(run, name=name)
        prepared = began.prepared
        assert prepared is not None
        tag_flow_run(config=prepared.target.name)
        plan_rollout(began, name=name)
        supersede_gates(name)
        shell = PrefectShell(run, prepared=prepared, approval_poll_s=approval_poll_s, evidence=run.tools.gateway)
        freeze_more()  # what Prefect built for this flow run lives as long as the loop (rollout.loop.heap)
        try:
            shell.follow()
        finally:
            shell.close()
        return finish(shell, run)
    finally:
        run.stop()  # a flow run that ended early leaves no run behind it (nothing when it ended)
        run.wait_ended()


def finish(shell: PrefectShell, run: Run) -> RunEnd:
    """The flow run's end: the report published, a Prefect event, and the state of its outcome (a
    named state, not an exception, when it did not complete: see ``flows.outcome``)."""
    log = get_run_logger()
    result, end = run.result(), run.ending()
    journal = result.journal
    if end.outcome is Outcome.STOPPED:
        log.warning(end.message)
        return ended(end.outcome, end.message)
    if end.outcome is Outcome.DEFERRED:
        until = getattr(result.action, "until", None)
        assert until is not None, "a deferred run waits for a window"
        continued = shell.continue_at(until, run.request.flow_parameters())
        return ended(end.outcome, f"{end.message}; flow run {continued} continues the rollout", continued_by=continued)
    report = run.report()
    shell.publish_report(report, end.outcome.value)
    if end.outcome is Outcome.COMPLETED:
        events.emit_rollout_event(events.ROLLOUT_COMPLETED, shell.name, {
            "target": str(journal.target), "nodes": len(journal.plan.nodes), "batches": len(journal.plan.batches)})
        log.info("rollout %s completed: %s", shell.name, end.message)
        return ended(end.outcome, end.message, report=report, target=str(journal.target),
                     batches=[list(b.nodes) for b in journal.plan.batches],
                     skipped={n: r.skipped for n, r in journal.nodes.items() if r.skipped})
    events.emit_rollout_event(events.ROLLOUT_HALTED, shell.name, {
        "outcome": end.outcome.value, "reason": result.message, "failed": dict(result.failed),
        "target": str(journal.target)})
    log.error("rollout %s %s: %s", shell.name, end.outcome, end.message)
    return ended(end.outcome, end.message, nodes=end.nodes, report=report)


__all__ = ["begun_here", "finish", "kubelet_config_rollout", "on_a_deployment", "prepare_config", "run_name",
           "show_rollout", "showing"]

