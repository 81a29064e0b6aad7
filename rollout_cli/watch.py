"""`rollout status`: a rollout as the cluster shows it, what it waits for and until when.

Read from the cluster alone (journal, nodes, lock: ``rollout.usecases.status``), so it works while a rollout
runs, after it ended and after its process died, and from the moment ``rollout start`` took the
rollout's lock (``starting``). ``--watch`` follows it to its end: a live table on a terminal; piped,
one line per change (a frame redrawn in place means nothing to ``tee`` or a CI log), and with
``-o json`` one JSON document per change. A name with no rollout yet is waited for under
``--watch`` (a rollout started on a deployment gets its journal a little later). ``--watch --run
ID`` follows that flow run rather than the journal: a run submitted to a deployment (``--no-wait``)
may not have begun, and until it does the journal still shows the rollout's last end.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Optional

import typer
import yaml
from rich.markup import escape
from rich.text import Text

from rollout import flags
from rollout.errors import RolloutNotFoundError, TransientGatewayError
from rollout.machine.phases import BAD_CONFIG_PHASES, BUDGET_PHASES, SETTLED_PHASES
from rollout.outcome import Outcome
from rollout.report import backend_word
from rollout_cli.base import (
    ENDED_STATES, EXIT_INVALID, EXIT_NOT_FOUND, ContextOpt, KubeconfigOpt, NameArg, Output, OutputOpt, checked, emit,
    open_cluster,
)
from rollout_cli.console import err, fail, out, table

WATCH_EVERY_S = 1.0
# how long a watch that has seen its rollout rides out an API server that stopped answering (a
# control-plane restart, a network blip) before it gives up as a first look would: longer than a
# policy's default apiOutageTolerance (5m), so the run it follows ends first and says why
RIDE_OUT = timedelta(minutes=15)
ON_TARGET = frozenset(phase.value for phase in SETTLED_PHASES)
BAD_PHASES = frozenset(phase.value for phase in BAD_CONFIG_PHASES | BUDGET_PHASES)


def status(
    name: str = NameArg,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    output: Output = OutputOpt,
    watch: bool = typer.Option(False, "--watch", "-w", help="Follow it to its end, and exit with its outcome's code (one line per change when piped)."),
    run_id: Optional[str] = typer.Option(
        None, "--run", callback=checked(flags.run_id),
        help="With --watch: follow this flow run (as `--deployment ... --no-wait` prints it) to its end, and exit "
             "with its code."),
) -> None:
    """Per-node status of a rollout and what it waits for, from the cluster (works after a crash)."""
    if run_id is not None and not watch:
        fail(EXIT_INVALID, "--run: give it with --watch (it names the flow run to follow to its end)")

    def body() -> None:
        from rollout.usecases import rollout_status

        gateway = open_cluster(kubeconfig, context)
        if not watch:
            data = rollout_status(gateway, name)
            emit(data, output, lambda: out.print(status_renderable(data)))
            return
        if run_id is None:  # as `kubectl rollout status`: its exit code says how the rollout ended
            state = (_watch(lambda: rollout_status(gateway, name), name, output) or {}).get("state")
            raise typer.Exit(Outcome(state).exit_code if state in ENDED_STATES else 0)
        _watch_run(lambda: rollout_status(gateway, name), name, run_id, output)

    body()


def _journal_ended(data: dict[str, Any] | None) -> bool:
    return data is not None and bool(data.get("finished_at") or data.get("state") in ENDED_STATES)


def _watch_run(read: Callable[[], dict[str, Any]], name: str, run_id: str, output: Output) -> None:
    """Follow the flow run ``run_id`` (of rollout ``name``) to its end, then exit with its code."""
    from prefect.exceptions import ObjectNotFound

    from flows.outcome import RunOutcome, flow_run_outcome
    from rollout_cli.local.prefect_home import prefect_api

    ending: list[RunOutcome] = []

    def ended(data: dict[str, Any] | None) -> bool:
        if ending:  # this look came after the run's end: its last writes are in it
            return True
        outcome = flow_run_outcome(run_id)[1]
        if outcome is None:
            return False
        ending.append(outcome)
        return data is None  # one more look at the rollout (none if it never had a journal)

    with prefect_api():
        try:  # asked before the first look: an unknown run is refused, and the line comes before any screen
            run_name, outcome = flow_run_outcome(run_id)
        except ObjectNotFound:
            fail(EXIT_NOT_FOUND, f"--run: no flow run {run_id} in the Prefect API; give the id `--no-wait` printed, "
                                 "with PREFECT_API_URL set to the server it ran on")
        if outcome is not None:  # ended already: the first look comes after its end and is the last
            ending.append(outcome)
        else:
            err.print(f"following flow run {run_name} ({run_id}) to its end; until a worker begins it, the rollout "
                      "shows its last run (Ctrl-C to stop)", highlight=False, soft_wrap=True)
        try:
            _watch(read, name, output, ended)  # a run ended already still shows the rollout as it left it
        except KeyboardInterrupt:  # the person stops following; the run is its worker's and goes on
            err.print(f"stopped following flow run {run_name}: it goes on (the same command follows it again)",
                      highlight=False, soft_wrap=True)
            raise
    outcome = ending[0]
    err.print(f"flow run {outcome.flow_run_name or run_id} ended: {outcome.outcome.value}"
              + (f": {outcome.message}" if outcome.message else ""), highlight=False, soft_wrap=True)
    raise typer.Exit(outcome.outcome.exit_code)


def _watch(read: Callable[[], dict[str, Any]], name: str, output: Output,
           ended: Callable[[dict[str, Any] | None], bool] = _journal_ended) -> dict[str, Any] | None:
    """Show each look ``read`` gives until ``ended`` says the last one was the end (None: no
    rollout of that name yet); the last look."""
    last: dict[str, Any] | None = None
    said_waiting = False
    reach = ApiReach(lambda line: err.print(Text(line), highlight=False, soft_wrap=True))

    def frames() -> Any:
        nonlocal said_waiting, last
        while True:
            try:
                data = read()
            except TransientGatewayError as exc:
                reach.failed(exc)  # raises it before the first look, or past RIDE_OUT
                time.sleep(WATCH_EVERY_S)
                continue
            except RolloutNotFoundError:
                if ended(None):  # a run refused before the rollout had a journal
                    return
                if not said_waiting:
                    reach.say(f"no rollout named {name} yet; waiting for it to start (Ctrl-C to stop; `rollout list` "
                           "names the rollouts this cluster has)")  # a mistyped name is never started
                    said_waiting = True
                time.sleep(WATCH_EVERY_S)
                continue
            reach.answered()
            last = data
            yield data
            if ended(data):
                return
            time.sleep(WATCH_EVERY_S)

    retries = logging.getLogger("rollout.gateway")
    retries.addFilter(reach.keeps)
    try:
        if output == Output.table and out.is_terminal:
            from rich.live import Live

            with Live(console=out, refresh_per_second=2) as live:
                # above it, a Text with no soft_wrap: a print above a Live renders the Live's frame
                # with the print's options (markup=False showed the table's markup raw, soft_wrap
                # cut the lock's line)
                reach.say = lambda line: live.console.print(Text(line), highlight=False)
                for data in frames():
                    live.update(status_renderable(data))
        else:
            print_change = ChangePrinter(output, change_line)
            for data in frames():
                print_change(data)
    finally:
        retries.removeFilter(reach.keeps)
    return last


class ApiReach:
    """Whether the API server answers a watch. Before the first look, a failure is the command's
    error (a cluster that is down, a kubeconfig pointing elsewhere). After it, the watch rides the
    outage out as the run it follows does: it says once when the server stopped answering and
    until when it tries, once when it answers again, and gives up after ``RIDE_OUT``. Before: the
    watch exited with an error 17 s into a restart of the API server that the run rode out."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.seen = False
        self.since: Optional[datetime] = None

    def failed(self, exc: TransientGatewayError) -> None:
        from rollout.timefmt import rfc3339_seconds

        now = datetime.now(timezone.utc)
        if not self.seen or (self.since is not None and now - self.since > RIDE_OUT):
            raise exc
        if self.since is None:
            self.since = now
            self.say(f"the API server has not answered since {rfc3339_seconds(now)} ({exc}); trying again every "
                     f"{WATCH_EVERY_S:g}s until {rfc3339_seconds(now + RIDE_OUT)} (Ctrl-C to stop)")

    def answered(self) -> None:
        from rollout.policy import format_whole_seconds

        if self.since is not None:
            away = format_whole_seconds(datetime.now(timezone.utc) - self.since)
            self.say(f"the API server answers again (no answer for {away})")
            self.since = None
        self.seen = True

    def keeps(self, record: logging.LogRecord) -> bool:
        """A filter for the gateway's log while the watch runs: once it has seen its rollout, an
        outage is said once, here, not as each look's eight retry attempts."""
        return not (self.seen and str(record.msg).startswith("API request attempt"))


