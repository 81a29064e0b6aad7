"""`rollout fleet plan|identify|validate|start|status|approve|reject|abort`: one kubelet config across many clusters.

The same contract as the single-cluster commands: the exit code of the run's outcome
(``rollout.outcome``), one JSON Schema per ``-o json`` output (``schemas/fleet-*.json``), and bad
input as one message naming the file, the line and the field (exit 2), never a traceback.

A fleet runs its clusters on Prefect workers, so everything but ``plan`` needs the Prefect API
those workers poll (``PREFECT_API_URL``). No command here opens a cluster: `status` reads the
fleet from Prefect, and each cluster's rollout is looked at in its cluster with `rollout status
<fleet rollout>-<cluster>` (with that cluster's credentials).
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from rollout import flags
from rollout.errors import ConfigError, FlagError
from rollout.inputs import read_input
from rollout.outcome import Outcome
from rollout_cli.base import (EXIT_CLUSTER, EXIT_INVALID, EXIT_NOT_FOUND, ContextOpt, KubeconfigOpt, Output, OutputOpt,
                              checked, emit, open_cluster)
from rollout_cli.console import fail, err, out, print_markdown, table
from rollout_cli.help import RolloutTyper
from rollout_cli.watch import ChangePrinter

if TYPE_CHECKING:
    from flows.outcome import RunOutcome

app = RolloutTyper(name="fleet", no_args_is_help=True,
                  help="Fleet rollouts: a canary cluster, then stages of clusters, each cluster's rollout run by a "
                       "Prefect worker that holds only that cluster's credentials.")

FleetOpt = typer.Option(..., "--fleet", "-f", help="The fleet file (clusters, stages, policies; README: Fleet).")
WHO = typer.Option(None, "--by", callback=checked(flags.person),
                   help="Who asks (default: $USER); recorded in the fleet's journal.")
DEFAULT_DEPLOYMENTS = ("kubelet-config-rollout/rollout", "kubelet-config-rollback/rollback")


def _needs_prefect_server() -> None:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()  # the environment or the active Prefect profile
    if not url:
        fail(EXIT_INVALID, "a fleet runs its clusters on Prefect workers: set PREFECT_API_URL to the Prefect server "
                            "they poll (README: Fleet)")
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=10):
            pass
    except urllib.error.HTTPError:
        pass  # it answers (a Cloud workspace may want a key even here): Prefect's client takes it from there
    except (OSError, ValueError) as exc:  # refused, unknown host, timeout, not a URL
        reason = getattr(exc, "reason", exc)
        fail(EXIT_CLUSTER, f"the Prefect server at PREFECT_API_URL={url} does not answer ({reason}); start it, or "
                            "point PREFECT_API_URL at the server the workers poll")


@app.command("plan")
def plan(fleet: Path = FleetOpt, output: Output = OutputOpt) -> None:
    """The stages of a fleet file, in order, with each cluster's work pool and policy (nothing runs)."""

    def body() -> None:
        from rollout.fleet import load_fleet

        data = load_fleet(fleet).to_json()

        def show() -> None:
            t = table("#", "stage", "clusters (work pool, policy)", "running at once", "then",
                      prose=("clusters (work pool, policy)", "then"), title=f"fleet {data['name']}: failure budget {data['failure_budget']}, failure action "
                            f"{data['failure_action']}" + _budget_words(data["disruption_budget"]))
            for s in data["stages"]:
                then = ", ".join(filter(None, [f"soak {s['soak']}" if s["soak"] != "0s" else "",
                                               "approval" if s["approval_after"] else ""]))
                t.add_row(str(s["index"]), s["name"], ", ".join(f"{c['name']} ({c['work_pool']}, {c['policy']})"
                                                                for c in s["clusters"]),
                          str(s["max_concurrent"]), then)
            out.print(t)

        emit(data, output, show)

    body()


@app.command("identify")
def identify(kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
             output: Output = OutputOpt) -> None:
    """What identifies the cluster a kubeconfig reaches (server, CA fingerprint, kube-system UID):
    the `identity` block of its entry in a fleet file (reads one object, writes nothing)."""
    gateway = open_cluster(kubeconfig, context)
    try:
        data = gateway.cluster_identity().given()
    finally:
        gateway.close()
    emit(data, output, lambda: out.print(yaml.safe_dump({"identity": data}, sort_keys=False).rstrip(),
                                         highlight=False, soft_wrap=True))


