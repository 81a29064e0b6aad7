"""`rollout`: the command line of kubelet-rollout (typer + rich).

This is the composition root: the only package that imports ``flows`` and ``kubesim``, and
Prefect only inside the command that needs it, so ``rollout validate`` starts fast. The process
starts in :func:`main`.

Exit codes (scripts rely on them) are those of the run's outcome, one table in
``rollout.outcome``: 0 completed or rolled back, 1 halted, reverted, rejected or failed, 2 invalid
input, 3 a cluster or API problem, 4 the lock held by another process, 5 not found, 6 deferred to
the next maintenance window (deployment runs), 130 stopped by Ctrl-C or SIGTERM (the same command
resumes it).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, Optional

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from flows.run_logs import hide_expected_tracebacks
from rollout.errors import ConfigError, InputError, RolloutError
from rollout.inputs import read_input
from rollout.outcome import Outcome
from rollout_cli import fleet as fleet_commands
from rollout_cli import lifecycle
from rollout_cli.base import (  # noqa: F401 - EXIT_* and app are this module's interface too
    ENDED_STATES,
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
    _emit,
    _fail,
    _gateway,
    _guard,
    app,
    err,
    out,
)

if TYPE_CHECKING:
    from flows.outcome import RunOutcome

# ----------------------------------------------------------------------------------- validate


@app.command()
def validate(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="KubeletConfiguration file."),
    policy: Optional[str] = typer.Option(None, "--policy", "-p", help="Also validate this policy (name or file), and the config's DKC-dangerous changes against its allowFields, as start does."),
    output: Output = OutputOpt,
) -> None:
    """Validate a kubelet config (1.23 rules + DKC danger checks) and/or a policy. Exit 2 if invalid.

    With -o json/yaml an invalid input is reported on stdout too (schemas/validate.json)."""
    if config is None and policy is None:
        _fail(EXIT_INVALID, "give --config FILE and/or --policy NAME_OR_FILE")
    try:
        result = _validation(config, policy)
    except InputError as exc:
        if output == Output.table:
            _guard(lambda: _raise(exc))
        _emit({"valid": False, "config": str(config) if config else None, "policy": policy,
               "message": str(exc).splitlines()[0], "problems": list(exc.problems) or [exc.reason],
               "warnings": []}, output)
        raise typer.Exit(EXIT_INVALID)
    _emit(result, output, lambda: _print_validation(result))


def _raise(exc: BaseException) -> NoReturn:
    raise exc


def _validation(config: Optional[Path], policy: Optional[str]) -> dict[str, Any]:
    from rollout.policy import load_policy_ref
    from rollout.usecases import validate_config_text

    pol = load_policy_ref(policy) if policy is not None else None
    result: dict[str, Any] = {"valid": True, "config": str(config) if config else None,
                              "policy": pol.name if pol is not None else None, "warnings": []}
    if config is not None:
        result.update(validate_config_text(read_input(config, error=ConfigError), source=str(config), policy=pol))
    return result


def _print_validation(result: dict[str, Any]) -> None:
    out.print("[green]valid[/green]", highlight=False)
    for w in result.get("warnings", []):
        out.print(f"[yellow]warning:[/yellow] {w}", highlight=False)


# ----------------------------------------------------------------------------- export / diff


@app.command()
def export(
    node: str = typer.Argument(..., help="Node whose running kubelet config to export."),
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = typer.Option(Output.yaml, "-o", "--output"),
) -> None:
    """Export a node's effective kubelet config (configz) as a valid KubeletConfiguration."""

    def body() -> None:
        from rollout.usecases import export_node_config

        doc = export_node_config(_gateway(kubeconfig, context), node)
        if output == Output.json:
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))

    _guard(body)