class ChangePrinter:
    """A piped ``--watch``: a stamped line per change (``line`` gives it), or with ``-o json`` one
    JSON document per change (JSON Lines), with ``-o yaml`` one between ``---`` markers; never a
    frame redrawn in place, which means nothing to ``tee`` or a CI log."""

    def __init__(self, output: Output, line: Callable[[dict[str, Any]], str]) -> None:
        self.output, self.line = output, line
        self.shown: Optional[str] = None

    def __call__(self, data: dict[str, Any]) -> None:
        shown = self.line(data) if self.output == Output.table else _document(data, self.output)
        if shown != self.shown:
            sys.stdout.write(f"{_now()} {shown}\n" if self.output == Output.table else shown)
            sys.stdout.flush()
            self.shown = shown


def _document(data: dict[str, Any], output: Output) -> str:
    """One document per change: JSON on one line (JSON Lines), YAML between ``---`` markers."""
    if output == Output.json:
        return json.dumps(data, default=str) + "\n"
    return "---\n" + yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False)


def _now() -> str:
    from rollout.timefmt import rfc3339_seconds

    return rfc3339_seconds(datetime.now(timezone.utc))


def change_line(data: dict[str, Any]) -> str:
    """A rollout in one line (what changes between two looks), every identifier whole."""
    nodes = data.get("nodes", [])
    done = sum(1 for n in nodes if n["phase"] in ON_TARGET)
    return f"rollout {data.get('name')}: {data.get('state')}  {_where(data)}  {done}/{len(nodes)} nodes on target" \
        f"  {waiting_line(data)}"


