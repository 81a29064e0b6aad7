"""Where the `rollout` command writes, and how it ends on an error of ours: the consoles (stdout,
stderr; piped, as wide as a line needs), the tables that never split an identifier, the report
rendered, and the one error handler every command runs through (``rollout_cli.help.RolloutTyper``).
Standard and ``rich`` only: ``help`` and ``base`` both stand on it."""

from __future__ import annotations

import io
import logging
import sys
from typing import IO, Any, Callable, Iterable, NoReturn, cast

import typer
from rich.console import Console, ConsoleDimensions, ConsoleOptions, RenderResult
from rich.file_proxy import FileProxy
from rich.markup import escape
from rich.measure import Measurement
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Column, Table
from rich.text import Text

from rollout.errors import RolloutError
from rollout.outcome import Outcome

EXIT_INTERRUPTED = Outcome.STOPPED.exit_code

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
        width = ornament_width(self)
        heading = self.render_str(title, style="rule.text") if isinstance(title, str) else title
        if isinstance(heading, Text) and heading.cell_len > width - (4 if align == "center" else 2):
            # rich would cut it ("... on every n…"): the title whole above a bare rule (piped, on one line)
            self.print(heading, soft_wrap=self.piped)
            title = ""
        self.print(Rule(title, characters=characters, style=style, align=align), width=width)


def ornament_width(console: Console) -> int:
    """How wide an ornament (a section rule, a box) is drawn: the terminal's width; piped, a
    terminal's (it has no length of its own, where a line of text is as long as it needs)."""
    return PIPED_RULE_WIDTH if getattr(console, "piped", False) else console.size.width


out = _Console()
err = _Console(stderr=True)


def help_width() -> int:
    """How wide `--help` wraps its descriptions: the terminal's width; piped, a terminal's (a
    pager shows it, and no name is ever cut either way: ``rollout_cli.help``)."""
    return PIPED_RULE_WIDTH if out.piped else out.size.width


def print_markdown(console: Console, text: str) -> None:
    """A report: rendered on a terminal, its tables as every table of ours (:func:`table`: rich's
    markdown cut a config's name to ``kube-system/…`` at 80 columns); piped, the markdown itself
    (rendered, each line would be padded to the piped width, and a markdown file is what a log or
    a script wants anyway)."""
    if console.is_terminal:
        console.print(_report_markdown()(text))
    else:
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def _report_markdown() -> type[Any]:
    from rich import box
    from rich.markdown import Markdown, TableElement

    class FittingTableElement(TableElement):
        """A markdown table whose identifiers stay whole: a column with a space in any cell is
        prose (a list of nodes, an outcome in words) and wraps; any other holds identifiers."""

        def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
            headers = [c.content.plain for c in self.header.row.cells] if self.header and self.header.row else []
            rows = [[c.content for c in row.cells] for row in self.body.rows] if self.body else []
            prose = [h for i, h in enumerate(headers) if any(" " in r[i].plain.strip() for r in rows if i < len(r))]
            fitted = table(*headers, prose=prose, box=box.SIMPLE, pad_edge=False, show_edge=True,
                           collapse_padding=True, style="markdown.table.border", header_style="markdown.table.header")
            for row in rows:
                fitted.add_row(*row)
            yield fitted

    class ReportMarkdown(Markdown):
        elements = {**Markdown.elements, "table_open": FittingTableElement}

    return ReportMarkdown


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


class PrefectLogsAbove:
    """While a live display is up on ``console``, Prefect's console log handlers write through it,
    so each line is printed above the display. Written to the terminal directly, a line landed in
    the display's frame: glued to a node's row, and the frame's old copies left on the screen.
    ``adopt`` takes the handlers present now (Prefect sets them up before the display, and may
    again later); ``release`` gives each its file back."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._files: dict[Console, IO[str]] = {}  # each handler's console, and the file it wrote to

    def adopt(self) -> None:
        module = sys.modules.get("prefect.logging.handlers")
        if module is None:
            return
        loggers = [logging.getLogger(), *(logger for logger in list(logging.Logger.manager.loggerDict.values())
                                          if isinstance(logger, logging.Logger))]
        for handler in {h for logger in loggers for h in logger.handlers}:
            console = getattr(handler, "console", None) if isinstance(handler, module.PrefectConsoleHandler) else None
            if isinstance(console, Console) and console not in self._files:
                self._files[console] = console.file
                console.file = cast(IO[str], _PrintedBy(self.console, console.file))

    def release(self) -> None:
        for console, file in self._files.items():
            console.file = file
        self._files.clear()


class _PrintedBy(io.TextIOBase):
    """A file whose lines ``console`` prints: Rich's FileProxy, less the attribute by which a
    Console looks through it to the file underneath (it wrote there, into the display)."""

    def __init__(self, console: Console, file: IO[str]) -> None:
        self._proxy, self._file = FileProxy(console, file), file

    def write(self, text: str) -> int:
        return self._proxy.write(text)

    def flush(self) -> None:
        self._proxy.flush()

    def isatty(self) -> bool:
        return self._file.isatty()

    def fileno(self) -> int:
        return self._file.fileno()


def _as_text(console: Console, cell: Any, style: str = "") -> Text:
    """A cell as styled text (a string cell is markup, as a table reads it)."""
    text = cell.copy() if isinstance(cell, Text) else console.render_str(str(cell)) if isinstance(cell, str) \
        else Text(str(cell))
    if style:
        text.stylize(style)
    return text


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
