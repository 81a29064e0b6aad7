"""What every `rollout` command shares: the app, the consoles, output formats, options, exit codes,
and the one way an error becomes a message and an exit code. The commands live in ``main``
(rollouts, status, approvals, the demo) and ``lifecycle`` (list, pause, resume, abort, promote).
"""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from rollout.errors import RolloutError
from rollout.outcome import Outcome

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

app = typer.Typer(
    name="rollout",
    help="Staged canary rollouts of kubelet configuration (Dynamic Kubelet Config) on Prefect.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


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
    """Staged canary rollouts of kubelet configuration (Dynamic Kubelet Config) on Prefect."""


class Output(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


KubeconfigOpt = typer.Option(None, "--kubeconfig", envvar="KUBECONFIG", help="Path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster).")
ContextOpt = typer.Option(None, "--context", help="kubeconfig context to use.")
OutputOpt = typer.Option(Output.table, "-o", "--output", help="Output format.")
ConfigOpt = typer.Option(..., "--config", "-c", help="KubeletConfiguration file (YAML or JSON).", exists=True, dir_okay=False, readable=True)
PolicyOpt = typer.Option("canary", "--policy", "-p", help="A shipped policy name (canary, cautious, fast) or a policy file.")


def _fail(code: int, message: str) -> NoReturn:
    # soft_wrap: one error stays one line however narrow the terminal (scripts grep for it)
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _guard(fn: Callable[[], Any]) -> Any:
    """Run a command body, turning our errors into a message and an exit code."""
    try:
        return fn()
    except typer.Exit:
        raise
    except RolloutError as exc:
        advice = getattr(exc, "advice", "")
        hint = advice and advice not in str(exc)  # a ForbiddenError's line carries its hint
        _fail(exc.outcome.exit_code, f"{exc}" + (f"\n  hint: {advice}" if hint else ""))
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(EXIT_INTERRUPTED)


def _emit(data: Any, output: Output, table: Callable[[], None] | None = None) -> None:
    if output == Output.json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    elif output == Output.yaml:
        sys.stdout.write(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False))
    elif table is not None:
        table()
    else:
        out.print(data)


def _gateway(kubeconfig: Optional[str], context: Optional[str]) -> Gateway:
    from rollout.gateway import open_gateway

    return open_gateway(kubeconfig, context)
