"""`rollout`: the command line of kubelet-rollout (typer + rich).

This is the composition root: the only package that imports ``flows`` and ``kubesim``, and
Prefect only inside the command that needs it, so ``rollout validate`` starts fast. The process
starts in :func:`main`. Here: the commands that judge and publish a config (validate, export, diff,
plan, publish), the approval gates and the demo; ``runs`` holds start, retry and rollback,
``watch`` status, ``lifecycle`` list, pause, resume, abort and promote, ``drift`` drift.

Every value a person types passes the input boundary (``rollout.flags``, ``rollout.inputs``)
before anything starts: a bad one is one message naming the flag, and exit 2.

Exit codes (scripts rely on them) are those of the run's outcome, one table in
``rollout.outcome``: 0 completed or rolled back, 1 halted, reverted, rejected or failed, 2 invalid
input (or a request the rollout cannot take, or a kubeconfig missing or unreadable), 3 a cluster
or API problem, 4 the lock held by
another process, 5 not found, 6 deferred to the next maintenance window (deployment runs), 130
stopped by Ctrl-C or SIGTERM (the same command resumes it).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional

import typer
import yaml
from rich.markup import escape

from flows.run_logs import hide_expected_tracebacks
from rollout import flags
from rollout.errors import ConfigError, InputError, RolloutError
from rollout.inputs import read_input
from rollout_cli import fleet as fleet_commands
from rollout_cli import drift as drift_command
from rollout_cli import lifecycle, prometheus_command, runs, watch
from rollout_cli.base import (
    # noqa: F401 - EXIT_* and app are this module's interface too     ENDED_STATES,
    EXIT_CLUSTER,
    EXIT_DEFERRED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_LOCKED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    ConfigOpt,
    ContextOpt,
    KubeconfigOpt,
    Output,
    OutputOpt,
    PolicyOpt,
    SelectorOpt,
    emit,
    open_cluster,
    app,
    checked,
    complete_policies,
    complete_rollouts,
)
from rollout_cli.console import fail, err, out, print_markdown, table

if TYPE_CHECKING:
    from rollout.verdict import Verdict

# ----------------------------------------------------------------------------------- validate


# validate judges the policy itself (not at parsing, as the other commands' --policy): a refused
# one is its verdict, on stdout with -o json/yaml like a refused config
ValidatePolicyOpt = typer.Option(None, "--policy", "-p", autocompletion=complete_policies,
                                 help="A shipped policy name (canary, cautious, fast) or a policy file (default: canary).")


@app.command()
def validate(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="KubeletConfiguration file."),
    policy: Optional[str] = ValidatePolicyOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    offline: bool = typer.Option(False, "--offline",
                                 help="Judge without the cluster or the Prometheus even when they are configured."),
    prometheus: Optional[str] = runs.PrometheusOpt,
    prometheus_token_file: Optional[str] = runs.PrometheusTokenOpt,
    prometheus_ca_file: Optional[str] = runs.PrometheusCaOpt,
    time_scale: Optional[float] = typer.Option(
        None, "--time-scale", envvar="KUBELET_ROLLOUT_TIME_SCALE", callback=checked(flags.time_scale),
        help="Judge as start judges a rehearsal at xF (the policy's durations, its checks' windows among them, / F)."),
    output: Output = OutputOpt,
) -> None:
    """Would `rollout start` take this config (and/or policy)? Exit 2 if it would refuse it.

    The same verdict start gives, under the policy (the default one when none is given), against
    the cluster's nodes when a cluster is configured (--kubeconfig, --context, $KUBECONFIG), else
    offline as a whole config; and, when the policy has analysis checks, of the Prometheus they ask
    (--prometheus, $KUBELET_ROLLOUT_PROMETHEUS_URL or the policy's): named at all, and unless
    --offline, asked whether it scrapes the kubelets often enough. With -o json/yaml a refused input
    is reported on stdout too (schemas/validate.json)."""
    if config is None and policy is None:
        fail(EXIT_INVALID, "give --config FILE and/or --policy NAME_OR_FILE")

    def analysis_refusal() -> Optional[InputError]:
        refused: Optional[InputError] = (_analysis_refusal(
            policy, time_scale, prometheus, prometheus_token_file, prometheus_ca_file, probed=not offline))
        return refused

    if config is None:
        from rollout.policy import load_policy_ref

        try:
            name = load_policy_ref(policy).name
        except InputError as exc:
            _refused(exc, None, policy, output)
        refused = analysis_refusal()
        if refused is not None:
            _refused(refused, None, name, output)
        emit({"valid": True, "config": None, "policy": name, "warnings": []}, output,
              lambda: out.print(f"[green]valid[/green]: policy {name}", highlight=False))
        return
    against_nodes = not offline and (kubeconfig is not None or context is not None)
    try:
        verdict = _verdict(config, policy, kubeconfig, context, against_nodes=against_nodes)
    except InputError as exc:
        _refused(exc, str(config), policy, output)
    except RolloutError as exc:
        _raise(exc)
    data = {"config": str(config), **verdict.as_json()}
    if not verdict.valid:
        error = verdict.error(source=str(config))
        data.update(message=error.reason, problems=list(error.problems))
    refused = analysis_refusal() if verdict.valid else None
    if refused is not None:  # the config would do, the run would not: one verdict, start's
        data.update(valid=False, message=str(refused).splitlines()[0],
                    problems=list(refused.problems) or [refused.reason])
    if output != Output.table:
        emit(data, output)
    elif verdict.valid:
        default = " (--policy chooses another)" if verdict.default_policy else ""
        said = ("[green]valid[/green]: start would take it" if refused is None and not verdict.drains else
                "[green]valid[/green]: the policy's disruption section takes it" if refused is None else
                "[yellow]the config is valid[/yellow]")
        unasked = "; its analysis's Prometheus was not asked (--offline)" if offline and _has_checks(policy) else ""
        still = "; start would refuse to run it all the same (the error below)" if refused is not None else ""
        out.print(f"{said} under {escape(verdict.policy_said)}{default}; judged {escape(verdict.against)}{unasked}"
                  f"{still}", highlight=False, soft_wrap=True)
        _print_disruption({node: d.as_json() for node, d in verdict.disruption.items()}, drains=verdict.drains)
        if refused is None and verdict.drains:
            out.print(f"[yellow]note:[/yellow] {DRAINS}", highlight=False, soft_wrap=True)
        for w in verdict.warnings:
            out.print(f"[yellow]warning:[/yellow] {escape(w)}", highlight=False, soft_wrap=True)
        if refused is not None:
            _raise(refused)
    else:
        _raise(verdict.error(source=str(config)))
    if not data["valid"]:
        raise typer.Exit(EXIT_INVALID)


def _refused(exc: InputError, config: Optional[str], policy: Optional[str], output: Output) -> NoReturn:
    """A config or policy validate refuses before judging: the error, and with -o json/yaml the
    verdict on stdout too; exit 2."""
    if output == Output.table:
        _raise(exc)
    emit({"valid": False, "config": config, "policy": policy, "message": str(exc).splitlines()[0],
           "problems": list(exc.problems) or [exc.reason], "warnings": []}, output)
    raise typer.Exit(EXIT_INVALID)


def _raise(exc: BaseException) -> Any:
    raise exc


def _verdict(config: Path, policy: Optional[str], kubeconfig: Optional[str], context: Optional[str], *,
             against_nodes: bool) -> Verdict:
    from rollout.usecases import config_verdict, validate_config_text

    text = read_input(config, error=ConfigError)
    offline = validate_config_text(text, source=str(config), policy_ref=policy)
    if not against_nodes or offline.problems:  # an invalid file is refused without asking the cluster
        return offline
    return config_verdict(open_cluster(kubeconfig, context), text, policy_ref=policy, selector=None)


def _has_checks(policy: Optional[str]) -> bool:
    from rollout.policy import load_policy_ref

    return load_policy_ref(policy).analysis.enabled


def _analysis_refusal(policy: Optional[str], time_scale: Optional[float], address: Optional[str],
                      token_file: Optional[str], ca_file: Optional[str], *, probed: bool) -> Optional[InputError]:
    """Why start would refuse to run the policy's analysis checks with this Prometheus (None: it
    would not), as start judges it (``rollout.prometheus.ready_metrics_source``)."""
    from rollout.prometheus import refusal
    from rollout.usecases import selected_policy

    return refusal(selected_policy(policy, None, time_scale=time_scale), address=address, token_file=token_file,
                   ca_file=ca_file, probed=probed)


def _verdict_line(verdict: Verdict, *, analysis_refused: bool = False) -> str:
    """How diff and plan end: what `start` would say of the config (and of its analysis's
    Prometheus: plan shows why start would not run the analysis, ``analysis_refused``)."""
    if verdict.valid and analysis_refused:
        return (f"[red]start would refuse to run it[/red] under {escape(verdict.policy_said)}: the config would do, "
                "the analysis's Prometheus would not (above)")
    if verdict.valid and verdict.drains:
        return (f"[green]start would take it[/green] under {escape(verdict.policy_said)} (its disruption section): "
                f"{DRAINS}")
    if verdict.valid:
        return f"[green]start would take it[/green] under {escape(verdict.policy_said)}"
    refused = "; ".join(verdict.reasons)
    return f"[red]start would refuse it[/red] under {escape(verdict.policy_said)}: {escape(verdict.headline)}: {escape(refused)}"


# what validate, diff and plan say of a change the policy lets the rollout drain for
DRAINS = ("each node is cordoned and drained through the Eviction API before its write, and uncordoned once its "
          "batch is done (README, \"Disruption\")")


def _print_disruption(disruption: dict[str, Any], *, drains: bool) -> None:
    """What the change costs each node (``Disruption.as_json`` by node), nodes with the same cost on
    one line; the estimate's model under them, and, when the policy lets the rollout drain
    (``drains``), why each field needs it. Nothing when no node changes."""
    from rollout.kubeletconfig.disruption import NOTHING, Disruption, load_disruption_catalogue
    from rollout.kubeletconfig.dkc import DEFAULTS_BASELINE

    grouped: dict[tuple[str, str], list[str]] = {}
    for node, data in disruption.items():
        cost = Disruption.from_json(data)
        if cost.kind != NOTHING:
            deletes = f" (delete {', '.join(cost.state_files)})" if cost.state_files else ""
            grouped.setdefault((f"{cost.what}{deletes}, {cost.how_long}", ", ".join(cost.fields)), []).append(node)
    if not grouped:
        return
    for (words, fields), nodes in sorted(grouped.items()):
        shown = ", ".join(nodes[:5]) + (", ..." if len(nodes) > 5 else "")
        where = f"against {DEFAULTS_BASELINE}" if nodes == [DEFAULTS_BASELINE] else f"on {len(nodes)} node(s) [{shown}]"
        out.print(escape(f"cost {where}: {words}, for {fields}"), highlight=False, soft_wrap=True)
    out.print(f"estimates: {escape(load_disruption_catalogue().estimate_model)}", highlight=False, soft_wrap=True)
    reasons = dict.fromkeys(r for data in disruption.values() for r in data["reasons"])
    for reason in reasons if drains else ():
        out.print(f"  - {escape(reason)}", highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------- export / diff


@app.command()
def export(
    node: str = typer.Argument(..., help="Node whose running kubelet config to export.",
                               callback=checked(flags.node_name)),
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = typer.Option(Output.yaml, "-o", "--output"),
) -> None:
    """Export a node's effective kubelet config (configz) as a valid KubeletConfiguration."""

    def body() -> None:
        from rollout.usecases import export_node_config

        doc = export_node_config(open_cluster(kubeconfig, context), node)
        if output == Output.json:
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))

    body()


