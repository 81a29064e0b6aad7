"""`--help` that keeps every name whole: options, their metavars, environment variables, commands.

Typer's rich help draws a table with a column per part of an option and shrinks all of them to the
terminal: at 80 columns (and piped, where it assumed 80) it cut names (``--prometheus-tok…``,
``KUBELET_ROLLOUT_P…``) and showed a type even for a flag (``<bool>``). Here only descriptions
wrap, between words (never inside a name or at a hyphen): each option is its names and metavar,
then its description beside them when the terminal has room for the longest word of any
description, else on the lines below. A flag has no metavar. Piped, descriptions wrap at 80
columns, as a pager shows them.

The commands use it through :class:`RolloutTyper` (``rollout_cli.base.app``, the fleet group).
"""

from __future__ import annotations

import functools

import inspect
import textwrap
from typing import Any, Callable

import typer
from rich.text import Text
from typer.core import TyperCommand, TyperGroup
from typer.models import CommandFunctionType

INDENT = 2
GAP = 2
NAMES_MAX = 30  # a longer left column puts its description on the next line
STACKED_INDENT = 6  # a description under its names, on a terminal too narrow for two columns
DESCRIPTION_MIN = 20


class HelpCommand(TyperCommand):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        print_help(self, ctx)


class HelpGroup(TyperGroup):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        print_help(self, ctx)