@app.command("validate")
def validate(fleet: Path = FleetOpt, timeout: int = typer.Option(
        120, "--timeout", min=1, max=3600, help="Seconds each pool's worker has to run its probe."),
        output: Output = OutputOpt) -> None:
    """Before a fleet starts: the fleet file and its policies, then, through each work pool, whether
    its workers reach the cluster the file names for it (a probe that reads one object and writes
    nothing). Exit 0 if every cluster answers as named, 3 if any worker reaches another cluster
    or none ran the probe in time."""
    from rollout.fleet import load_fleet

    plan = load_fleet(fleet)
    _needs_prefect_server()
    from flows.fleet.identity import PROBE_DEPLOYMENT, probe_clusters
    from flows.fleet.runs import pool_deployments

    pool_deployments(plan, [PROBE_DEPLOYMENT])
    results = probe_clusters(plan, timeout_s=timeout)
    data = {"name": plan.name, "valid": all(r.ok for r in results),
            "clusters": [{"cluster": r.cluster, "work_pool": r.work_pool, "ok": r.ok, "message": r.message,
                          "nodes": r.nodes} for r in results]}

    def show() -> None:
        t = table("cluster", "pool", "reaches", "message", prose=("message",),
                  title=f"fleet {plan.name}: {'every worker reaches its cluster' if data['valid'] else 'refused'}")
        for r in results:
            t.add_row(r.cluster, r.work_pool, "yes" if r.ok else "[red]no[/red]", escape(r.message))
        out.print(t)

    emit(data, output, show)
    if not data["valid"]:
        raise typer.Exit(EXIT_CLUSTER)


@app.command("start")
def start(
    fleet: Path = FleetOpt,
    name: str = typer.Option(..., "--name", callback=checked(flags.fleet_rollout_name), help="The fleet rollout's name (re-use it to resume); each cluster's "
                                                 "rollout is <name>-<cluster>."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="KubeletConfiguration file."),
    configmap: Optional[str] = typer.Option(None, "--configmap", callback=checked(flags.configmap_ref),
                                            help="Published in every cluster: NAMESPACE/NAME."),
    deployment: Optional[str] = typer.Option(None, "--deployment", callback=checked(flags.deployment),
                                             help="Run the fleet flow on this deployment (e.g. "
                                                  "kubelet-config-fleet-rollout/fleet) instead of here."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="With --deployment: follow the run to its end."),
    output: Output = OutputOpt,
) -> None:
    """Roll a config across the fleet. Exit 0 only when every stage completed; 1 when it halted,
    was reverted or rejected; 130 when stopped (the clusters' runs under way go on; run it again)."""
    params = _start_params(fleet, name, config, configmap)
    _needs_prefect_server()
    outcome = _run(params, deployment=deployment, wait=wait, output=output)
    if outcome is None:
        return
    data = _run_json(name, outcome)
    if output == Output.table:
        _print_clusters(data.get("fleet"))
        colour = "green" if outcome.ok else "yellow" if outcome.outcome is Outcome.STOPPED else "red"
        out.print(f"[{colour}]fleet {name}: {outcome.outcome}[/{colour}]: {escape(data['message'])}",
                  highlight=False, soft_wrap=True)
        if outcome.hint:
            err.print(f"  hint: {escape(outcome.hint)}", highlight=False, soft_wrap=True)
    else:
        emit(data, output)
    raise typer.Exit(outcome.outcome.exit_code)


def _start_params(fleet: Path, name: str, config: Optional[Path], configmap: Optional[str]) -> dict[str, Any]:
    """Everything wrong with the input fails here, one message naming the file, before any run."""
    from rollout.fleet import check_rollout_name, load_fleet, portable_fleet_text
    from rollout.usecases import refuse_invalid_config

    plan = load_fleet(fleet)
    check_rollout_name(name, plan)
    if (config is None) == (configmap is None):
        raise FlagError("give exactly one of --config FILE or --configmap NAMESPACE/NAME", source="--config")
    text = read_input(config, error=ConfigError) if config else None
    if text is not None:
        for policy in {c.policy for c in plan.clusters.values()}:
            refuse_invalid_config(text, source=str(config), policy_ref=policy, suffix=": no cluster was started")
    return {"name": name, "fleet": portable_fleet_text(fleet), "config": text, "configmap": configmap}


def _run(params: dict[str, Any], *, deployment: Optional[str], wait: bool, output: Output) -> RunOutcome | None:
    from flows.outcome import RunOutcome
    from rollout_cli import runs

    if deployment:
        from prefect.client.schemas.objects import FlowRun
        from prefect.deployments import run_deployment

        run = run_deployment(deployment, parameters={k: v for k, v in params.items() if v is not None},
                             timeout=None if wait else 0, as_subflow=False)
        assert isinstance(run, FlowRun)  # called outside an event loop, it answers at once
        if not wait:
            emit(runs.submitted(params["name"], deployment, run, None), output,
                 lambda: out.print(f"started flow run {run.name} ({run.id})", highlight=False))
            return None
        return RunOutcome.from_flow_run(run)
    from flows.fleet.flow import kubelet_config_fleet_rollout

    with runs.stop_on_signals():
        state = runs.off_the_main_thread(lambda: kubelet_config_fleet_rollout(**params, return_state=True))
    return RunOutcome.from_state(state)