@app.command()
def diff(
    config: Path = ConfigOpt,
    selector: Optional[str] = SelectorOpt,
    policy: Optional[str] = PolicyOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Field-level diff of a config against each node's running config. Exit 1 if it differs, 2 if start would refuse it."""

    def body() -> None:
        from rollout.usecases import config_verdict, diff_against_nodes

        text = runs.checked_config(config, policy)  # a bad file is refused before the cluster is asked
        gateway = open_cluster(kubeconfig, context)
        verdict = config_verdict(gateway, text, policy_ref=policy, selector=selector)
        diffs = diff_against_nodes(gateway, text, policy_ref=policy, selector=selector)

        def show() -> None:
            t = table("node", "field", "active", "new", "start", prose=("active", "new", "start"))
            for node, node_diff in diffs.items():
                for change in node_diff.changes:
                    t.add_row(node, change["field"], json.dumps(change.get("old")), json.dumps(change.get("new")),
                              _start_says(change))
            out.print(t if t.row_count else "no differences")
            costs = {node: d.disruption.as_json() for node, d in diffs.items()}
            _print_disruption(costs, drains=verdict.valid and any(d.disruption.drains for d in diffs.values()))
            out.print(_verdict_line(verdict), highlight=False, soft_wrap=True)

        emit({node: d.changes for node, d in diffs.items()}, output, show)
        if not verdict.valid:
            raise typer.Exit(EXIT_INVALID)
        if any(d.changes for d in diffs.values()):
            raise typer.Exit(EXIT_FAILED)

    body()


def _start_says(change: dict[str, Any]) -> str:
    """The start column: what the rollout does with this one change (and what it costs the node,
    when more than a restart)."""
    from rollout.kubeletconfig.disruption import DRAIN_CLASSES

    cost = change.get("disruption")
    if change.get("overriddenBy"):
        return f"[red]refused[/red]: overridden by {escape(str(change['overriddenBy']))}"
    if change.get("refused"):
        return f"[red]refused[/red] ({cost}: no drain in the policy)" if cost in DRAIN_CLASSES else \
            f"[red]refused[/red] ({change.get('dkc')})"
    if cost in DRAIN_CLASSES:
        return f"{cost} (the policy's disruption section)"
    return f"allowed ({change['dkc']})" if change.get("dkc") else ""


# ------------------------------------------------------------------------------ plan/publish


@app.command()
def plan(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="KubeletConfiguration file (nodes already on it are skipped)."),
    policy: Optional[str] = PolicyOpt,
    selector: Optional[str] = SelectorOpt,
    name: str = typer.Option("preview", "--name", callback=checked(flags.rollout_name),
                             help="The rollout name: node order is a hash of it, so give the name you will start with."),
    time_scale: Optional[float] = runs.TimeScaleOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    prometheus: Optional[str] = runs.PrometheusOpt,
    prometheus_token_file: Optional[str] = runs.PrometheusTokenOpt,
    prometheus_ca_file: Optional[str] = runs.PrometheusCaOpt,
    output: Output = OutputOpt,
) -> None:
    """Show the batches, gates, windows and estimate of a rollout, and what start would say (writes nothing).

    What start would say of the config, and of the Prometheus the policy's analysis checks would ask
    (`analysis` in -o json). Exit 2 if start would refuse the config."""

    def body() -> None:
        from rollout.usecases import preview_plan

        text = runs.checked_config(config, policy) if config else None  # refused before the cluster is asked
        data = preview_plan(
            open_cluster(kubeconfig, context),
            config_text=text,
            policy_ref=policy,
            selector=selector,
            rollout=name,
            time_scale=time_scale,
        )
        data["analysis"] = _analysis_said(policy, time_scale, prometheus, prometheus_token_file, prometheus_ca_file)
        emit(data, output, lambda: _print_plan(name, data))
        if data["verdict"] is not None and not data["verdict"]["valid"]:
            raise typer.Exit(EXIT_INVALID)

    body()


