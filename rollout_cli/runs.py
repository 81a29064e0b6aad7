"""`rollout start`, `rollout retry` and `rollout rollback`: commands that run a flow to its end.

One way a run executes (``rollout.run.Run``): the command checks its request once
(``rollout.run.request``), begins the run at once in this process (the lock, the nodes, the
config, the plan, the loop), shows it on the terminal from the run's own status (the same
function as ``rollout status``) and, once a Prefect API answers (a temporary server started first
thing, or the one configured), shows it in a flow run too (``flows.rollout_flow.showing``). With
``--deployment`` the run happens on a worker and the terminal follows it through the cluster.

Exit codes are the run outcome's (``rollout.outcome``); the report is rendered markdown on a
terminal and the markdown itself when piped (a pipe keeps every identifier whole).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import threading
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import typer
from rich.markup import escape

from rollout import flags
from rollout.errors import ConfigError, RolloutError
from rollout.inputs import read_input
from rollout.outcome import Outcome
from rollout_cli.local import prefect_server
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
    emit,
    open_cluster,
    checked,
    complete_rollouts,
)
from rollout_cli.console import fail, err, out, print_markdown

if TYPE_CHECKING:
    from flows.outcome import RunOutcome
    from rollout.journal import Journal
    from rollout.run import PrometheusAddress, Run, RunRequest

# a stopped run reads the rollout back for its JSON this long at most: the API server may be away
STOPPED_READ_S = 1.0
# how long the Prefect side waits for a run's first writes (a canary node: well under a second)
UNDER_WAY_WAIT_S = 5.0

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
    from rollout.run import resumed_request, rollout_request

    if config is not None and configmap is not None:
        fail(EXIT_INVALID, "--config: give one of --config FILE or --configmap NAMESPACE/NAME, not both")
    asks = prometheus_address(prometheus, prometheus_token_file, prometheus_ca_file)
    where = kubeconfig_path(kubeconfig)
    if config is None and configmap is None:
        request = (resumed_request(_load(name, kubeconfig, context), name=name, policy=policy,
                                                 time_scale=time_scale, prometheus=asks, kubeconfig=where,
                                                 context=context))
        _say_resuming(request, retrying=False)
    else:
        text = read_input(config, error=ConfigError) if config is not None else None
        request = (rollout_request(name=name, config=text, configmap=configmap, policy=policy,
                                                 node_selector=selector, time_scale=time_scale, prometheus=asks,
                                                 config_source=str(config), kubeconfig=where, context=context))
    execute(request, deployment=deployment, wait=wait, output=output)


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
    from rollout.run import resumed_request

    asks = prometheus_address(prometheus, prometheus_token_file, prometheus_ca_file)
    request = (resumed_request(_load(name, kubeconfig, context), name=name, retrying=True,
                                             time_scale=time_scale, prometheus=asks,
                                             kubeconfig=kubeconfig_path(kubeconfig), context=context))
    _say_resuming(request, retrying=True)
    execute(request, deployment=None, wait=True, output=output)


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
    from rollout.run import rollback_request

    journal = None if policy is not None else _load(name, kubeconfig, context)
    request = (rollback_request(journal, name=name, to=to.value, policy=policy,
                                              kubeconfig=kubeconfig_path(kubeconfig), context=context))
    execute(request, deployment=deployment, wait=wait, output=output)


def register(app: typer.Typer) -> None:
    app.command()(start)
    app.command()(retry)
    app.command()(rollback)


# ----------------------------------------------------------------------------- the inputs


def kubeconfig_path(kubeconfig: Optional[str]) -> Optional[str]:
    """The kubeconfig as a run is given it: absolute (a worker elsewhere reads the same file)."""
    return str(Path(kubeconfig).resolve()) if kubeconfig else None


def prometheus_address(address: Optional[str], token_file: Optional[str], ca_file: Optional[str]) -> PrometheusAddress:
    """Where the policy's analysis checks ask, as given (files made absolute: a run elsewhere reads them)."""
    from rollout.run import PrometheusAddress

    return PrometheusAddress(address, str(Path(token_file).resolve()) if token_file else None,
                             str(Path(ca_file).resolve()) if ca_file else None)


def checked_config(config: Optional[Path], policy: Optional[str]) -> str:
    """The config's text, refused here (offline: the 1.23 rules) before anything starts; the
    verdict against the nodes' running config comes with the command (``rollout.usecases.prepare``)."""
    from rollout.usecases import refuse_invalid_config

    assert config is not None
    text = read_input(config, error=ConfigError)
    refuse_invalid_config(text, source=str(config), policy_ref=policy, suffix=": nothing was started")
    return text


def _load(name: str, kubeconfig: Optional[str], context: Optional[str]) -> Journal | None:
    from rollout.usecases.status import load_journal

    loaded = load_journal(open_cluster(kubeconfig, context), name)
    return loaded[0] if loaded is not None else None