def _run_json(name: str, outcome: RunOutcome) -> dict[str, Any]:
    """schemas/fleet-run.json: how the run ended, and the fleet as `rollout fleet status` shows it."""
    from flows.fleet.status import fleet_status
    from rollout.errors import RolloutError

    try:
        fleet: Any = fleet_status(name)
    except RolloutError:
        fleet = None  # refused before it had a journal
    # a completed run on a deployment keeps its message in its result, stored by its worker
    message = outcome.message or (fleet["message"] if fleet else "")
    return {"name": name, "outcome": outcome.outcome.value, "ok": outcome.ok,
            "exit_code": outcome.outcome.exit_code, "message": message,
            "flow_run_id": outcome.flow_run_id or None, "flow_run_name": outcome.flow_run_name or None,
            "fleet": fleet}


# `status --watch` ends when the fleet does (stopped: nothing drives it until it is run again)
ENDED = frozenset({o.value for o in Outcome} | {"stopped"})


def _print_clusters(data: Optional[dict[str, Any]]) -> None:
    if data:
        out.print(_clusters_table(data))


def _budget_words(given: int | str | None) -> str:
    if given is None:
        return ""
    return f", disruption budget {given} of the fleet's nodes" if isinstance(given, str) else \
        f", disruption budget {given} node(s)"


def _clusters_table(data: dict[str, Any]) -> Table:
    budget = data.get("disruption_budget")
    share = (f" ({budget['given']} of {budget['fleet_nodes']})"
             if budget and isinstance(budget.get("given"), str) and budget.get("fleet_nodes") is not None else "")
    held = f"; disruption budget: {budget['in_use']}/{budget['limit']} node(s) changing{share}" if budget else ""
    t = table("cluster", "stage", "pool", "phase", "batch", "nodes done", "flow run", "message", prose=("message",),
              title=f"fleet {data['name']}: {data['state']}{held}")
    for row in data["clusters"]:
        t.add_row(row["cluster"], row["stage_name"], row["work_pool"], row["phase"], _batch_of(row), _nodes_of(row),
                  row["flow_run_name"] or "", escape(row["message"] or ""))
    return t


def _batch_of(row: dict[str, Any]) -> str:
    """A cluster's batch, ``2/3`` (empty before it has a plan)."""
    return f"{row['batch']}/{row['batches']}" if row["batches"] else ""


def _nodes_of(row: dict[str, Any], unit: str = "") -> str:
    """A cluster's nodes done, ``3/8, 1 failed`` (``3/8 nodes, 1 failed`` with ``unit``; empty
    before it has a plan)."""
    if row["nodes"] is None:
        return ""
    return f"{row['done']}/{row['nodes']}{unit}" + (f", {row['failed']} failed" if row["failed"] else "")


@app.command("status")
def status(
    name: str = typer.Argument(..., callback=checked(flags.fleet_rollout_name), help="The fleet rollout's name."),
    output: Output = OutputOpt,
    watch: bool = typer.Option(False, "--watch", "-w", help="Follow it to its end, and exit with its outcome's code (one line per change when piped)."),
) -> None:
    """Every cluster of a fleet rollout: stage, phase, batch, nodes done/failed, flow run (from Prefect)."""
    _needs_prefect_server()

    def body() -> None:
        from flows.fleet.status import fleet_status

        data = fleet_status(name)
        if watch:  # its exit code says how the fleet ended, as `rollout status --watch`'s
            raise typer.Exit(Outcome(_follow(name, data, output)).exit_code)
        def show() -> None:
            _print_clusters(data)
            if data["message"]:
                out.print(escape(data["message"]), highlight=False, soft_wrap=True)

        emit(data, output, show)

    body()


FOLLOW_EVERY_S = 2.0


def _follow(name: str, data: dict[str, Any], output: Output) -> str:
    """``status --watch`` until the fleet ends: a live table on a terminal; piped, a line (or a
    JSON/YAML document) per change, as `rollout status --watch` prints; the state it ended in.
    Before: piped, it printed nothing until the fleet ended, and with ``-o json`` one document and
    no watch at all."""
    from flows.fleet.status import fleet_status

    def follow(show: Callable[[dict[str, Any]], None]) -> str:
        look = data
        show(look)
        while look["state"] not in ENDED:
            time.sleep(FOLLOW_EVERY_S)
            look = fleet_status(name)
            show(look)
        return str(look["state"])

    if output == Output.table and out.is_terminal:
        from rich.live import Live

        with Live(console=out, refresh_per_second=1) as live:
            return follow(lambda look: live.update(_clusters_table(look)))
    return follow(ChangePrinter(output, fleet_line))