@app.command()
def diff(
    config: Path = ConfigOpt,
    selector: Optional[str] = typer.Option(None, "--selector", "-l", help="Label selector (default: the policy's)."),
    policy: str = PolicyOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Field-level diff of a config against each target node's active config. Exit 1 if it differs."""

    def body() -> None:
        from rollout.usecases import diff_against_nodes

        diffs = diff_against_nodes(
            _gateway(kubeconfig, context), read_input(config, error=ConfigError), policy_ref=policy, selector=selector
        )

        def table() -> None:
            t = Table("node", "field", "active", "new")
            for node, changes in diffs.items():
                for change in changes:
                    t.add_row(node, change["field"], json.dumps(change.get("old")), json.dumps(change.get("new")))
            out.print(t if t.row_count else "no differences")

        _emit(diffs, output, table)
        if any(diffs.values()):
            raise typer.Exit(EXIT_FAILED)

    _guard(body)


# ------------------------------------------------------------------------------ plan/publish


@app.command()
def plan(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="KubeletConfiguration file (nodes already on it are skipped)."),
    policy: str = PolicyOpt,
    selector: Optional[str] = typer.Option(None, "--selector", "-l"),
    name: str = typer.Option("preview", "--name", help="The rollout name: node order is a hash of it, so give the name you will start with."),
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Show the batches a rollout would run, in order, with an estimated duration (nothing is written)."""

    def body() -> None:
        from rollout.usecases import preview_plan

        data = preview_plan(
            _gateway(kubeconfig, context),
            config_text=read_input(config, error=ConfigError) if config else None,
            policy_ref=policy,
            selector=selector,
            rollout=name,
        )

        def table() -> None:
            t = Table("#", "batch", "nodes", title=f"plan of {name} (estimated {data['estimate']})")
            for b in data["batches"]:
                t.add_row(str(b["index"]), b["label"], ", ".join(b["nodes"]))
            out.print(t)
            if data["changes"]:
                out.print(_changes_table(data["changes"]))

        _emit(data, output, table)

    _guard(body)


def _changes_table(changes: dict[str, list[dict[str, Any]]]) -> Table:
    """One row per field change, naming the nodes it applies to (most clusters: all of them)."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for node, node_changes in changes.items():
        for change in node_changes:
            key = (change["field"], json.dumps(change.get("old")), json.dumps(change.get("new")))
            grouped.setdefault(key, []).append(node)
    t = Table("field", "running", "new", "nodes", title="changes")
    for (field_path, old, new), nodes in sorted(grouped.items()):
        shown = ", ".join(nodes) if len(nodes) <= 5 else f"{len(nodes)} nodes"
        t.add_row(field_path, old, new, shown)
    return t


@app.command()
def publish(
    config: Path = ConfigOpt,
    namespace: str = typer.Option("kube-system", "--namespace", "-n"),
    name: Optional[str] = typer.Option(None, "--name", help="Rollout name for the event-triggered deployment (default: the ConfigMap name)."),
    policy: str = PolicyOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Publish a validated config as an immutable content-hash ConfigMap (no-op if it exists).

    Emits the Prefect event kubelet-rollout.config.published when a Prefect API is configured
    (PREFECT_API_URL) and the config was not published before, which starts the
    `rollout-on-publish` deployment.
    """

    def body() -> None:
        from rollout.usecases import publish_config_text

        ref, created = publish_config_text(
            _gateway(kubeconfig, context), read_input(config, error=ConfigError), namespace=namespace, source=str(config)
        )
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
                                  policy=policy, origin="cli")
            _flush_events()
        _emit(data, output, lambda: out.print(
            f"{'published' if created else 'already published'}: {ref.namespace}/{ref.name}", highlight=False))

    _guard(body)


def _flush_events() -> None:
    from rollout_cli.prefect_home import drain

    drain()


# ------------------------------------------------------------------------------------- start


@app.command()
def start(
    name: str = typer.Option(..., "--name", help="Rollout name (re-use it to resume a rollout)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="KubeletConfiguration file."),
    configmap: Optional[str] = typer.Option(None, "--configmap", help="An already published ConfigMap: NAMESPACE/NAME."),
    policy: str = PolicyOpt,
    selector: Optional[str] = typer.Option(None, "--selector", "-l", help="Label selector (overrides the policy's)."),
    deployment: Optional[str] = typer.Option(None, "--deployment", help="Run on this deployment (FLOW/DEPLOYMENT) instead of locally."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="With --deployment: follow the run to its end."),
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Run a rollout. Exit 0 only when it completed; 1 when it halted or was reverted."""
    if (config is None) == (configmap is None):
        _fail(EXIT_INVALID, "give exactly one of --config FILE or --configmap NAMESPACE/NAME")
    _guard(lambda: _check_inputs(config, policy))
    params: dict[str, Any] = {
        "name": name,
        "config": read_input(config, error=ConfigError) if config else None,
        "configmap": configmap,
        "policy": _policy_param(policy),
        "node_selector": selector,
        "kubeconfig": str(Path(kubeconfig).resolve()) if kubeconfig else None,
        "context": context,
    }
    _guard(lambda: _run(params, flow="rollout", deployment=deployment, wait=wait, output=output,
                        kubeconfig=kubeconfig, context=context))


def _check_inputs(config: Optional[Path], policy: str) -> None:
    """Bad input fails here with one message naming the file, before any flow run or cluster call."""
    from rollout.policy import load_policy_ref
    from rollout.usecases import validate_config_text

    load_policy_ref(policy)
    if config is not None:
        validate_config_text(read_input(config, error=ConfigError), source=str(config))


def _policy_param(policy: str) -> str:
    """A policy file is passed to the flow as its text (deployments run elsewhere)."""
    path = Path(policy)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path.read_text()
    return policy


def _run(params: dict[str, Any], *, flow: str, deployment: Optional[str], wait: bool,
         output: Output, kubeconfig: Optional[str], context: Optional[str]) -> None:
    if deployment:
        with _live_progress(params["name"], kubeconfig, context) if wait else _nothing():
            outcome = _run_on_deployment(deployment, params, wait=wait)
        if outcome is None:
            return
    else:
        outcome = _run_locally(params, flow=flow, kubeconfig=kubeconfig, context=context)
    if output == Output.table:
        _print_outcome(params["name"], outcome)
    else:
        _emit(_run_json(params["name"], outcome, kubeconfig, context), output)
    raise typer.Exit(outcome.outcome.exit_code)


def _print_outcome(name: str, outcome: RunOutcome) -> None:
    """The report as the terminal shows markdown, then one line: how the run ended, and why."""
    from rich.markdown import Markdown

    if outcome.report:
        out.print(Markdown(outcome.report))
    colour = "green" if outcome.ok else "yellow" if outcome.outcome in (Outcome.DEFERRED, Outcome.STOPPED) else "red"
    # soft_wrap: how the run ended stays one line however narrow the terminal (scripts grep it)
    out.print(f"[{colour}]{name}: {outcome.outcome}[/{colour}]: {escape(outcome.message)}", highlight=False,
              soft_wrap=True)


# a stopped run reads the rollout back for its JSON this long at most: the API server may be away
STOPPED_READ_S = 1.0


def _run_json(name: str, outcome: RunOutcome, kubeconfig: Optional[str], context: Optional[str]) -> dict[str, Any]:
    """`start`/`rollback` -o json (schemas/run.json): how the run ended, plus the rollout as
    `rollout status` shows it (null when the run was refused before it had a journal, or was
    stopped while the API server was out of reach)."""
    from rollout.usecases import rollout_status

    try:
        gateway = _gateway(kubeconfig, context)
        if outcome.outcome is Outcome.STOPPED:
            gateway = gateway.within(STOPPED_READ_S)
        rollout: Any = rollout_status(gateway, name)
    except RolloutError:
        rollout = None
    return {
        "name": name,
        "outcome": outcome.outcome.value,
        "ok": outcome.ok,
        "exit_code": outcome.outcome.exit_code,
        "message": outcome.message,
        "flow_run_id": outcome.flow_run_id or None,
        "flow_run_name": outcome.flow_run_name or None,
        "report": outcome.report,
        "nodes": [str(n) for n in outcome.details.get("nodes", [])],
        "rollout": rollout,
    }


def _run_locally(params: dict[str, Any], *, flow: str, kubeconfig: Optional[str],
                 context: Optional[str]) -> RunOutcome:
    from flows.outcome import RunOutcome
    from flows.rollback_flow import kubelet_config_rollback
    from flows.rollout_flow import kubelet_config_rollout
    from rollout_cli.prefect_home import guard_temporary_server

    fn = kubelet_config_rollout if flow == "rollout" else kubelet_config_rollback
    guard_temporary_server()
    with _stop_on_signals(), _live_progress(params["name"], kubeconfig, context):
        state = _off_the_main_thread(lambda: fn(**params, return_state=True))
    return RunOutcome.from_state(state)


def _off_the_main_thread(call: Callable[[], Any]) -> Any:
    """Run the flow on a thread of its own while the main thread waits for it, answering signals.

    On the main thread, Prefect's flow engine replaces the SIGTERM handler for the run's length
    with one raising TerminationSignal wherever the run is: it then unwinds through a batch whose
    writes still retry an outage (minutes) and ends in a traceback. Off the main thread Prefect
    installs none, so SIGTERM reaches :func:`_stop_on_signals` as Ctrl-C does.
    """
    import contextvars

    ended: dict[str, Any] = {}

    def run() -> None:
        try:
            ended["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - raised again on the main thread
            ended["error"] = exc

    thread = threading.Thread(target=contextvars.copy_context().run, args=(run,), name="flow-run")
    thread.start()
    while thread.is_alive():
        thread.join(0.2)  # short joins: the signal handlers run on this thread between them
    if "error" in ended:
        raise ended["error"]
    return ended["value"]


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Ctrl-C or SIGTERM asks the run to stop: the engine marks the journal stopped and the flow
    run ends Cancelled within a moment (exit 130). A second Ctrl-C leaves at once."""
    import signal

    from flows.shell import STOP

    def ask_stop(signum: int, frame: Any) -> None:
        if STOP.is_set():
            err.print("stopping now")
            os._exit(EXIT_INTERRUPTED)
        STOP.set()
        err.print("stopping: finishing the current step (Ctrl-C again to leave at once)")

    STOP.clear()
    previous = {sig: signal.signal(sig, ask_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_on_deployment(deployment: str, params: dict[str, Any], *, wait: bool) -> RunOutcome | None:
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment

    from flows.outcome import RunOutcome

    params = {k: v for k, v in params.items() if v is not None}
    run = run_deployment(deployment, parameters=params, timeout=None if wait else 0, as_subflow=False)
    assert isinstance(run, FlowRun)  # called outside an event loop, it answers at once
    if not wait:
        out.print(f"started flow run {run.name} ({run.id})", highlight=False)
        return None
    return RunOutcome.from_flow_run(run)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


class _live_progress:
    """A live per-phase progress display, fed from the cluster (not from the flow), on stderr."""

    def __init__(self, rollout: str, kubeconfig: Optional[str], context: Optional[str]) -> None:
        self.rollout, self.kubeconfig, self.context = rollout, kubeconfig, context
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "_live_progress":
        if not err.is_terminal:
            return self
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        from rich.live import Live

        from rollout.usecases import rollout_status

        gateway = None
        with Live(console=err, refresh_per_second=2, transient=True) as live:
            while not self._stop.wait(1.0):
                try:
                    gateway = gateway or _gateway(self.kubeconfig, self.context)
                    with gateway.cut_short_by(self._stop):  # the run's end ends a read riding out an outage
                        live.update(_status_renderable(rollout_status(gateway, self.rollout), compact=True))
                except Exception:  # noqa: BLE001 - the display never breaks a rollout
                    continue

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=3)


# ------------------------------------------------------------------------------------ status


@app.command()
def status(
    name: str = typer.Argument(..., help="Rollout name."),
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
    watch: bool = typer.Option(False, "--watch", "-w", help="Keep refreshing until the rollout ends."),
) -> None:
    """Per-node status of a rollout, from the cluster journal and the nodes (works after a crash)."""

    def body() -> None:
        from rollout.usecases import rollout_status

        gateway = _gateway(kubeconfig, context)
        if watch and output == Output.table:
            import time

            from rich.live import Live

            with Live(console=out, refresh_per_second=2) as live:
                while True:
                    data = rollout_status(gateway, name)
                    live.update(_status_renderable(data))
                    if data.get("finished_at") or data.get("state") in ENDED_STATES:
                        break
                    time.sleep(1)
            return
        data = rollout_status(gateway, name)
        _emit(data, output, lambda: out.print(_status_renderable(data)))

    _guard(body)


def _elapsed(data: dict[str, Any]) -> str:
    """``10m6s`` since the rollout started (to its end when it ended)."""
    from datetime import datetime, timedelta, timezone

    from rollout.policy import format_duration
    from rollout.timefmt import parse_rfc3339

    def parse(stamp: Optional[str]) -> Optional[datetime]:
        return parse_rfc3339(stamp) if stamp else None

    started = parse(data.get("created_at"))
    if started is None:
        return ""
    ended = parse(data.get("finished_at")) or datetime.now(timezone.utc)
    return format_duration(timedelta(seconds=round((ended - started).total_seconds())))


def _status_renderable(data: dict[str, Any], compact: bool = False) -> Any:
    from rich import box
    from rich.console import Group
    from rich.text import Text

    nodes = data.get("nodes", [])
    on_target = ("active", "promoted")
    done = sum(1 for n in nodes if n["phase"] in on_target)
    current = data.get("current_batch")
    where = f"{data.get('batches', 0)} batch(es)"
    if current:
        in_batch = [n for n in nodes if n.get("batch") == current]
        settled = sum(1 for n in in_batch if n["phase"] in on_target)
        where = f"batch {current}/{data.get('batches', '?')}: {settled}/{len(in_batch)} nodes"
    width = 30
    filled = round(width * done / len(nodes)) if nodes else width
    header = Text.assemble(
        (f"rollout {data.get('name')}: ", "bold"), (str(data.get("state", "?")), "bold cyan"),
        f"  {_elapsed(data)}  {where}  ", ("█" * filled, "green"), ("░" * (width - filled), "dim"),
        f" {done}/{len(nodes)} nodes on target",
    )
    reason = Text(str(data.get("reason", "")), style="dim")
    t = Table("node", "batch", "phase", "ready", "active", "lastKnownGood", "error",
              box=box.SIMPLE if compact else box.ROUNDED)
    colours = {"active": "green", "promoted": "green", "pending": "dim", "reverted": "yellow"}
    bad = ("failed-to-load", "failed-to-validate", "crash-looping", "timed-out", "sync-error")
    for n in nodes:
        c = colours.get(n["phase"], "red" if n["phase"] in bad else "cyan")
        t.add_row(n["name"], str(n.get("batch") or ""), f"[{c}]{n['phase']}[/{c}]", n.get("ready_condition") or "?",
                  n.get("active", ""), n.get("last_known_good", ""), escape((n.get("error") or "")[:60]))
    lock = data.get("lock")
    if compact or not lock:
        return Group(header, reason, t)
    return Group(header, reason, Text(_lock_line(lock), style="dim"), t)


def _lock_line(lock: dict[str, Any]) -> str:
    """Who holds the rollout lock, and whether it lives (status -o json: "lock")."""
    if not lock.get("holder"):
        return f"lock: {lock['liveness']}"
    who = (f"rollout {lock['rollout']} (pid {lock['pid']} on host {lock['host']}, run {lock['run']})"
           if lock.get("pid") else str(lock["holder"]))
    return f"lock: {lock['liveness']}, held by {who} since {lock['since']}, renewed {lock['renewed_at']}"


# ------------------------------------------------------------------------- approve / reject


def _answer(name: Optional[str], run_id: Optional[str], approved: bool, approver: Optional[str], comment: str,
            output: Output, cluster: tuple[Optional[str], Optional[str]] = (None, None)) -> None:
    from flows.approval import answer_gate, pending_gates

    gates = pending_gates(name)
    if run_id:
        gates = [g for g in gates if str(g.flow_run_id) == run_id]
    if not gates or (name is None and run_id is None):
        data = [{"rollout": g.rollout, "gate": g.gate, "flow_run_id": str(g.flow_run_id), "flow_run": g.flow_run_name} for g in gates]

        def table() -> None:
            t = Table("rollout", "gate", "flow run", "id", title="pending approvals")
            for g in gates:
                t.add_row(g.rollout, g.gate, g.flow_run_name, str(g.flow_run_id))
            out.print(t if gates else "no rollout is waiting for approval")
            for g in gates[:1]:
                from rich.markdown import Markdown

                out.print(Markdown(g.description))

        _emit(data, output, table)
        if not gates and (name or run_id):
            if name:
                err.print(_why_no_gate(name, *cluster), highlight=False)
            raise typer.Exit(EXIT_NOT_FOUND)
        return
    if len(gates) > 1:
        _fail(EXIT_INVALID, f"{len(gates)} runs of {name!r} wait for approval; pick one with --run ID")
    gate = gates[0]
    who = approver or os.environ.get("USER") or "cli"
    answer_gate(gate.flow_run_id, approved=approved, approver=who, comment=comment)
    verb = "approved" if approved else "rejected"
    _emit({"rollout": gate.rollout, "gate": gate.gate, "flow_run_id": str(gate.flow_run_id), "answer": verb,
           "approver": who, "comment": comment},
          output, lambda: out.print(f"{verb} {gate.rollout} gate {gate.gate} (flow run {gate.flow_run_name})", highlight=False))


def _why_no_gate(name: str, kubeconfig: Optional[str], context: Optional[str]) -> str:
    """What the cluster says about a rollout nobody can approve now (an honest "not found")."""
    from rollout.usecases import rollout_status

    try:
        state = rollout_status(_gateway(kubeconfig, context), name)["state"]
    except RolloutError as exc:
        return f"no gate of {name} waits for approval ({exc})"
    return f"no gate of {name} waits for approval: the rollout is {state}"


@app.command()
def approve(
    name: Optional[str] = typer.Argument(None, help="Rollout name; without it, list pending gates."),
    run_id: Optional[str] = typer.Option(None, "--run", help="Flow run id (when several runs wait)."),
    approver: Optional[str] = typer.Option(None, "--approver", help="Who approves (default: $USER)."),
    comment: str = typer.Option("", "--comment", "-m"),
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Approve the next batch of a paused rollout (lists pending gates without a name)."""
    _guard(lambda: _answer(name, run_id, True, approver, comment, output, (kubeconfig, context)))


@app.command()
def reject(
    name: Optional[str] = typer.Argument(None, help="Rollout name; without it, list pending gates."),
    run_id: Optional[str] = typer.Option(None, "--run", help="Flow run id (when several runs wait)."),
    approver: Optional[str] = typer.Option(None, "--approver", help="Who rejects (default: $USER)."),
    comment: str = typer.Option("", "--comment", "-m"),
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Reject a paused rollout: it halts (undo what it did with `rollout rollback NAME`)."""
    _guard(lambda: _answer(name, run_id, False, approver, comment, output, (kubeconfig, context)))


# ---------------------------------------------------------------------------------- rollback


class RollbackTarget(str, Enum):
    previous = "previous"
    local = "local"


@app.command()
def rollback(
    name: str = typer.Argument(..., help="The rollout to undo."),
    to: RollbackTarget = typer.Option(RollbackTarget.previous, "--to", help="previous: each node's source before the rollout; local: the kubelet's --config."),
    policy: str = PolicyOpt,
    deployment: Optional[str] = typer.Option(None, "--deployment", help="Run on this deployment instead of locally."),
    wait: bool = typer.Option(True, "--wait/--no-wait"),
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Restore every node touched by a rollout, in batches, waiting for convergence."""
    _guard(lambda: _check_inputs(None, policy))
    params = {
        "name": name,
        "to": to.value,
        "policy": _policy_param(policy),
        "kubeconfig": str(Path(kubeconfig).resolve()) if kubeconfig else None,
        "context": context,
    }
    _guard(lambda: _run(params, flow="rollback", deployment=deployment, wait=wait, output=output,
                        kubeconfig=kubeconfig, context=context))


# -------------------------------------------------------------------------------------- demo


@app.command()
def demo(
    nodes: int = typer.Option(11, "--nodes", help="Worker nodes (plus one control-plane node)."),
    time_scale: float = typer.Option(40.0, "--time-scale", help="Simulated clock speed-up."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Where kubesim and Prefect keep their state (default: a temp dir)."),
    fleet: bool = typer.Option(False, "--fleet", help="Three clusters instead, each with its own Prefect worker: a good config crosses them, a bad one stops in the canary cluster."),
) -> None:
    """The product in one command: embedded kubesim + Prefect ephemeral API; a good rollout
    completes, a crash-looping config is halted and reverted."""
    if fleet:
        from rollout_cli.fleet_demo import run_fleet_demo

        raise typer.Exit(_guard(lambda: run_fleet_demo(time_scale=time_scale, workdir=workdir, console=out)))
    from rollout_cli.demo import run_demo

    raise typer.Exit(_guard(lambda: run_demo(nodes=nodes, time_scale=time_scale, workdir=workdir, console=out)))


lifecycle.register(app)  # list, pause, resume, abort, promote
app.add_typer(fleet_commands.app, name="fleet")  # rollout fleet plan|start|status|approve|reject|abort


def main() -> None:
    """Where the `rollout` process starts (the console script, ``python -m rollout_cli``)."""
    hide_expected_tracebacks()
    app()


if __name__ == "__main__":
    main()