def _say_resuming(request: RunRequest, *, retrying: bool) -> None:
    verb = "retrying" if retrying else "resuming"
    err.print(f"{verb} rollout {request.name} from its journal: config {request.configmap}, policy "
              f"{request.policy.name}", highlight=False, soft_wrap=True)


def policy_param(policy: Optional[str]) -> str:
    """The policy as a flow receives it (``rollout.run.request.policy_source``)."""
    from rollout.policy import load_policy_ref
    from rollout.run.request import policy_source

    return policy_source(policy, load_policy_ref(policy))


# ------------------------------------------------------------------------------- the run


def execute(request: RunRequest, *, deployment: Optional[str], wait: bool, output: Output) -> None:
    """Run ``request`` to its end (here, or on ``deployment``), then show how it ended and exit with its code."""
    if deployment:
        if not request.is_rollback:  # the worker asks its Prometheus (it may be on another network)
            from rollout.prometheus import ready_metrics_source

            address = request.prometheus
            ready_metrics_source(request.policy, address=address.url, token_file=address.token_file,
                                 ca_file=address.ca_file, probed=False)
        params = {k: v for k, v in request.flow_parameters().items() if v is not None}
        with live_progress(_cluster_status(request)) if wait else contextlib.nullcontext():
            outcome = _run_on_deployment(deployment, params, wait=wait, status=status_command(request),
                                         name=request.name, output=output)
        if outcome is None:
            return
    else:
        outcome = run_here(request)
    if output == Output.table:
        print_outcome(request.name, outcome)
    else:
        emit(_run_json(request, outcome), output)
    raise typer.Exit(outcome.outcome.exit_code)


def run_here(request: RunRequest) -> RunOutcome:
    """Run ``request`` in this process: begun at once; shown in a flow run once a Prefect API answers."""
    server = prefect_server.TemporaryServer() if prefect_server.needed() else None  # first: it takes seconds
    try:
        with stop_on_signals():
            return _run_and_show(request, server)
    finally:
        if server is not None:
            server.stop()


def _run_and_show(request: RunRequest, server: prefect_server.TemporaryServer | None) -> RunOutcome:
    from flows.cluster import begin_run, run_tools
    from flows.stop import STOP

    run = begin_run(request, run_tools(request))  # refused here when the analysis has nowhere to ask
    run.wait_began(STOP)
    if STOP.is_set() or not _began(run):  # stopped, or refused before it began (the lock, the config...)
        run.stop()
        run.wait_ended()
        return _outcome_of(run)
    err.print(f"rollout {request.name}: started; `{escape(status_command(request))}` shows it", highlight=False,
              soft_wrap=True)
    # Prefect's import (a second of CPU) waits for the run's first writes too: beside them it held
    # them up by as much; the temporary server is not up before then anyway
    run.wait_under_way(UNDER_WAY_WAIT_S, STOP)
    with live_progress(run.status):
        state = _shown_in_prefect(run, server)
        run.stop()  # a flow run that ended before its run (it never came up, or Prefect failed) stops it
        run.wait_ended()
    return _outcome_of(run, state)


def status_command(request: RunRequest) -> str:
    """``rollout status NAME`` with the run's own --kubeconfig and --context: copied from the
    screen into another shell (the demo's cluster is no one's default), it reads the same cluster."""
    words = ["rollout", "status", request.name]
    words += ["--kubeconfig", request.kubeconfig] if request.kubeconfig else []
    words += ["--context", request.context] if request.context else []
    return shlex.join(words)


def _began(run: Run) -> bool:
    try:
        run.began()
    except BaseException:  # noqa: BLE001 - the run's end says it
        return False
    return True


def _shown_in_prefect(run: Run, server: prefect_server.TemporaryServer | None) -> Any:
    """The flow run that shows ``run`` (its final state), once a Prefect API answers; None when none
    did before the run was stopped (the run is then stopped: nothing would show its gates)."""
    from flows.stop import STOP

    from flows.rollback_flow import kubelet_config_rollback
    from flows.rollout_flow import kubelet_config_rollout, showing
    from rollout_cli.local.prefect_home import drain

    configured = server is None or _prefect_configured()
    if STOP.is_set() or (not configured and server is not None and not server.wait_ready(stop=STOP)):
        if not STOP.is_set():
            err.print("the temporary Prefect server did not start, so the rollout is stopped; run the same command "
                      "again to resume, or point PREFECT_API_URL at a Prefect server", highlight=False, soft_wrap=True)
        return None
    flow: Callable[..., Any] = kubelet_config_rollback if run.request.is_rollback else kubelet_config_rollout
    with server.serve() if server is not None and not configured else contextlib.nullcontext(), showing(run):
        state = off_the_main_thread(lambda: flow(**run.request.flow_parameters(), return_state=True))
        drain()  # the run's last logs and events reach the server before it goes
    return state