def _analysis_said(policy: Optional[str], time_scale: Optional[float], address: Optional[str],
                   token_file: Optional[str], ca_file: Optional[str]) -> dict[str, Any]:
    """The plan's ``analysis``: the policy's checks, the Prometheus they would ask, and why start
    would refuse to run them (``problems``: none when it would not)."""
    from rollout.prometheus import resolve_settings
    from rollout.usecases import selected_policy

    chosen = selected_policy(policy, None, time_scale=time_scale)
    refused = _analysis_refusal(policy, time_scale, address, token_file, ca_file, probed=True)
    asked = resolve_settings(address=address or "", policy=chosen.analysis.prometheus).address
    return {"checks": [c.name for c in chosen.analysis.checks], "prometheus": asked or None,
            "problems": [] if refused is None else [str(refused).splitlines()[0], *refused.problems]}


def _print_plan(name: str, data: dict[str, Any]) -> None:
    from rollout.kubeletconfig.disruption import Disruption

    rehearsal = f", a rehearsal at x{data['time_scale']:g} (durations divided)" if data.get("time_scale", 1) != 1 else ""
    gates = data["gates"]
    out.print(f"plan of {name}: policy {data['policy']}, {len(data['batches'])} batch(es), estimated "
              f"{_estimate_words(data)}{rehearsal}", highlight=False, soft_wrap=True)
    t = table("#", "batch", "nodes", "then", prose=("nodes", "then"))
    for b in data["batches"]:
        then = f"approval gate (waits {gates['timeout']}, then {gates['on_timeout']})" if b["approval_after"] else ""
        t.add_row(str(b["index"]), b["label"], ", ".join(b["nodes"]), then)
    out.print(t)
    main_file = [n for b in data["batches"] for n, w in zip(b["nodes"], b.get("writes") or ()) if w == "main-file"]
    if main_file:  # kubelets without a drop-in directory: the agent writes their whole --config file
        out.print(f"main-file backend (the whole --config file; no drop-in directory): {', '.join(main_file)}; "
                  "every other agent node takes a drop-in", highlight=False, soft_wrap=True)
    windows = data["windows"]
    if windows["windows"]:
        spans = "; ".join(_window_words(w) for w in windows["windows"])
        now = "open now" if windows["open_now"] else f"closed now: the first batch may start {windows['next_open']}"
        out.print(f"maintenance windows ({windows['timezone']}): {spans}; {now}", highlight=False, soft_wrap=True)
    else:
        out.print("maintenance windows: none (a batch may start at any time)", highlight=False)
    for s in data["skipped"]:
        out.print(f"skipped {s['node']}: {s['reason']}", highlight=False, soft_wrap=True)
    if data["changes"]:
        out.print(_changes_table(data["changes"]))
    costs = {node: Disruption.from_json(d) for node, d in data["disruption"].items()}
    valid = data["verdict"] is not None and data["verdict"]["valid"]
    _print_disruption(data["disruption"], drains=valid and any(c.drains for c in costs.values()))
    analysis = data["analysis"]
    if analysis["checks"]:
        checks = f"analysis: {len(analysis['checks'])} check(s) ({', '.join(analysis['checks'])})"
        if analysis["problems"]:
            out.print(f"{checks}; start would refuse to run them: {escape(analysis['problems'][0])}", highlight=False,
                      soft_wrap=True)
            for problem in analysis["problems"][1:]:
                out.print(f"  - {escape(problem)}", highlight=False, soft_wrap=True)
            from rollout.prometheus import NAME_ONE

            out.print(f"  hint: {NAME_ONE}", highlight=False, soft_wrap=True)
        else:
            out.print(f"{checks}, asking the Prometheus at {analysis['prometheus']}: it can measure them",
                      highlight=False, soft_wrap=True)
    if data["verdict"] is not None:
        from rollout.verdict import Verdict

        verdict = data["verdict"]
        said = Verdict(policy=verdict["policy"], default_policy=verdict["default_policy"], against=verdict["against"],
                       problems=tuple(verdict["problems"]), refusals=tuple(verdict["refusals"]),
                       drain_refusals=tuple(verdict["drain_refusals"]), merged_problems=tuple(verdict["merged_problems"]),
                       reset_refusals=tuple(verdict["reset_refusals"]),
                       disruption=costs)
        out.print(_verdict_line(said, analysis_refused=bool(analysis["problems"])), highlight=False, soft_wrap=True)


