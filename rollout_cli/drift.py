"""`rollout drift`: does every node still run what its last completed rollout proved?

The judgement is the core's (``rollout.drift``, read by ``rollout.usecases.drift``); here the
command: the table or the JSON (schemas/drift.json), the ``KubeletConfigDrift`` Events, the exit
code, and ``--fix``, which starts a rollout of the proved config to the drifted nodes alone,
exactly as `rollout start` runs one (``rollout_cli.runs.execute``: the same display, report and
exit codes).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.markup import escape

from rollout import flags
from rollout_cli import runs
from rollout_cli.base import (
    EXIT_CLUSTER,
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    ContextOpt,
    KubeconfigOpt,
    Output,
    OutputOpt,
    PolicyOpt,
    SelectorOpt,
    checked,
    emit,
    open_cluster,
)
from rollout_cli.console import err, fail, out, table

if TYPE_CHECKING:
    from rollout.drift import NodeDrift

FIX_PREFIX = "drift-fix-"


def drift(
    selector: Optional[str] = SelectorOpt,
    policy: Optional[str] = PolicyOpt,
    fix: bool = typer.Option(False, "--fix", help="Start a rollout of the proved config to the drifted nodes only, "
                             "under --policy (required), as `rollout start` runs it (its exit codes)."),
    configmap: Optional[str] = typer.Option(
        None, "--configmap", callback=checked(flags.configmap_ref),
        help="With --fix, when the drifted nodes were proved by different configs: the one to roll out "
             "again (NAMESPACE/NAME), to the nodes it proved."),
    name: Optional[str] = typer.Option(None, "--name", callback=checked(flags.rollout_name),
                                       help="With --fix: the fix rollout's name (default: drift-fix-<UTC time>)."),
    events: bool = typer.Option(True, "--events/--no-events",
                                help="Record a KubeletConfigDrift Event on each drifted node."),
    time_scale: Optional[float] = runs.TimeScaleOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    prometheus: Optional[str] = runs.PrometheusOpt,
    prometheus_token_file: Optional[str] = runs.PrometheusTokenOpt,
    prometheus_ca_file: Optional[str] = runs.PrometheusCaOpt,
    output: Output = OutputOpt,
) -> None:
    """Does every node still run the config its last completed rollout proved? Exit 1 if any drifted.

    For each node the policy's selector picks (or -l's), the config the most recent completed rollout
    left it on (from the journals in the cluster) against its kubelet's running config
    (configz), field by field (only the fields that config sets); on Dynamic Kubelet Config
    nodes also whether spec.configSource still names it. A node no completed rollout reached is
    unmanaged (reported, not drift). Exit 0 when every managed node is in sync, 1 when any
    drifted, 3 when the cluster (or a node's configz) cannot be read. Costs one configz read per
    managed node, through the client's rate limit: the policy's apiQps/apiBurst (--policy, or
    the default policy's). With --fix: exit codes as `rollout start`."""
    from rollout.drift import DriftState, counts
    from rollout.usecases import selected_policy
    from rollout.usecases.drift import drift_report, record_drift_events

    if fix and policy is None:
        fail(EXIT_INVALID, "--fix: name the policy the fix rollout runs under with --policy (canary, cautious, fast "
                           "or a file)")
    if not fix and (configmap or name):
        fail(EXIT_INVALID, f"{'--configmap' if configmap else '--name'}: only with --fix")
    chosen = selected_policy(policy, selector)
    gateway = open_cluster(kubeconfig, context)
    gateway.limit_rate(chosen.api_qps, chosen.api_burst)
    results = drift_report(gateway, policy=chosen)
    recorded = record_drift_events(gateway, results) if events else 0
    tally = counts(results)
    code = (EXIT_FAILED if tally[DriftState.DRIFTED.value] else
            EXIT_CLUSTER if tally[DriftState.UNREACHABLE.value] else EXIT_OK)
    data = {"ok": code == EXIT_OK, "exit_code": code, "counts": tally, "events": recorded,
            "nodes": [r.as_json() for r in results]}
    if not fix:
        emit(data, output, lambda: _show(results, tally))
        raise typer.Exit(code)
    if output == Output.table:
        _show(results, tally)
    _fix(results, policy=policy, selector=selector, configmap=configmap, name=name, time_scale=time_scale, kubeconfig=kubeconfig,
         context=context, prometheus=runs.prometheus_address(prometheus, prometheus_token_file, prometheus_ca_file),
         output=output, nothing=data)


def _fields(r: NodeDrift) -> str:
    if r.fields:
        return "; ".join(str(f) for f in r.fields)
    return r.reason


def _show(results: list[NodeDrift], tally: dict[str, int]) -> None:
    t = table("node", "state", "fields", "proved by", prose=("fields", "proved by"))
    for r in results:
        proof = f"{r.proof.rollout} ({r.proof.configmap})" if r.proof else ""
        t.add_row(r.node, r.state.value, _fields(r), proof)
    out.print(t if results else "no nodes")
    said = ", ".join(f"{n} {state}" for state, n in tally.items() if n)
    out.print(f"{len(results)} node(s): {said or 'none'}", highlight=False, soft_wrap=True)


def _fix(results: list[NodeDrift], *, policy: Optional[str], selector: Optional[str], configmap: Optional[str], name: Optional[str],
         time_scale: Optional[float], kubeconfig: Optional[str], context: Optional[str], prometheus: Any,
         output: Output, nothing: dict[str, Any]) -> None:
    """Roll the proved config out to the drifted nodes (those a rollout can bring back)."""
    from rollout.drift import fix_plan
    from rollout.run import rollout_request
    from rollout.usecases.drift import publish_fix_config

    plan = fix_plan(results, configmap=configmap)
    for node, why in plan.left_out:
        err.print(f"not fixed: {node}: {escape(why)}", highlight=False, soft_wrap=True)
    if plan.proof is None or not plan.nodes:
        said = "no drifted node to fix" if not plan.left_out else "no drifted node a rollout can fix"
        if output == Output.table:
            out.print(said, highlight=False)
        else:
            emit(nothing, output)
        raise typer.Exit(EXIT_FAILED if plan.left_out else EXIT_OK)
    rollout = name or FIX_PREFIX + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    gateway = open_cluster(kubeconfig, context)
    target = publish_fix_config(gateway, plan.proof, rollout=rollout)
    err.print(f"fixing {len(plan.nodes)} node(s) ({', '.join(plan.nodes)}): rollout {rollout} of the config rollout "
              f"{plan.proof.rollout} proved ({plan.proof.configmap}, published again as {target.namespace}/"
              f"{target.name})", highlight=False, soft_wrap=True)
    for node, files in plan.set_aside:
        err.print(f"{node}: its agent sets aside {', '.join(files)} (read after our drop-in, overriding the proved "
                  "config) into set-aside/ of its state dir", highlight=False, soft_wrap=True)
    request = rollout_request(name=rollout, configmap=f"{target.namespace}/{target.name}", policy=policy,
                              node_selector=selector, node_names=plan.nodes, time_scale=time_scale, prometheus=prometheus,
                              kubeconfig=runs.kubeconfig_path(kubeconfig), context=context)
    runs.execute(request, deployment=None, wait=True, output=output)


def register(app: typer.Typer) -> None:
    app.command()(drift)
