"""`rollout start`, `rollout retry` and `rollout rollback`: commands that run a flow to its end.

A local run takes the rollout's lock in this process before Prefect starts
(``flows.cluster.lock_taken_early``): from then on ``rollout status NAME`` shows it starting,
another process of any rollout is refused (exit 4) before a flow run is made, and the run holds
that lock. Every flag has passed the input boundary (``rollout.flags``) before anything starts.

Exit codes are the run outcome's (``rollout.outcome``); the report is rendered markdown on a
terminal and the markdown itself when piped (a pipe keeps every identifier whole).
"""

from __future__ import annotations

import contextlib
import os
import threading
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import typer
import yaml
from rich.markup import escape

from rollout import flags
from rollout.errors import ConfigError, FlagError, RolloutError
from rollout.inputs import read_input
from rollout.outcome import Outcome
from rollout_cli import prefect_server
from rollout_cli.base import (
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    ContextOpt,
    KubeconfigOpt,
    NameArg,
    Output,
    OutputOpt,
    PolicyOpt,
    RollbackPolicyOpt,
    SelectorOpt,
    _emit,
    _fail,
    _gateway,
    _guard,
    checked,
    complete_rollouts,
    err,
    out,
    print_markdown,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flows.outcome import RunOutcome
    from rollout.journal import Journal
    from rollout.model import NodeObservation

# a stopped run reads the rollout back for its JSON this long at most: the API server may be away
STOPPED_READ_S = 1.0

PrometheusOpt = typer.Option(
    None, "--prometheus", envvar="KUBELET_ROLLOUT_PROMETHEUS_URL", callback=checked(flags.prometheus_url),
    help="Prometheus the policy's analysis checks ask (else the policy's analysis.prometheus.address).")
PrometheusTokenOpt = typer.Option(None, "--prometheus-token-file", envvar="KUBELET_ROLLOUT_PROMETHEUS_TOKEN_FILE",
                                  callback=checked(flags.readable_file),
                                  help="A file holding the bearer token for Prometheus.")
PrometheusCaOpt = typer.Option(None, "--prometheus-ca-file", envvar="KUBELET_ROLLOUT_PROMETHEUS_CA_FILE",
                               callback=checked(flags.readable_file), help="CA bundle to verify an https Prometheus.")

TimeScaleOpt = typer.Option(
    None, "--time-scale", envvar="KUBELET_ROLLOUT_TIME_SCALE", callback=checked(flags.time_scale),
    help="Rehearse on kubesim: divide the policy's durations by F (as kubesim divides its kubelets'); "
         "refused against any other cluster.")


def start(
    name: str = typer.Option(..., "--name", callback=checked(flags.rollout_name), autocompletion=complete_rollouts,
                             help="Rollout name; alone (no --config/--configmap), resumes that rollout from its journal."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="KubeletConfiguration file."),
    configmap: Optional[str] = typer.Option(None, "--configmap", callback=checked(flags.configmap_ref),
                                            help="An already published ConfigMap: NAMESPACE/NAME."),
    policy: Optional[str] = PolicyOpt,
    selector: Optional[str] = SelectorOpt,
    deployment: Optional[str] = typer.Option(None, "--deployment", callback=checked(flags.deployment),
                                             help="Run on this deployment (FLOW/DEPLOYMENT) instead of locally."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="With --deployment: follow the run to its end."),
    time_scale: Optional[float] = TimeScaleOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
    prometheus: Optional[str] = PrometheusOpt,
    prometheus_token_file: Optional[str] = PrometheusTokenOpt,
    prometheus_ca_file: Optional[str] = PrometheusCaOpt,
) -> None:
    """Run a rollout (or resume a stopped one). Exit 0 only when it completed; 1 when it halted or was reverted."""
    if config is not None and configmap is not None:
        _fail(EXIT_INVALID, "--config: give one of --config FILE or --configmap NAMESPACE/NAME, not both")
    text: Optional[str] = None
    if config is None and configmap is None:
        configmap, policy = _guard(lambda: _resumed(name, policy, kubeconfig, context, retrying=False,
                                                    time_scale=time_scale))
    else:
        text = _guard(lambda: checked_config(config, policy))
    asks = _guard(lambda: _prometheus(policy, prometheus, prometheus_token_file, prometheus_ca_file,
                                      time_scale=time_scale, probed=deployment is None))
    params = {"name": name, "config": text, "configmap": configmap, "policy": policy_param(policy),
              "node_selector": selector, "time_scale": time_scale, **asks, **_cluster(kubeconfig, context)}
    _guard(lambda: run(params, flow="rollout", deployment=deployment, wait=wait, output=output,
                       kubeconfig=kubeconfig, context=context))


def retry(
    name: str = NameArg,
    time_scale: Optional[float] = TimeScaleOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
    prometheus: Optional[str] = PrometheusOpt,
    prometheus_token_file: Optional[str] = PrometheusTokenOpt,
    prometheus_ca_file: Optional[str] = PrometheusCaOpt,
) -> None:
    """Run a stopped, halted or reverted rollout again from its journal (its config and policy).

    A halted rollout's failed batch (and any batch it reverted) starts again; a stopped one
    carries on where it stopped, as `rollout start --name NAME` does."""
    configmap, policy = _guard(lambda: _resumed(name, None, kubeconfig, context, retrying=True, time_scale=time_scale))
    asks = _guard(lambda: _prometheus(policy, prometheus, prometheus_token_file, prometheus_ca_file,
                                      time_scale=time_scale))
    params = {"name": name, "config": None, "configmap": configmap, "policy": policy, "node_selector": None,
              "time_scale": time_scale, "retry": True, **asks, **_cluster(kubeconfig, context)}
    _guard(lambda: run(params, flow="rollout", deployment=None, wait=True, output=output,
                       kubeconfig=kubeconfig, context=context))


class RollbackTarget(str, Enum):
    previous = "previous"
    local = "local"


def rollback(
    name: str = NameArg,
    to: RollbackTarget = typer.Option(RollbackTarget.previous, "--to", help="previous: each node's source before the rollout; local: the kubelet's --config."),
    policy: Optional[str] = RollbackPolicyOpt,
    deployment: Optional[str] = typer.Option(None, "--deployment", callback=checked(flags.deployment),
                                             help="Run on this deployment instead of locally."),
    wait: bool = typer.Option(True, "--wait/--no-wait"),
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
) -> None:
    """Restore every node touched by a rollout, in batches, waiting for convergence (with the rollout's own policy)."""
    if policy is None:
        policy = _guard(lambda: _journal_policy(name, kubeconfig, context))
    params = {"name": name, "to": to.value, "policy": policy_param(policy), **_cluster(kubeconfig, context)}
    _guard(lambda: run(params, flow="rollback", deployment=deployment, wait=wait, output=output,
                       kubeconfig=kubeconfig, context=context))


def register(app: typer.Typer) -> None:
    app.command()(start)
    app.command()(retry)
    app.command()(rollback)


# ----------------------------------------------------------------------------- the inputs


def _cluster(kubeconfig: Optional[str], context: Optional[str]) -> dict[str, Optional[str]]:
    return {"kubeconfig": str(Path(kubeconfig).resolve()) if kubeconfig else None, "context": context}


def _prometheus(policy: Optional[str], address: Optional[str], token_file: Optional[str],
                ca_file: Optional[str], *, time_scale: Optional[float] = None,
                probed: bool = True) -> dict[str, Optional[str]]:
    """Where the policy's analysis checks ask, as the flow takes it; refused here, before anything
    starts, when the policy has checks and nothing names a Prometheus, or the one named cannot
    measure them (``probed``: asked from here; a deployment's worker may see another network)."""
    from rollout.prometheus import ready_metrics_source
    from rollout.usecases import selected_policy

    ready_metrics_source(selected_policy(policy, None, time_scale=time_scale), address=address,
                         token_file=token_file, ca_file=ca_file, probed=probed)
    return {"prometheus": address,
            "prometheus_token_file": str(Path(token_file).resolve()) if token_file else None,
            "prometheus_ca_file": str(Path(ca_file).resolve()) if ca_file else None}


def checked_config(config: Optional[Path], policy: Optional[str]) -> str:
    """The config's text, refused here (offline: the 1.23 rules) before anything starts; the
    verdict against the nodes' running config comes with the run (``rollout.prepare``)."""
    from rollout.usecases import refuse_invalid_config

    assert config is not None
    text = read_input(config, error=ConfigError)
    refuse_invalid_config(text, source=str(config), policy_ref=policy, suffix=": nothing was started")
    return text


def _load(name: str, kubeconfig: Optional[str], context: Optional[str]) -> Journal | None:
    from rollout.status import load_journal

    loaded = load_journal(_gateway(kubeconfig, context), name)
    return loaded[0] if loaded is not None else None


def _resumed(name: str, policy: Optional[str], kubeconfig: Optional[str], context: Optional[str], *,
             retrying: bool, time_scale: Optional[float]) -> tuple[str, str]:
    """What a rollout resumed by name alone runs with: the config and the policy of its journal."""
    from rollout.errors import RolloutNotFoundError
    from rollout.journal import RolloutStatus

    journal = _load(name, kubeconfig, context)
    if journal is None:
        if retrying:
            raise RolloutNotFoundError(f"no rollout named {name!r} to retry")
        raise FlagError(f"no rollout named {name!r} to resume: give --config FILE or --configmap NAMESPACE/NAME to "
                        "start one", source="--name")
    shown = journal.shown_status
    retryable = journal.status is RolloutStatus.HALTED and not journal.rollback_to
    if journal.finished and not (retrying and retryable):
        then = (f"`rollout retry {name}` runs its failed batch again; " if retryable else "") + \
            f"`rollout rollback {name}` undoes it; a new --name starts another rollout"
        raise FlagError(f"rollout {name} has ended ({'completed' if shown == 'complete' else shown}): nothing to "
                        f"{'retry' if retrying else 'resume'}", source="--name", advice=then)
    ran = journal.plan.policy.time_scale
    if time_scale is not None and time_scale != ran:
        raise FlagError(f"rollout {name} runs {'in real time' if ran == 1 else f'as a rehearsal at x{ran:g}'}, and a "
                        "resumed rollout keeps the policy it started with", source="--time-scale",
                        advice="drop --time-scale (it applies when a new rollout starts)")
    target = f"{journal.target.namespace}/{journal.target.name}"
    kept = policy if policy is not None else yaml.safe_dump(journal.plan.policy.dump(), sort_keys=False)
    verb = "retrying" if journal.finished else "resuming"
    err.print(f"{verb} rollout {name} from its journal: config {target}, policy {journal.policy_name}",
              highlight=False, soft_wrap=True)
    return target, kept


def _journal_policy(name: str, kubeconfig: Optional[str], context: Optional[str]) -> Optional[str]:
    """A rollback's policy: the rollout's own (None: its journal is gone, the default then)."""
    journal = _load(name, kubeconfig, context)
    return yaml.safe_dump(journal.plan.policy.dump(), sort_keys=False) if journal is not None else None


def policy_param(policy: Optional[str]) -> str:
    """The policy as a flow receives it: a shipped name as it is; a file as its YAML with its name
    (its ``name:`` or the file's stem), since a run elsewhere cannot read the file and a policy
    passed as text has no file name to go by."""
    from rollout.policy import DEFAULT_POLICY, load_policy

    if policy is None:
        return DEFAULT_POLICY
    path = Path(policy)
    if "\n" not in policy and path.suffix in (".yaml", ".yml") and path.is_file():
        return yaml.safe_dump(load_policy(path).dump(), sort_keys=False)
    return policy


# ------------------------------------------------------------------------------- the run


def run(params: dict[str, Any], *, flow: str, deployment: Optional[str], wait: bool,
        output: Output, kubeconfig: Optional[str], context: Optional[str]) -> None:
    if deployment:
        with live_progress(params["name"], kubeconfig, context) if wait else contextlib.nullcontext():
            outcome = _run_on_deployment(deployment, params, wait=wait)
        if outcome is None:
            return
    elif prefect_server.needed():
        # the temporary Prefect server comes up while the rollout begins (rollout_cli.prefect_server)
        server = prefect_server.TemporaryServer()
        try:
            outcome = _run_ahead(params, server, flow=flow, kubeconfig=kubeconfig, context=context)
        finally:
            server.stop()
    else:
        outcome = _run_locally(params, flow=flow, kubeconfig=kubeconfig, context=context)
    if output == Output.table:
        print_outcome(params["name"], outcome)
    else:
        _emit(_run_json(params["name"], outcome, kubeconfig, context), output)
    raise typer.Exit(outcome.outcome.exit_code)


def print_outcome(name: str, outcome: RunOutcome) -> None:
    """The report (rendered on a terminal, the markdown itself when piped), then one line: how
    the run ended, and why."""
    if outcome.report:
        print_markdown(out, outcome.report)
    colour = "green" if outcome.ok else "yellow" if outcome.outcome in (Outcome.DEFERRED, Outcome.STOPPED) else "red"
    # soft_wrap: how the run ended stays one line however narrow the terminal (scripts grep it)
    out.print(f"[{colour}]{name}: {outcome.outcome}[/{colour}]: {escape(outcome.message)}", highlight=False,
              soft_wrap=True)


def _run_json(name: str, outcome: RunOutcome, kubeconfig: Optional[str], context: Optional[str]) -> dict[str, Any]:
    """`start`/`rollback` -o json (schemas/run.json): how the run ended, plus the rollout as
    `rollout status` shows it (null when the run was refused before it had a journal, or was
    stopped while the API server was out of reach)."""
    from rollout.usecases import final_status, rollout_status

    try:
        gateway = _gateway(kubeconfig, context)
        if outcome.outcome is Outcome.STOPPED:
            gateway = gateway.within(STOPPED_READ_S)
        final = outcome.final if outcome.outcome is not Outcome.STOPPED else None  # a stop's last save may not have landed
        rollout: Any = (final_status(gateway, final.journal, final.observations) if final is not None
                        else rollout_status(gateway, name))
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
    from flows.cluster import lock_taken_early
    from flows.outcome import RunOutcome
    from flows.rollback_flow import kubelet_config_rollback
    from flows.rollout_flow import kubelet_config_rollout
    from flows.shell import latest_view
    from flows.stop import STOP
    from rollout.usecases import selected_policy
    from rollout_cli.prefect_home import guard_temporary_server

    name = params["name"]
    policy = selected_policy(params["policy"], None, time_scale=params.get("time_scale"))
    fn: Callable[..., Any] = kubelet_config_rollout if flow == "rollout" else kubelet_config_rollback
    with stop_on_signals():
        try:
            with lock_taken_early(name, policy, kubeconfig=params["kubeconfig"], context=params["context"], stop=STOP):
                err.print(f"rollout {name}: started (this process holds its lock); `rollout status {name}` shows it",
                          highlight=False, soft_wrap=True)
                guard_temporary_server()
                with live_progress(name, kubeconfig, context, view=lambda: latest_view(name)):  # the flow runs here
                    state = off_the_main_thread(lambda: fn(**params, return_state=True))
        except RolloutError as error:  # refused before a flow run: the lock, or the cluster
            if STOP.is_set():
                return RunOutcome(Outcome.STOPPED, f"stopped by request ({error}); run the same command again")
            return RunOutcome(error.outcome, str(error))
    return RunOutcome.from_state(state)


def _run_ahead(params: dict[str, Any], server: prefect_server.TemporaryServer, *, flow: str,
               kubeconfig: Optional[str], context: Optional[str]) -> RunOutcome:
    """A local rollout (or rollback) whose Prefect API is a temporary server: the run begins at
    once (``flows.head_start``: the lock, the list, the config, the plan, the engine) and its flow
    run attaches when the server is up, so the first write does not wait for Prefect, nor the end
    for its shutdown."""
    from flows.head_start import HEAD_STARTS, start_ahead, start_rollback_ahead
    from flows.heap import quiet_start
    from flows.stop import STOP

    name = params["name"]
    with stop_on_signals(), contextlib.ExitStack() as display, contextlib.ExitStack() as starting:
        # the node list, the plan and Prefect's import: no full collection walks them (flows.heap)
        starting.enter_context(quiet_start())
        # before Prefect is imported: that takes seconds
        token = start_ahead(**params) if flow == "rollout" else start_rollback_ahead(**params)
        err.print(f"rollout {name}: started; `rollout status {name}` shows it", highlight=False, soft_wrap=True)
        head = HEAD_STARTS[token]
        display.enter_context(live_progress(name, kubeconfig, context, view=head.relay.latest))
        # Prefect's import (a second of CPU) waits for the head start's plan: beside it, it slowed
        # the first write by as much; the temporary server is not up before then anyway
        head.wait_prepared(STOP)
        try:
            from flows.outcome import RunOutcome
            from flows.rollback_flow import attach_rollback
            from flows.rollout_flow import attach
            from rollout_cli.prefect_home import drain

            starting.close()  # started: the engine's loop has frozen what start-up built
            attached = attach if flow == "rollout" else attach_rollback

            configured = _prefect_configured()
            if not configured and not server.wait_ready(stop=STOP):
                asked = STOP.is_set()
                return RunOutcome(Outcome.STOPPED, "stopped before the temporary Prefect server was up; run the "
                                  "same command again to resume" if asked else "the temporary Prefect server did "
                                  "not start, so the rollout was stopped; run the same command again to resume, "
                                  "or point PREFECT_API_URL at a Prefect server")
            with server.serve() if not configured else contextlib.nullcontext():
                state = off_the_main_thread(lambda: attached(head_start=token, **params, return_state=True))
                drain()  # the run's last logs and events reach the server before it goes
        finally:
            # a run no flow run shows (the server never came up, or the flow run failed to attach)
            # is stopped, and given a moment to say so in its journal; the same command resumes it
            HEAD_STARTS.pop(token, None)
            if not head.ended.done():
                STOP.set()
                with contextlib.suppress(Exception):
                    head.ended.exception(timeout=HEAD_START_STOP_S)
    ended = RunOutcome.from_state(state)
    if head.ended.done() and head.ended.exception() is None:
        ended.final = head.ended.result()
    return ended


# a head start stopped before its flow run attached: how long its engine gets to mark the journal
HEAD_START_STOP_S = 10.0


def _prefect_configured() -> bool:
    """A Prefect API is configured after all (a profile or a settings file): the run uses it."""
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


def off_the_main_thread(call: Callable[[], Any]) -> Any:
    """Run the flow on a thread of its own while the main thread waits for it, answering signals.

    On the main thread, Prefect's flow engine replaces the SIGTERM handler for the run's length
    with one raising TerminationSignal wherever the run is: it then unwinds through a batch whose
    writes still retry an outage (minutes) and ends in a traceback. Off the main thread Prefect
    installs none, so SIGTERM reaches :func:`stop_on_signals` as Ctrl-C does.
    """
    import contextvars

    ended: dict[str, Any] = {}

    def run_it() -> None:
        try:
            ended["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - raised again on the main thread
            ended["error"] = exc

    thread = threading.Thread(target=contextvars.copy_context().run, args=(run_it,), name="flow-run")
    thread.start()
    while thread.is_alive():
        thread.join(0.2)  # short joins: the signal handlers run on this thread between them
    if "error" in ended:
        raise ended["error"]
    return ended["value"]


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Ctrl-C or SIGTERM asks the run to stop: the engine marks the journal stopped and the flow
    run ends Cancelled within a moment (exit 130). A second Ctrl-C leaves at once."""
    import signal

    from flows.stop import STOP  # not flows.shell: that imports Prefect, a second before the rollout can begin

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
    run_ = run_deployment(deployment, parameters=params, timeout=None if wait else 0, as_subflow=False)
    assert isinstance(run_, FlowRun)  # called outside an event loop, it answers at once
    if not wait:
        out.print(f"started flow run {run_.name} ({run_.id}); `rollout status {params['name']} --watch` follows it",
                  highlight=False, soft_wrap=True)
        return None
    return RunOutcome.from_flow_run(run_)


class live_progress:
    """A live per-phase progress display on stderr: fed from the run itself when it runs in this
    process (``view``: its latest journal and view of the nodes, None before its first decision;
    no request), else from the cluster (not from the flow). A run of this process is drawn only
    from its view, never read from the cluster meanwhile: at 20,000 nodes that read is a listing
    of every node and Lease."""

    def __init__(self, rollout: str, kubeconfig: Optional[str], context: Optional[str], *,
                 view: Callable[[], tuple[Journal, Mapping[str, NodeObservation]] | None] | None = None) -> None:
        self.rollout, self.kubeconfig, self.context = rollout, kubeconfig, context
        self.view = view
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "live_progress":
        if not err.is_terminal:
            return self
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        from rich.live import Live

        from rollout.usecases import own_view_status, rollout_status
        from rollout_cli.watch import status_renderable

        gateway = None
        with Live(console=err, refresh_per_second=2, transient=True) as live:
            while not self._stop.wait(1.0):
                try:
                    if self.view is not None:
                        seen = self.view()
                        if seen is not None:  # else not planned yet: nothing to show but what start-up prints
                            live.update(status_renderable(own_view_status(*seen), compact=True))
                        continue
                    gateway = gateway or _gateway(self.kubeconfig, self.context)
                    with gateway.cut_short_by(self._stop):  # the run's end ends a read riding out an outage
                        live.update(status_renderable(rollout_status(gateway, self.rollout), compact=True))
                except Exception:  # noqa: BLE001 - the display never breaks a rollout
                    continue

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=3)