def _estimate_words(data: dict[str, Any]) -> str:
    """``4m49s``; with waits for maintenance windows ``31h4m49s (4m49s of batches, the rest waiting
    for maintenance windows: the first batch can start at ..., done about ...)``. The time people
    take at approval gates is theirs: said, not counted."""
    said = str(data["estimate"])
    if data["batches"] and data["starts_at"] is None:
        said = f"{data['work']} of batches, but no maintenance window ever opens"
    elif data["estimate_seconds"] > data["work_seconds"]:
        said = (f"{data['estimate']} ({data['work']} of batches, the rest waiting for maintenance windows: the first "
                f"batch can start at {data['starts_at']}, done about {data['ends_at']})")
    if data["gates"]["after_batches"]:
        said += ", plus the time people take at the approval gates"
    return said


def _window_words(window: dict[str, Any]) -> str:
    """``mon, tue 08:00-16:00`` or ``cron '30 22 * * mon-fri' for 2h``."""
    if window.get("cron"):
        return f"cron {window['cron']!r} for {window.get('duration')}"
    return f"{', '.join(window.get('days', []))} {window.get('start')}-{window.get('end')}"


def _changes_table(changes: dict[str, list[dict[str, Any]]]) -> Any:
    """One row per field change, naming the nodes it applies to (most clusters: all of them)."""
    grouped: dict[tuple[str, str, str, str], list[str]] = {}
    for node, node_changes in changes.items():
        for change in node_changes:
            key = (change["field"], json.dumps(change.get("old")), json.dumps(change.get("new")), _start_says(change))
            grouped.setdefault(key, []).append(node)
    t = table("field", "running", "new", "start", "nodes", prose=("running", "new", "start", "nodes"), title="changes")
    for (field_path, old, new, says), nodes in sorted(grouped.items()):
        shown = ", ".join(nodes) if len(nodes) <= 5 else f"{len(nodes)} nodes"
        t.add_row(field_path, old, new, says, shown)
    return t