def _outcome_of(run: Run, state: Any = None) -> RunOutcome:
    from flows.outcome import RunOutcome

    return RunOutcome.of_run(run, state)


def _prefect_configured() -> bool:
    """A Prefect API is configured after all (a profile or a settings file): the run uses it."""
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


def _cluster_status(request: RunRequest) -> Callable[[], dict[str, Any] | None]:
    """The rollout's status as ``rollout status`` reads it from the cluster (a run elsewhere)."""
    from rollout.errors import RolloutNotFoundError
    from rollout.usecases import rollout_status

    gateway = None

    def read() -> dict[str, Any] | None:
        nonlocal gateway
        gateway = gateway or open_cluster(request.kubeconfig, request.context)
        try:
            return rollout_status(gateway, request.name)
        except RolloutNotFoundError:
            return None

    return read


def print_outcome(name: str, outcome: RunOutcome) -> None:
    """The report (rendered on a terminal, the markdown itself when piped), then one line: how
    the run ended, and why."""
    if outcome.report:
        print_markdown(out, outcome.report)
    colour = "green" if outcome.ok else "yellow" if outcome.outcome in (Outcome.DEFERRED, Outcome.STOPPED) else "red"
    # soft_wrap: how the run ended stays one line however narrow the terminal (scripts grep it)
    out.print(f"[{colour}]{name}: {outcome.outcome}[/{colour}]: {escape(outcome.message)}", highlight=False,
              soft_wrap=True)
    if outcome.hint:
        err.print(f"  hint: {escape(outcome.hint)}", highlight=False, soft_wrap=True)


def _run_json(request: RunRequest, outcome: RunOutcome) -> dict[str, Any]:
    """`start`/`rollback` -o json (schemas/run.json): how the run ended, plus the rollout as
    `rollout status` shows it (null when the run was refused before it had a journal, or was
    stopped while the API server was out of reach)."""
    from rollout.usecases import final_status, rollout_status

    name = request.name
    try:
        gateway = open_cluster(request.kubeconfig, request.context)
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


def _run_on_deployment(deployment: str, params: dict[str, Any], *, wait: bool, status: str, name: str,
                       output: Output) -> RunOutcome | None:
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment

    from flows.outcome import RunOutcome

    params = {k: v for k, v in params.items() if v is not None}
    run_ = run_deployment(deployment, parameters=params, timeout=None if wait else 0, as_subflow=False)
    assert isinstance(run_, FlowRun)  # called outside an event loop, it answers at once
    if not wait:
        # --run: until a worker begins the run, the journal still shows the rollout's last end
        follow = f"{status} --watch --run {run_.id}"
        emit(submitted(name, deployment, run_, follow), output,
             lambda: out.print(f"started flow run {run_.name} ({run_.id}); `{escape(follow)}` follows it",
                               highlight=False, soft_wrap=True))
        return None
    return RunOutcome.from_flow_run(run_)


def submitted(name: str, deployment: str, flow_run: Any, follow: str | None) -> dict[str, Any]:
    """A run handed to a deployment and not followed (schemas/submitted.json)."""
    return {"name": name, "deployment": deployment, "flow_run_id": str(flow_run.id), "flow_run_name": flow_run.name,
            "follow": follow}


class live_progress:
    """A live per-phase progress display on stderr, a terminal only: ``read`` gives the rollout's
    status each second (``rollout.usecases.status.status_dict``'s document: a run of this process reads its
    own, ``Run.status``; one elsewhere reads the cluster, as ``rollout status`` does), None while
    there is nothing to show yet."""

    def __init__(self, read: Callable[[], dict[str, Any] | None]) -> None:
        self.read = read
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "live_progress":
        if not err.is_terminal:
            return self
        from prefect.logging.configuration import ensure_logging_setup

        # Prefect's console handlers exist before the display, so it takes them before their first
        # line (Prefect is imported next anyway, to show the run)
        ensure_logging_setup()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        from rich.live import Live

        from rollout_cli.console import PrefectLogsAbove
        from rollout_cli.watch import stale_renderable, status_renderable

        with Live(console=err, refresh_per_second=2, transient=True) as live:
            logs = PrefectLogsAbove(live.console)
            logs.adopt()
            last: tuple[dict[str, Any], datetime] | None = None
            try:
                while not self._stop.wait(1.0):
                    logs.adopt()  # again: a handler Prefect set up anew since
                    try:
                        data = self.read()
                        if data is not None:  # else nothing to show yet but what start-up prints
                            last = (data, datetime.now(timezone.utc))
                            live.update(status_renderable(data, compact=True))
                    except Exception as exc:  # noqa: BLE001 - the display never breaks a rollout
                        if last is not None:  # the last look, said to be one, not a frozen screen
                            with contextlib.suppress(Exception):
                                live.update(stale_renderable(*last, exc))
            finally:
                logs.release()

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=3)