def waiting_line(data: dict[str, Any]) -> str:
    """``waiting for soak until 2026-11-25T20:51:10Z: ...`` (what it waits for, until when, and the
    command that ends the wait when a person must act); the reason when it waits for nothing."""
    waits = data.get("waiting")
    if not waits:
        return str(data.get("reason", ""))
    until = f" until {waits['until']}" if waits.get("until") else ""
    command = f" (`{waits['command']}`)" if waits.get("command") else ""
    return f"waiting for {waits['for']}{until}{command}: {data.get('reason') or waits.get('reason', '')}"


def estimate_line(data: dict[str, Any]) -> str:
    """``estimated end 2026-11-30T09:36:12Z (in 1d6h; 1d4h of it waiting for maintenance windows)``,
    "" once it has ended (status -o json: "estimate")."""
    from rollout.policy import format_duration

    estimate = data.get("estimate")
    if not estimate:
        return ""
    if estimate["ends_at"] is None:
        return "no end in sight: no maintenance window of the policy opens again"
    left = format_duration(timedelta(seconds=max(0, estimate["remaining_seconds"] or 0)))
    waits = estimate["window_wait_seconds"]
    windows = f"; {format_duration(timedelta(seconds=waits))} of it waiting for maintenance windows" if waits else ""
    return f"estimated end {estimate['ends_at']} (in {left}{windows}; a person's time at a gate not counted)"


def _where(data: dict[str, Any]) -> str:
    current = data.get("current_batch")
    if not current:
        return f"{data.get('batches', 0)} batch(es)"
    in_batch = [n for n in data.get("nodes", []) if n.get("batch") == current]
    settled = sum(1 for n in in_batch if n["phase"] in ON_TARGET)
    return f"batch {current}/{data.get('batches', '?')}: {settled}/{len(in_batch)} nodes"


def _elapsed(data: dict[str, Any]) -> str:
    """``10m6s`` since the rollout started (to its end when it ended)."""
    from rollout.policy import format_whole_seconds
    from rollout.timefmt import parse_rfc3339

    def parse(stamp: Optional[str]) -> Optional[datetime]:
        return parse_rfc3339(stamp) if stamp else None

    started = parse(data.get("created_at"))
    if started is None:
        return ""
    ended = parse(data.get("finished_at")) or datetime.now(timezone.utc)
    return format_whole_seconds(ended - started)


# a run's live display shows this many node rows at most: a terminal shows no more, and drawing
# every node each second took seconds of CPU at thousands of nodes
COMPACT_ROWS = 20


class _Header:
    """The header and its progress bar, on one line when the terminal has room for a bar of
    ``MIN_BAR`` cells, else the bar and its count on a line of their own: a bar that wrapped
    between words left the count of nodes on target alone on the next line (80 columns)."""

    WIDEST_BAR = 30
    MIN_BAR = 10

    def __init__(self, head: Any, done: int, total: int) -> None:
        self.head, self.share = head, done / total
        self.count = f" {done}/{total} nodes on target"

    def _bar(self, width: int) -> Any:
        filled = round(width * self.share)
        return Text.assemble(("█" * filled, "green"), ("░" * (width - filled), "dim"), self.count)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        beside = options.max_width - self.head.cell_len - 2 - len(self.count)
        if beside >= self.MIN_BAR:
            yield Text.assemble(self.head, "  ", self._bar(min(self.WIDEST_BAR, beside)))
        else:
            yield self.head
            yield self._bar(max(0, min(self.WIDEST_BAR, options.max_width - len(self.count))))