@app.command()
def publish(
    config: Path = ConfigOpt,
    namespace: str = typer.Option("kube-system", "--namespace", "-n", callback=checked(flags.namespace)),
    name: Optional[str] = typer.Option(None, "--name", callback=checked(flags.rollout_name),
                                       help="Rollout name for the event-triggered deployment (default: the ConfigMap name)."),
    policy: Optional[str] = PolicyOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Publish a config start would take as an immutable content-hash ConfigMap (no-op if it exists).

    Judged under the policy, against the nodes, as start judges it. Emits the Prefect event kubelet-rollout.config.published when a Prefect API is configured
    (PREFECT_API_URL) and the config was not published before, which starts the
    `rollout-on-publish` deployment.
    """

    def body() -> None:
        from rollout.policy import DEFAULT_POLICY
        from rollout.usecases import publish_config_text

        text = runs.checked_config(config, policy)  # refused before the cluster is asked
        ref, created, verdict = publish_config_text(open_cluster(kubeconfig, context), text, namespace=namespace,
                                                    source=str(config), policy_ref=policy)
        data = {
            "namespace": ref.namespace,
            "name": ref.name,
            "key": ref.kubelet_config_key,
            "uid": ref.uid,
            "resourceVersion": ref.resource_version,
            "created": created,
        }
        # only a new config starts the event-triggered deployment: publishing the same content
        # again is a no-op, and the worker uses its own credentials (no local path in the event)
        if created and os.environ.get("PREFECT_API_URL"):
            from flows.events import emit_config_published

            emit_config_published(namespace=ref.namespace, name=ref.name, rollout=name or ref.name,
                                  policy=runs.policy_param(policy) if policy else DEFAULT_POLICY, origin="cli")
            _flush_events()
        emit(data, output, lambda: out.print(
            f"{'published' if created else 'already published'}: {ref.namespace}/{ref.name} (start would take it "
            f"under {verdict.policy_said})", highlight=False, soft_wrap=True))

    body()


def _flush_events() -> None:
    from rollout_cli.local.prefect_home import drain

    drain()


runs.register(app)  # start, retry, rollback
app.command()(watch.status)

# ------------------------------------------------------------------------- approve / reject


def _answer(name: Optional[str], run_id: Optional[str], approved: bool, approver: Optional[str], comment: str,
            output: Output, cluster: tuple[Optional[str], Optional[str]] = (None, None)) -> None:
    """The gates waiting (``name``'s), or the answer to one, asked of the Prefect API the gates
    are in (``prefect_home.prefect_api``: a local run's server when one serves this PREFECT_HOME)."""
    from rollout_cli.local.prefect_home import prefect_api

    with prefect_api():
        _answer_here(name, run_id, approved, approver, comment, output, cluster)


def _answer_here(name: Optional[str], run_id: Optional[str], approved: bool, approver: Optional[str], comment: str,
                 output: Output, cluster: tuple[Optional[str], Optional[str]]) -> None:
    from flows.approval import answer_gate, pending_gates

    gates = pending_gates(name)
    if run_id:
        gates = [g for g in gates if str(g.flow_run_id) == run_id]
    if not gates or (name is None and run_id is None):
        data = [{"rollout": g.rollout, "gate": g.gate, "flow_run_id": str(g.flow_run_id), "flow_run": g.flow_run_name} for g in gates]

        def show() -> None:
            t = table("rollout", "gate", "flow run", "id", title="pending approvals")
            for g in gates:
                t.add_row(g.rollout, g.gate, g.flow_run_name, str(g.flow_run_id))
            out.print(t if gates else "no rollout is waiting for approval")
            for g in gates:  # each gate's evidence: rendered on a terminal, the markdown itself piped
                print_markdown(out, g.description)

        emit(data, output, show)
        if not gates and (name or run_id):
            if name:
                err.print(_why_no_gate(name, *cluster), highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_NOT_FOUND)
        return
    if len(gates) > 1:
        fail(EXIT_INVALID, f"{len(gates)} runs of {name!r} wait for approval; pick one with --run ID")
    gate = gates[0]
    who = approver or os.environ.get("USER") or "cli"
    answer_gate(gate.flow_run_id, approved=approved, approver=who, comment=comment)
    verb = "approved" if approved else "rejected"
    emit({"rollout": gate.rollout, "gate": gate.gate, "flow_run_id": str(gate.flow_run_id), "answer": verb,
           "approver": who, "comment": comment},
          output, lambda: out.print(f"{verb} {gate.rollout} gate {gate.gate} (flow run {gate.flow_run_name})",
                                    highlight=False, soft_wrap=True))


def _why_no_gate(name: str, kubeconfig: Optional[str], context: Optional[str]) -> str:
    """What the cluster says about a rollout nobody can approve now (an honest "not found")."""
    from rollout.usecases import rollout_status

    try:
        state = rollout_status(open_cluster(kubeconfig, context), name)["state"]
    except RolloutError as exc:
        return f"no gate of {name} waits for approval ({exc})"
    return f"no gate of {name} waits for approval: the rollout is {state}"


GateName = typer.Argument(None, help="Rollout name; without it, list pending gates.",
                          callback=checked(flags.rollout_name), autocompletion=complete_rollouts)
RunId = typer.Option(None, "--run", callback=checked(flags.run_id), help="Flow run id (when several runs wait).")
Comment = typer.Option("", "--comment", "-m", callback=checked(flags.comment), help="Why: recorded with the answer.")


@app.command()
def approve(
    name: Optional[str] = GateName,
    run_id: Optional[str] = RunId,
    approver: Optional[str] = typer.Option(None, "--approver", callback=checked(flags.person),
                                           help="Who approves (default: $USER)."),
    comment: str = Comment,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Approve the next batch of a paused rollout (lists pending gates without a name)."""
    _answer(name, run_id, True, approver, comment, output, (kubeconfig, context))


@app.command()
def reject(
    name: Optional[str] = GateName,
    run_id: Optional[str] = RunId,
    approver: Optional[str] = typer.Option(None, "--approver", callback=checked(flags.person),
                                           help="Who rejects (default: $USER)."),
    comment: str = Comment,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Reject a paused rollout: it halts (undo what it did with `rollout rollback NAME`)."""
    _answer(name, run_id, False, approver, comment, output, (kubeconfig, context))


# -------------------------------------------------------------------------------------- demo


@app.command()
def demo(
    nodes: int = typer.Option(11, "--nodes", callback=checked(lambda v, flag: flags.count(v, flag=flag, low=2, high=200)),
                              help="Worker nodes (plus one control-plane node)."),
    time_scale: float = typer.Option(40.0, "--time-scale", callback=checked(flags.time_scale),
                                     help="Simulated clock speed-up."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", callback=checked(flags.work_dir),
                                           help="Where kubesim and Prefect keep their state (default: a temp dir)."),
    three_clusters: bool = typer.Option(False, "--fleet", help="Three clusters instead, each with its own Prefect worker: a "
                               "good config crosses them, a bad one stops in the canary cluster."),
) -> None:
    """The product in one command: a good rollout completes, a crash-looping one is reverted.

    An embedded kubesim (and, after it, a 1.31 one with the node agent) and a private Prefect API."""
    if three_clusters:
        from rollout_cli.fleet_demo import run_fleet_demo

        raise typer.Exit((_demo_errors(lambda: run_fleet_demo(time_scale=time_scale, workdir=workdir,
                                                                            console=out))))
    from rollout_cli.demo import run_demo

    raise typer.Exit((_demo_errors(lambda: run_demo(nodes=nodes, time_scale=time_scale, workdir=workdir,
                                                                  console=out))))


def _demo_errors(run_demo: Callable[[], int]) -> int:
    """A helper of the demo that cannot start (a Prefect server, a Prometheus, a kubesim) is one
    line naming it and its log, and exit 1: not a traceback."""
    import subprocess

    try:
        return run_demo()
    except RolloutError:
        raise
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        fail(EXIT_FAILED, f"the demo stopped: {exc}")


lifecycle.register(app)  # pause, resume, abort, promote, list
drift_command.register(app)  # drift [--fix]
app.add_typer(fleet_commands.app, name="fleet")  # rollout fleet plan|start|status|approve|reject|abort
app.add_typer(prometheus_command.app, name="prometheus")  # rollout prometheus [sd]

# the name a person types: `kubectl kubelet-rollout` when kubectl runs us as its plugin
PLUGIN_BINARY = "kubectl-kubelet_rollout"
PLUGIN_NAME = "kubectl kubelet-rollout"


def cli() -> None:
    """The command line, in this process: ends with SystemExit, as a Click app does."""
    hide_expected_tracebacks()
    prog = PLUGIN_NAME if Path(sys.argv[0]).name == PLUGIN_BINARY else "rollout"
    app(prog_name=prog)


def main() -> None:
    """Where the `rollout` process starts (the console script, ``python -m rollout_cli``): the
    command, then the process's end as soon as its work is done (:func:`exit_now`)."""
    try:
        cli()
        code: Any = 0
    except SystemExit as ended:
        code = ended.code
    if isinstance(code, str):  # what sys.exit("...") means: the message, and exit 1
        print(code, file=sys.stderr)
    exit_now(code if isinstance(code, int) else int(code is not None))


def exit_now(code: int) -> None:
    """End the process without the interpreter's teardown: after a rollout, freeing Prefect's and
    the Kubernetes client's modules and objects one by one took 0.5 to 0.6 s, time a person
    waits on the command for nothing. What the teardown does that matters is done first, in its
    order: the threads that are not daemons are waited for, the exit handlers run (Prefect's last
    logs and events among them), and the output is flushed."""
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`rollout list | head`): nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
