"""`kubelet-config-rollout`: a staged canary rollout of a kubelet config through Dynamic Kubelet Config.

A few lines composing the core: ``prepare-config`` (probe, validate, review, publish:
``rollout.prepare``), ``plan-rollout`` (plan, or resume the cluster journal), then
``rollout.engine.Engine`` runs observe -> decide -> act to the end, with
:class:`flows.shell.PrefectShell` adding the logs, artifacts, events and approval pauses. Every
decision is the core's; the journal lives in the cluster
(``kube-system/kubelet-rollout-journal-<name>`` + node annotations), so running the flow again
with the same rollout name resumes where it stopped, whoever ran it before.

A local ``rollout start`` whose Prefect API is a temporary server does not wait for that server:
it begins the rollout at once (``flows.head_start.start_ahead``) and runs :func:`attach`, the
same flow, once the server is up.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows import events
from flows.approval import supersede_gates
from flows.cluster import gateway_and_lock
from flows.head_start import HEAD_STARTS, engine_for, retried, run_engine, run_inputs
from flows.heap import freeze_more
from flows.outcome import RunEnd, ended, refuses_quietly
from flows.shell import STOP, PrefectShell, tag_flow_run, utcnow
from rollout.engine import Engine, RunResult
from rollout.journal import BatchStatus, Journal
from rollout.model import NodeObservation
from rollout.outcome import Outcome
from rollout.policy import RolloutPolicy
from rollout.ports import ClusterForPrepare, JournalReader, MetricsSource
from rollout.prometheus import metrics_source
from rollout.prepare import Prepared, plan_or_resume, prepare, rollout_name_for


@task(name="prepare-config", task_run_name="prepare config of {name}", cache_policy=NO_CACHE)
def prepare_config(gateway: ClusterForPrepare, *, name: str, policy: RolloutPolicy, observations: dict[str, NodeObservation],
                   config: str | None, configmap: str | None, validate: bool, kubeconfig: str | None) -> Prepared:
    """Probe DKC (zero writes), validate the config (1.23 rules + the DKC danger review against a
    sample of the nodes) and publish it."""
    prepared = prepare(gateway, name=name, policy=policy, observations=observations, config=config,
                       configmap=configmap, validate=validate)
    return _prepared(prepared, name=name, policy=policy)


@task(name="prepare-config", task_run_name="prepare config of {name}", cache_policy=NO_CACHE)
def prepared_ahead(prepared: Prepared, *, name: str, policy: RolloutPolicy) -> Prepared:
    """The config a head start prepared (probed, validated, reviewed, published) before this run."""
    return _prepared(prepared, name=name, policy=policy)


def _prepared(prepared: Prepared, *, name: str, policy: RolloutPolicy) -> Prepared:
    log = get_run_logger()
    if prepared.created:
        events.emit_config_published(namespace=prepared.target.namespace, name=prepared.target.name, rollout=name,
                                     policy=policy.name, origin="flow")
    for warning in prepared.warnings:
        log.warning("config: %s", warning)
    log.info("target config: %s", prepared.target)
    return prepared


@task(name="plan-rollout", task_run_name="plan {name}", cache_policy=NO_CACHE)
def plan_rollout(gateway: JournalReader, *, name: str, policy: RolloutPolicy, prepared: Prepared,
                 observations: dict[str, NodeObservation], retry: bool = False) -> tuple[Journal, str | None]:
    """Resume from the cluster journal (``retry``: a halted one's failed batches again), or plan a
    new rollout."""
    journal, rv, resumed = plan_or_resume(gateway, name=name, policy=policy, prepared=prepared,
                                          observations=observations, now=utcnow())
    if resumed and retry:
        journal = retried(journal)
        get_run_logger().info("%s", journal.decisions[-1].reason if journal.decisions else "retrying")
    return _planned(journal, resumed, name=name), rv


@task(name="plan-rollout", task_run_name="plan {name}", cache_policy=NO_CACHE)
def planned_ahead(journal: Journal, resumed: bool, *, name: str) -> Journal:
    """The plan (or the resumed journal) a head start ran from before this run."""
    return _planned(journal, resumed, name=name)


def _planned(journal: Journal, resumed: bool, *, name: str) -> Journal:
    log = get_run_logger()
    if resumed:
        done = sum(1 for b in journal.batches if b.status is BatchStatus.DONE)
        log.info("resuming rollout %s from its journal: %s, %d/%d batch(es) done, %d node(s) assigned",
                 name, journal.shown_status, done, len(journal.batches), len(journal.assigned_nodes()))
        return journal
    plan = journal.plan
    for b in plan.batches:
        log.info("%s: %s", b.label, _listed(b.nodes))
    for s in plan.skipped[:LISTED]:
        log.info("skipped %s: %s", s.node, s.reason)
    log.info("plan: %d batch(es), %d node(s)%s", len(plan.batches), len(plan.nodes),
             f", {len(plan.skipped)} skipped" if plan.skipped else "")
    return journal


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

    The run ends Completed when every batch is done, Failed (message naming the nodes and the
    reason) when the rollout halted or was reverted, Cancelled when it was stopped. Approval
    gates pause the run; answer them in the UI or with ``rollout approve/reject``.
    """
    name, pol = run_inputs(name=name, config=config, configmap=configmap, policy=policy,
                           node_selector=node_selector, time_scale=time_scale)
    tag_flow_run(rollout=name, policy=pol.name)
    params = dict(name=name, config=config, configmap=configmap, policy=policy, node_selector=node_selector,
                  kubeconfig=kubeconfig, context=context, skip_validation=skip_validation, prometheus=prometheus,
                  prometheus_token_file=prometheus_token_file, prometheus_ca_file=prometheus_ca_file,
                  time_scale=time_scale)
    metrics = metrics_source(pol, address=prometheus, token_file=prometheus_token_file, ca_file=prometheus_ca_file)
    _log_analysis(pol, metrics)
    with gateway_and_lock(name, pol, kubeconfig=kubeconfig, context=context, stop=STOP) as (gateway, lock):
        # the nodes are listed once: the plan is made from that list, and the live view the engine
        # decides on watches on from it, following the cluster while the config is prepared
        listing = gateway.listing()
        informer = gateway.informer(seed=listing)
        informer.start()
        try:
            observations = {o.name: o for o in listing.nodes}
            prepared = prepare_config(gateway, name=name, policy=pol, observations=observations, config=config,
                                      configmap=configmap, validate=not skip_validation, kubeconfig=kubeconfig)
            tag_flow_run(config=prepared.target.name)
            journal, rv = plan_rollout(gateway, name=name, policy=pol, prepared=prepared, observations=observations,
                                       retry=retry)
            supersede_gates(name)
            shell = PrefectShell(name, prepared=prepared, approval_poll_s=approval_poll_seconds, flow_params=params,
                                 evidence=gateway)
            try:
                result = run_engine(engine_for(gateway, lock, informer, journal=journal, journal_rv=rv, shell=shell,
                                               policy=pol, metrics=metrics, kubeconfig=kubeconfig, context=context))
            finally:
                shell.close()
        finally:
            informer.stop()
    return finish(shell, result)


def _log_analysis(policy: RolloutPolicy, metrics: MetricsSource | None) -> None:
    if metrics is not None:
        get_run_logger().info("analysis: %d check(s), asking Prometheus at %s", len(policy.analysis.checks),
                              metrics.address)


# ------------------------------------------------------------------------------ a head start


@flow(name="kubelet-config-rollout", flow_run_name=run_name, log_prints=False)
@refuses_quietly
def attach(
    head_start: str,
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
) -> RunEnd:
    """The flow run of a rollout this process began ahead of it (``flows.head_start.start_ahead``):
    it reports what was prepared and planned, then shows and answers everything the engine does,
    to the end."""
    head = HEAD_STARTS.pop(head_start)
    name, pol = run_inputs(name=name, config=config, configmap=configmap, policy=policy,
                           node_selector=node_selector, time_scale=time_scale)
    tag_flow_run(rollout=name, policy=pol.name)
    params = dict(name=name, config=config, configmap=configmap, policy=policy, node_selector=node_selector,
                  kubeconfig=kubeconfig, context=context, skip_validation=skip_validation, prometheus=prometheus,
                  prometheus_token_file=prometheus_token_file, prometheus_ca_file=prometheus_ca_file,
                  time_scale=time_scale)
    started = head.started()
    _log_analysis(pol, started.metrics)
    prepared = prepared_ahead(started.prepared, name=name, policy=pol)
    tag_flow_run(config=prepared.target.name)
    planned_ahead(started.journal, started.resumed, name=name)
    supersede_gates(name)
    shell = PrefectShell(name, prepared=prepared, approval_poll_s=approval_poll_seconds, flow_params=params,
                         evidence=started.evidence)
    freeze_more()  # attached: what Prefect built for this flow run lives as long as the loop (flows.heap)
    try:
        return finish(shell, head.relay.serve(shell, head.ended))
    finally:
        shell.close()


def finish(shell: PrefectShell, result: RunResult) -> RunEnd:
    """The flow run's end: report, Prefect event, and the state of its outcome (a named state, not
    an exception, when it did not complete: see ``flows.outcome``)."""
    log = get_run_logger()
    journal = result.journal
    outcome = result.outcome
    if outcome is Outcome.STOPPED:
        log.warning(result.message)
        return ended(outcome, result.message)
    if outcome is Outcome.DEFERRED:
        message = f"{result.message}; flow run {shell.deferred_to} continues the rollout"
        return ended(outcome, message, continued_by=shell.deferred_to)
    failed = dict(result.failed)
    details = "; ".join(f"{n}: {why}" for n, why in sorted(failed.items())[:10])
    message = result.message + (f" ({details})" if details and details not in result.message else "")
    report = shell.report(result, outcome=outcome.value, message=message)
    if outcome is Outcome.COMPLETED:
        events.emit_rollout_event(events.ROLLOUT_COMPLETED, shell.name, {
            "target": str(journal.target), "nodes": len(journal.plan.nodes), "batches": len(journal.plan.batches)})
        log.info("rollout %s completed: %s", shell.name, result.message)
        return ended(outcome, result.message, report=report, target=str(journal.target),
                     batches=[list(b.nodes) for b in journal.plan.batches],
                     skipped={n: r.skipped for n, r in journal.nodes.items() if r.skipped})
    events.emit_rollout_event(events.ROLLOUT_HALTED, shell.name, {
        "outcome": outcome.value, "reason": result.message, "failed": failed, "target": str(journal.target)})
    log.error("rollout %s %s: %s", shell.name, outcome, message)
    return ended(outcome, message, nodes=sorted(failed), report=report)