def status_renderable(data: dict[str, Any], compact: bool = False) -> Any:
    """The status as a terminal shows it: a header, what it waits for, the lock, a node table."""
    from rich import box
    from rich.console import Group

    nodes = data.get("nodes", [])
    done = sum(1 for n in nodes if n["phase"] in ON_TARGET)
    head = Text.assemble(
        (f"rollout {data.get('name')}: ", "bold"), (str(data.get("state", "?")), "bold cyan"),
        f"  {_elapsed(data)}  {_where(data)}",
    )
    header = _Header(head, done, len(nodes)) if nodes else head
    lines: list[Any] = [header, Text(waiting_line(data), style="dim")]
    if estimate_line(data):
        lines.append(Text(estimate_line(data), style="dim"))
    requests = [d for d in data.get("decisions", []) if d.get("kind") == "Request"]
    if requests:
        lines.append(Text(f"last request: {requests[-1]['reason']}", style="dim"))
    t = table("node", "batch", "phase", "ready", "backend", "active", "lastKnownGood", "error", prose=("error",),
              box=box.SIMPLE if compact else box.ROUNDED)
    colours = {"active": "green", "promoted": "green", "pending": "dim", "reverted": "yellow"}
    shown = nodes
    if compact and len(nodes) > COMPACT_ROWS:  # the nodes not on target first: what a person waits on
        shown = sorted(nodes, key=lambda n: n["phase"] in ON_TARGET)[:COMPACT_ROWS]
    for n in shown:
        c = colours.get(n["phase"], "red" if n["phase"] in BAD_PHASES else "cyan")
        t.add_row(n["name"], str(n.get("batch") or ""), f"[{c}]{n['phase']}[/{c}]", n.get("ready_condition") or "?",
                  backend_word(n.get("backend"), n.get("writes")), n.get("active", ""), n.get("last_known_good", ""),
                  escape(n.get("error") or ""))
    lock = data.get("lock")
    if lock and not compact:
        lines.append(Text(lock_line(lock), style="dim"))
    analysis = [Text(line) for line in analysis_lines(data.get("analysis") or [])]
    if len(shown) < len(nodes):
        analysis.insert(0, Text(f"... and {len(nodes) - len(shown)} more node(s)", style="dim"))
    return Group(*lines, t, *analysis) if nodes else Group(*lines, *analysis)


def stale_renderable(data: dict[str, Any], read_at: datetime, error: BaseException) -> Any:
    """The last status a live display read, under a line saying since when it could not read
    another and why: a screen redrawn from old data with no word of it showed a run standing still."""
    from rich.console import Group

    from rollout.policy import format_whole_seconds
    from rollout.timefmt import rfc3339_seconds

    age = format_whole_seconds(datetime.now(timezone.utc) - read_at)
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    note = f"shown as read at {rfc3339_seconds(read_at)} ({age} ago): no status read since: {reason}"
    return Group(status_renderable(data, compact=True), Text(note, style="yellow"))


def analysis_lines(analysed: list[dict[str, Any]]) -> list[str]:
    """Each analysed batch and its checks' last measurement (status -o json: "analysis")."""
    lines = []
    for a in analysed:
        lines.append(f"analysis of {a['label']}: {a['verdict'] or 'measuring'}" + (f": {a['reason']}" if a["reason"] else ""))
        for c in a["checks"]:
            last = c["measurements"][-1] if c["measurements"] else None
            said = f"{last['verdict']}: {last['reason']}" if last else "not measured yet"
            dry = " (dry run)" if c["dry_run"] else ""
            lines.append(f"  {c['name']}{dry} `{c['condition']}`: {c['measured']} measured, {c['failed']} failed: {said}")
    return lines


def lock_line(lock: dict[str, Any]) -> str:
    """Who holds the rollout lock, and whether it lives (status -o json: "lock")."""
    if not lock.get("holder"):
        return f"lock: {lock['liveness']}"
    who = (f"rollout {lock['rollout']} (pid {lock['pid']} on host {lock['host']}, run {lock['run']})"
           if lock.get("pid") else str(lock["holder"]))
    return f"lock: {lock['liveness']}, held by {who} since {lock['since']}, renewed {lock['renewed_at']}"
