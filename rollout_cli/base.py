"""What every `rollout` command shares: the app, output formats, options and their checks, exit
codes (the consoles and the one error handler are ``rollout_cli.console``'s). The commands live in
``main`` (rollouts, status, approvals, the demo), ``runs`` (start, retry, rollback), ``lifecycle``
(list, pause, resume, abort, promote), ``watch`` (status), ``fleet`` and ``prometheus_command``.
"""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

import typer
import yaml

from rollout import flags
from rollout.errors import InputError
from rollout.outcome import Outcome
from rollout_cli.console import fail, out
from rollout_cli.help import RolloutTyper

if TYPE_CHECKING:
    from rollout.ports import Gateway

# Without PREFECT_API_URL, Prefect serves its API from a temporary server this process starts (it
# inherits this environment). It must not phone home (and log "Failed to send telemetry" when it
# cannot), and its own service logs are not the user's business: SQLite's "database is locked"
# from its background services is harmless there and known upstream (PrefectHQ/prefect#18934).
# Only the temporary server reads these settings; an explicit setting still wins.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")

# Exit codes are the outcomes' (rollout.outcome); named here for the commands that end without a
# run (a bad flag is invalid input, an unknown rollout not found, a diff found is a failure)
EXIT_OK = Outcome.COMPLETED.exit_code
EXIT_FAILED = Outcome.FAILED.exit_code
EXIT_INVALID = Outcome.INVALID.exit_code
EXIT_CLUSTER = Outcome.CLUSTER_ERROR.exit_code
EXIT_LOCKED = Outcome.LOCKED.exit_code
EXIT_NOT_FOUND = Outcome.NOT_FOUND.exit_code
EXIT_DEFERRED = Outcome.DEFERRED.exit_code
EXIT_INTERRUPTED = Outcome.STOPPED.exit_code
# `status --watch` stops at a state that names how a run ended (a stopped rollout has no
# finished_at: it may resume); running, reverting, rolling-back, paused, unresponsive go on
ENDED_STATES = frozenset(outcome.value for outcome in Outcome)

app = RolloutTyper(
    name="rollout",
    help=("Staged canary rollouts of kubelet configuration on Prefect: Dynamic Kubelet Config (1.11-1.23) "
          "or the node agent's drop-ins (1.24+)."),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
def _version(show: bool) -> None:
    if show:
        from importlib.metadata import version

        out.print(f"rollout {version('kubelet-rollout')}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Show the version and exit."),
) -> None:
    """Staged canary rollouts of kubelet configuration on Prefect: Dynamic Kubelet Config
    (1.11-1.23) or the node agent's drop-ins (1.24+)."""


class Output(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


T = TypeVar("T")


def checked(rule: Callable[..., T]) -> Callable[[typer.Context, typer.CallbackParam, Any], Any]:
    """A parameter callback passing the value through the input boundary (``rollout.flags``):
    a bad value is one message naming the flag and exit 2, before anything starts."""

    def callback(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        if value is None or ctx.resilient_parsing:  # not given, or shell completion asking
            return value
        flag = _flag_name(param)
        return _boundary(lambda: rule(value, flag=flag))

    return callback


def _flag_name(param: typer.CallbackParam) -> str:
    """How a message names a parameter: ``-l/--selector``, or an argument's ``NAME``."""
    if param.param_type_name == "argument":
        return (param.name or "").upper()
    return "/".join(sorted(param.opts, key=len))


def _boundary(check: Callable[[], T], *, flag: str = "") -> T:
    """``check()``, or its InputError as one message (naming ``flag`` when it does not) and exit 2."""
    try:
        return check()
    except InputError as exc:
        named = f"{flag}: " if flag and flag not in str(exc) else ""
        fail(EXIT_INVALID, f"{named}{exc}\n  hint: {exc.advice}")


def _context(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> Optional[str]:
    """--context must name a context of the kubeconfig (``--kubeconfig`` is eager: read first)."""
    if value is None or ctx.resilient_parsing:
        return value
    kubeconfig = ctx.params.get("kubeconfig")
    return _boundary(lambda: flags.context(value, kubeconfig_value=kubeconfig))


def _policy_ref(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> Optional[str]:
    """A policy is loaded (and refused) here, before anything starts."""
    if value is None or ctx.resilient_parsing:
        return value
    from rollout.policy import load_policy_ref

    _boundary(lambda: load_policy_ref(value), flag=_flag_name(param))
    return value


def complete_policies(incomplete: str) -> list[str]:
    """Shell completion of --policy: the shipped names and the YAML files here."""
    from rollout.policy import available_policies

    files = [str(p) for p in Path(".").glob("*.y*ml")]
    return [name for name in [*available_policies(), *files] if name.startswith(incomplete)]


def complete_rollouts(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a rollout name: the journals the cluster has (quickly, or none)."""
    try:
        gateway = open_cluster(ctx.params.get("kubeconfig"), ctx.params.get("context")).within(2.0)
        names = [str(json.loads(doc.head["meta"]).get("rollout", "")) for doc in gateway.list_journals()]
    except Exception:  # noqa: BLE001 - completion never fails the shell; it offers nothing
        return []
    return sorted(n for n in names if n.startswith(incomplete))


KubeconfigOpt = typer.Option(None, "--kubeconfig", envvar="KUBECONFIG", is_eager=True, callback=checked(flags.kubeconfig),
                             help="Path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster).")
ContextOpt = typer.Option(None, "--context", callback=_context, help="kubeconfig context to use.")
OutputOpt = typer.Option(Output.table, "-o", "--output", help="Output format.")
ConfigOpt = typer.Option(..., "--config", "-c", help="KubeletConfiguration file (YAML or JSON).")
PolicyOpt = typer.Option(None, "--policy", "-p", callback=_policy_ref, autocompletion=complete_policies,
                         help="A shipped policy name (canary, cautious, fast) or a policy file (default: canary).")
RollbackPolicyOpt = typer.Option(None, "--policy", "-p", callback=_policy_ref, autocompletion=complete_policies,
                                 help="The policy to roll back with (default: the rollout's own).")
NameArg = typer.Argument(..., help="Rollout name.", callback=checked(flags.rollout_name),
                         autocompletion=complete_rollouts)
SelectorOpt = typer.Option(None, "--selector", "-l", callback=checked(flags.label_selector),
                           help="Label selector (kubectl -l syntax; default: the policy's).")


def emit(data: Any, output: Output, table: Callable[[], None] | None = None) -> None:
    if output == Output.json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    elif output == Output.yaml:
        sys.stdout.write(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False))
    elif table is not None:
        table()
    else:
        out.print(data)


def open_cluster(kubeconfig: Optional[str], context: Optional[str]) -> Gateway:
    from rollout.gateway import open_gateway

    return open_gateway(kubeconfig, context)