def _handled(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` as the app runs it: through ``rollout_cli.console.guard``, the one error handler
    (imported when the command runs: ``base`` builds the app with this class)."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        from rollout_cli.console import guard

        return guard(lambda: command(*args, **kwargs))

    return run


class RolloutTyper(typer.Typer):
    """A Typer app whose groups and commands print their help with :func:`print_help`."""

    def __init__(self, **options: Any) -> None:
        super().__init__(cls=HelpGroup, **options)

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None,
                **options: Any) -> Callable[[CommandFunctionType], CommandFunctionType]:
        """Register a command whose errors of ours end it as one message and its exit code
        (``rollout_cli.console.guard``: the one handler where every command starts)."""
        register = super().command(name, cls=cls or HelpCommand, **options)

        def decorator(fn: CommandFunctionType) -> CommandFunctionType:
            register(_handled(fn))
            return fn

        return decorator

    def callback(self, *args: Any, **options: Any) -> Callable[[CommandFunctionType], CommandFunctionType]:
        """A group's own callback (`rollout prometheus` runs one), handled as a command is."""
        register = super().callback(*args, **options)

        def decorator(fn: CommandFunctionType) -> CommandFunctionType:
            register(_handled(fn))
            return fn

        return decorator


def print_help(command: Any, ctx: Any) -> None:
    """Usage, description, arguments, options (and a group's commands) on ``rollout_cli.console.out``."""
    from rollout_cli.console import help_width, out

    width = help_width()
    lines: list[Text] = [Text.assemble(("Usage: ", "bold"), " ".join([ctx.command_path, *_usage(command, ctx)]))]
    for paragraph in _paragraphs(command.help or ""):
        lines += [Text(""), *(Text(line) for line in _wrap(paragraph, width - INDENT, INDENT))]
    params = [p for p in command.get_params(ctx) if not getattr(p, "hidden", False)]
    arguments = [(_argument_names(p), _description(p, ctx)) for p in params if p.param_type_name == "argument"]
    options = [(_option_names(p, ctx), _description(p, ctx)) for p in params if p.param_type_name == "option"]
    for title, entries in (("Arguments", arguments), ("Options", options)):
        if entries:
            lines += [Text(""), Text(f"{title}:", style="bold"), *_section(entries, width)]
    if isinstance(command, TyperGroup):
        commands = [(Text(name, style="bold cyan"), _summary(sub.help or ""))
                    for name in command.list_commands(ctx)
                    if (sub := command.get_command(ctx, name)) is not None and not sub.hidden]
        if commands:
            lines += [Text(""), Text("Commands:", style="bold"), *_section(commands, width)]
    for line in lines:  # already wrapped: a word longer than the terminal stays whole
        out.print(line, soft_wrap=True, highlight=False)


def _usage(command: Any, ctx: Any) -> list[str]:
    """``[OPTIONS] NAME``, ``[OPTIONS] [NAME]``; a group's ``[OPTIONS] COMMAND [ARGS]...``."""
    pieces = ["[OPTIONS]"]
    for param in command.get_params(ctx):
        if param.param_type_name == "argument":
            name = _argument_names(param).plain + ("..." if param.nargs != 1 else "")
            pieces.append(name if param.required else f"[{name}]")
    if isinstance(command, TyperGroup):
        pieces.append("COMMAND [ARGS]...")
    return pieces


def _option_names(param: Any, ctx: Any) -> Text:
    """``-c, --config PATH``; a flag as ``--wait / --no-wait``, with no metavar."""
    names = Text(", ".join(sorted(param.opts, key=len)), style="bold cyan")
    if param.secondary_opts:
        names.append(" / ").append(", ".join(sorted(param.secondary_opts, key=len)), style="bold magenta")
    if not param.is_flag and not param.count:
        names.append(" ").append(_metavar(param, ctx), style="yellow")
    return names


def _argument_names(param: Any) -> Text:
    return Text(param.metavar or (param.name or "").upper(), style="bold cyan")


def _metavar(param: Any, ctx: Any) -> str:
    if param.metavar is not None:
        return str(param.metavar)
    shown = str(param.display_type(ctx)).strip("<>")  # typer says <str>, <path>, <table|json|yaml>
    return f"[{shown}]" if "|" in shown else {"str": "TEXT"}.get(shown, shown.upper())


def _description(param: Any, ctx: Any) -> str:
    """The help text with its ``[env var: ...; default: ...; required]``, as typer words them."""
    record = param.get_help_record(ctx)
    return " ".join(str(record[1]).split()) if record else ""


def _summary(text: str) -> str:
    """A command's first paragraph, on one line (whole: a command list never cuts a sentence)."""
    paragraphs = _paragraphs(text)
    return paragraphs[0] if paragraphs else ""


def _paragraphs(text: str) -> list[str]:
    """A docstring's paragraphs, each joined into one line."""
    return [" ".join(block.split()) for block in inspect.cleandoc(text).split("\n\n") if block.strip()]


def _wrap(text: str, width: int, indent: int) -> list[str]:
    """``text`` in lines of at most ``width`` after ``indent`` spaces, broken only between words."""
    return textwrap.wrap(text, max(width, 1), initial_indent=" " * indent, subsequent_indent=" " * indent,
                         break_long_words=False, break_on_hyphens=False) or [""]


def _section(entries: list[tuple[Text, str]], width: int) -> list[Text]:
    """Names beside their descriptions when the terminal fits every description's longest word
    there, else each description below its names."""
    left = min(max(names.cell_len for names, _ in entries), NAMES_MAX)
    beside = width - INDENT - left - GAP
    longest_word = max((len(word) for _, description in entries for word in description.split()), default=0)
    lines: list[Text] = []
    for names, description in entries:
        if beside >= max(longest_word, DESCRIPTION_MIN):
            wrapped = [line.strip() for line in _wrap(description, beside, 0)]
            if names.cell_len > left:  # its description starts on the next line, in the column
                lines.append(Text(" " * INDENT) + names)
                lines += [Text(" " * (INDENT + left + GAP) + line) for line in wrapped if line]
                continue
            first = Text(" " * INDENT) + names + Text(" " * (left - names.cell_len + GAP) + wrapped[0])
            lines += [first, *(Text(" " * (INDENT + left + GAP) + line) for line in wrapped[1:])]
        else:
            lines.append(Text(" " * INDENT) + names)
            lines += [Text(line) for line in _wrap(description, width - STACKED_INDENT, STACKED_INDENT) if line.strip()]
    return lines
