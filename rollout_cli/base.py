"""What every `rollout` command shares: the app, the consoles, output formats, options, exit codes,
and the one way an error becomes a message and an exit code. The commands live in ``main``
(rollouts, status, approvals, the demo) and ``lifecycle`` (list, pause, resume, abort, promote).
"""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, NoReturn, Optional, TypeVar

import typer
import yaml
from rich.console import Console, ConsoleDimensions, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Column, Table
from rich.text import Text

from rollout import flags
from rollout.errors import InputError, RolloutError
from rollout.outcome import Outcome
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
    help="Staged canary rollouts of kubelet configuration (Dynamic Kubelet Config) on Prefect.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
# Piped, a line is as long as it needs: an identifier cut at 80 columns (``kubelet-confi...``) or a
# command split over two lines cannot be grepped or pasted. Wrapping (never an ellipsis: columns
# fold) is for a terminal too narrow for the line; COLUMNS, when set, still wins.
PIPED_WIDTH = 4096
# ... but an ornament (a section rule) has no length of its own: piped, it is a terminal's width.
PIPED_RULE_WIDTH = 80


class _Console(Console):
    """A console as wide as its lines when its stream is not a terminal. Rich asks every standard
    stream for a terminal size, so ``rollout list | cat`` typed in a terminal was cut at its width.
    On a terminal it never crops a line either: the only lines wider than the terminal are an
    identifier longer than it (a table's record, ``FittingTable``), which the terminal wraps whole."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        if options.get("width") is None:
            self._width = None  # rich froze COLUMNS as the process had it at import: read it at each print

    def print(self, *objects: Any, crop: bool = False, **options: Any) -> None:
        super().print(*objects, crop=crop, **options)

    @property
    def piped(self) -> bool:
        """Not a terminal, and no width asked for (``width=``, ``COLUMNS``)."""
        return self._width is None and not self.is_terminal and "COLUMNS" not in self._environ

    @property
    def size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)  # type: ignore[attr-defined]
        if self.piped:
            return ConsoleDimensions(PIPED_WIDTH, size.height)
        return size  # type: ignore[no-any-return]

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    def rule(self, title: Any = "", *, characters: str = "─", style: Any = "rule.line",
             align: Any = "center") -> None:
        if self.piped:
            self.print(Rule(title, characters=characters, style=style, align=align), width=PIPED_RULE_WIDTH)
        else:
            super().rule(title, characters=characters, style=style, align=align)


out = _Console()
err = _Console(stderr=True)


def help_width() -> int:
    """How wide `--help` wraps its descriptions: the terminal's width; piped, a terminal's (a
    pager shows it, and no name is ever cut either way: ``rollout_cli.help``)."""
    return PIPED_RULE_WIDTH if out.piped else out.size.width


def print_markdown(console: Console, text: str) -> None:
    """A report: rendered on a terminal; piped, the markdown itself (rendered, each line would be
    padded to the piped width, and a markdown file is what a log or a script wants anyway)."""
    if console.is_terminal:
        from rich.markdown import Markdown

        console.print(Markdown(text))
    else:
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def table(*headers: str, prose: Iterable[str] = (), **options: Any) -> Table:
    """A table that never splits an identifier (a node, a config ``ns/name@rv``, a rollout, a run
    id): each column is one (never wrapped) except the ``prose`` ones (an error, a value, a list),
    which wrap between words. A terminal too narrow for the identifiers whole shows each row as a
    record instead (:class:`FittingTable`)."""
    wrapped = set(prose)
    return FittingTable(*(Column(h, overflow="fold") if h in wrapped else Column(h, no_wrap=True, overflow="ignore")
                          for h in headers), **options)


# wide enough for any line of ours: a measure with no limit
UNLIMITED = 1 << 20


class FittingTable(Table):
    """A table as wide as its identifiers need, on a terminal as narrow as it is.

    Its identifier columns are ``no_wrap`` and at least as wide as their longest cell, so rich
    narrows only the prose columns, down to their longest word. When even that is wider than the
    terminal, each row is shown as a record (its first cell, then ``header value`` pairs, as many
    to a line as fit) rather than a table whose identifiers would be cut or folded."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        unlimited = options.update_width(UNLIMITED)
        for column in self.columns:
            if column.no_wrap:
                cells = [column.header, *column.cells] if self.show_header else list(column.cells)
                column.min_width = max((Measurement.get(console, unlimited, c).maximum for c in cells), default=0)
        if Measurement.get(console, unlimited, self).minimum <= options.max_width:
            yield from super().__rich_console__(console, options)
        else:
            yield from self._records(console, options.max_width)

    def _records(self, console: Console, width: int) -> RenderResult:
        if self.title:
            yield Text(str(self.title), style="italic")
        columns = [(str(c.header), c.no_wrap, list(c.cells)) for c in self.columns]
        for row in range(self.row_count):
            lines = [_as_text(console, columns[0][2][row], style="bold")]
            wrapped: list[Text] = []
            for header, whole, cells in columns[1:]:
                value = _as_text(console, cells[row])
                if not value.plain.strip():
                    continue
                pair = Text.assemble((header, "dim"), " ", value)
                if not whole:
                    wrapped.append(pair)
                elif lines[-1].cell_len + 2 + pair.cell_len <= width:
                    lines[-1].append("  ").append_text(pair)
                else:
                    lines.append(Text("  ").append_text(pair))
            for line in lines:  # one too long for the terminal stays whole: the terminal wraps it
                line.no_wrap, line.overflow = True, "ignore"
                yield line
            for pair in wrapped:
                yield Padding(pair, (0, 0, 0, 4))


def _as_text(console: Console, cell: Any, style: str = "") -> Text:
    """A cell as styled text (a string cell is markup, as a table reads it)."""
    text = cell.copy() if isinstance(cell, Text) else console.render_str(str(cell)) if isinstance(cell, str) \
        else Text(str(cell))
    if style:
        text.stylize(style)
    return text


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


def fail(code: int, message: str) -> NoReturn:
    # soft_wrap: one error stays one line however narrow the terminal (scripts grep for it)
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def guard(fn: Callable[[], Any]) -> Any:
    """Run ``fn``, turning our errors into a message and an exit code: every command of the app
    runs through it (``rollout_cli.help.RolloutTyper``), so no command body handles them itself."""
    try:
        return fn()
    except typer.Exit:
        raise
    except RolloutError as exc:
        advice = getattr(exc, "advice", "")
        hint = advice and advice not in str(exc)  # a ForbiddenError's line carries its hint
        fail(exc.outcome.exit_code, f"{exc}" + (f"\n  hint: {advice}" if hint else ""))
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(EXIT_INTERRUPTED)


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