def fleet_line(data: dict[str, Any]) -> str:
    """A fleet in one line (what changes between two looks): each cluster's phase, batch and
    nodes, every name whole."""
    def cluster(row: dict[str, Any]) -> str:
        batch = f" batch {_batch_of(row)}" if row["batches"] else ""
        nodes = f" {_nodes_of(row, ' nodes')}" if row["nodes"] is not None else ""
        return f"{row['cluster']} {row['phase']}{batch}{nodes}"

    clusters = "; ".join(cluster(row) for row in data["clusters"])
    message = f"  {data['message']}" if data.get("message") else ""
    return f"fleet {data['name']}: {data['state']}  {clusters}{message}"


def _answer(name: Optional[str], approved: bool, approver: Optional[str], comment: str, output: Output) -> None:
    from flows.approval import answer_gate, pending_gates
    from flows.fleet.shell import fleet_key

    gates = [g for g in pending_gates(name) if g.gate.startswith(fleet_key(g.rollout, "stage"))]
    if name is None or not gates:
        data = [{"rollout": g.rollout, "gate": g.gate, "flow_run_id": str(g.flow_run_id), "flow_run": g.flow_run_name}
                for g in gates]
        def show() -> None:
            if not gates:
                out.print("no fleet waits for approval")
            for g in gates:  # each gate's evidence: rendered on a terminal, the markdown itself piped
                out.print(f"{g.rollout}: {g.gate} (flow run {g.flow_run_name})", highlight=False, soft_wrap=True)
                print_markdown(out, g.description)

        emit(data, output, show)
        if name is not None:
            err.print(f"no gate of fleet {name} waits for approval", highlight=False)
            raise typer.Exit(EXIT_NOT_FOUND)
        return
    gate = gates[-1]
    who = approver or os.environ.get("USER") or "cli"
    answer_gate(gate.flow_run_id, approved=approved, approver=who, comment=comment)
    verb = "approved" if approved else "rejected"
    emit({"rollout": gate.rollout, "gate": gate.gate, "flow_run_id": str(gate.flow_run_id), "answer": verb,
           "approver": who, "comment": comment}, output,
          lambda: out.print(f"{verb} fleet {gate.rollout} gate {gate.gate} (flow run {gate.flow_run_name})",
                            highlight=False))


@app.command("approve")
def approve(
    name: Optional[str] = typer.Argument(None, callback=checked(flags.fleet_rollout_name),
                                        help="The fleet rollout; without it, list the fleets waiting."),
    approver: Optional[str] = typer.Option(None, "--approver", callback=checked(flags.person),
                                           help="Who approves (default: $USER)."),
    comment: str = typer.Option("", "--comment", "-m", callback=checked(flags.comment)),
    output: Output = OutputOpt,
) -> None:
    """Approve the next stage of a fleet waiting at its gate (its description shows each cluster's evidence)."""
    _needs_prefect_server()
    _answer(name, True, approver, comment, output)


@app.command("reject")
def reject(
    name: Optional[str] = typer.Argument(None, callback=checked(flags.fleet_rollout_name),
                                        help="The fleet rollout; without it, list the fleets waiting."),
    approver: Optional[str] = typer.Option(None, "--approver", callback=checked(flags.person),
                                           help="Who rejects (default: $USER)."),
    comment: str = typer.Option("", "--comment", "-m", callback=checked(flags.comment)),
    output: Output = OutputOpt,
) -> None:
    """Reject the next stage: the fleet does what its approval.onReject says (halt, or its failure action)."""
    _needs_prefect_server()
    _answer(name, False, approver, comment, output)


@app.command("abort")
def abort(name: str = typer.Argument(..., callback=checked(flags.fleet_rollout_name), help="The fleet rollout."),
          by: Optional[str] = WHO,
          output: Output = OutputOpt) -> None:
    """Stop the fleet now: its cluster runs under way are cancelled (each rollout stops where it is,
    resumable), no cluster starts, and the fleet's failure action applies (halt, or roll back)."""
    _needs_prefect_server()

    def body() -> None:
        from flows.fleet.store import post_abort, read_journal

        loaded = read_journal(name)
        if loaded is not None and loaded[0].finished:  # refused as `rollout abort` refuses an ended rollout
            fail(EXIT_INVALID, f"abort refused: fleet rollout {name} has ended ({loaded[0].outcome}): there is "
                                f"nothing to abort\n  hint: `rollout fleet status {name}` shows how each cluster "
                                f"ended; `rollout rollback {name}-CLUSTER`, with that cluster's credentials, undoes "
                                "one cluster's rollout")
        who = by or os.environ.get("USER") or "cli"
        request = post_abort(name, by=who, request_id=uuid.uuid4().hex)
        emit({"fleet": name, "request": "abort", "by": who, "id": request.request_id}, output,
              lambda: out.print(f"abort requested for fleet {name} (by {who}); the fleet applies it within a poll",
                                highlight=False))

    body()

