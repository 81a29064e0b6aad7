"""What a rollout shows: per-node rows, per-batch tables and the final markdown report.

Pure rendering over the core's values (observations, phases, batches); the flows turn the results
into Prefect artifacts and the CLI into rich tables / JSON. Nothing here decides anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Sequence

from rollout.model import ConfigRef, NodeObservation
from rollout.names import ANN_ASSIGNED_AT, ANN_BATCH
from rollout.machine.phases import SETTLED_PHASES
from rollout.policy.durations import format_whole_seconds
from rollout.timefmt import human, parse_rfc3339


def short_ref(ref: ConfigRef | None) -> str:
    if ref is None:
        return "local"
    rv = f"@{ref.resource_version}" if ref.resource_version else ""
    return f"{ref.name}{rv}"


@dataclass(frozen=True)
class NodeRow:
    node: str
    batch: str
    phase: str
    ready: str
    assigned: str
    active: str
    last_known_good: str
    error: str
    assigned_at: str = ""
    converged_at: str = ""
    seconds: float | None = None
    backend: str = ""
    writes: str = ""  # the agent's file: "drop-in" or "main-file" ("" when not said)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def node_row(
    obs: NodeObservation,
    phase: str,
    *,
    batch: str = "",
    converged_at: datetime | None = None,
) -> NodeRow:
    assigned_at = obs.annotations.get(ANN_ASSIGNED_AT, "")
    seconds = None
    if converged_at and assigned_at:
        try:
            seconds = round((converged_at - parse_rfc3339(assigned_at)).total_seconds(), 1)
        except ValueError:
            seconds = None
    return NodeRow(
        node=obs.name,
        batch=batch or obs.annotations.get(ANN_BATCH, ""),
        phase=phase,
        ready=obs.ready or "?",
        assigned=short_ref(obs.assigned) if obs.has_config_status else short_ref(obs.spec_source),
        active=short_ref(obs.active),
        last_known_good=short_ref(obs.last_known_good),
        error=obs.error,
        assigned_at=assigned_at,
        converged_at=converged_at.isoformat() if converged_at else "",
        seconds=seconds,
        backend=obs.backend,
        writes=obs.writes,
    )


@dataclass
class BatchResult:
    index: int
    label: str
    nodes: list[str]
    outcome: str  # succeeded | failed | reverted | skipped | pending
    reason: str = ""
    rows: list[NodeRow] = field(default_factory=list)


def running_word(ref_text: str, target: ConfigRef | None) -> str:
    """A node's config as a report cell: ``target`` when it is the rollout's (named in the heading),
    else its name (``local``: the kubelet's own --config). Keeps the tables narrow enough for the
    Prefect UI, which clips a wide table instead of wrapping it."""
    if target is not None and ref_text.split("@")[0] == target.name:
        return "target"
    return ref_text


def backend_word(backend: str | None, writes: str | None) -> str:
    """How config reaches a node, as every table shows it: ``dkc``, ``agent/drop-in`` or
    ``agent/main-file`` (the file the node agent writes)."""
    return "/".join(filter(None, (backend, writes)))


def rows_markdown(rows: Iterable[NodeRow], target: ConfigRef | None = None) -> str:
    """A batch's nodes as a markdown table, then each error in full below it (an error in a cell
    was cut, at its key part: ``kubelet cgroup driver: "s``)."""
    rows = list(rows)
    head = "| node | phase | ready | active | lastKnownGood | seconds | backend |\n|---|---|---|---|---|---|---|"
    body = [
        f"| {r.node} | {r.phase} | {r.ready} | {running_word(r.active, target)} | "
        f"{running_word(r.last_known_good, target)} | {'' if r.seconds is None else r.seconds} | "
        f"{backend_word(r.backend, r.writes)} |"
        for r in rows
    ]
    errors = errors_markdown(rows)
    return "\n".join([head, *body]) + ("\n\n" + errors if errors else "")


def errors_markdown(rows: Iterable[NodeRow]) -> str:
    """Each node's error in full, a bullet each: below a table, never in a cell (a cell was cut at
    its key part, ``kubelet cgroup driver: "s``, and the Prefect UI clips a wide one)."""
    return "\n".join(f"* `{r.node}`: {_cell(r.error)}" for r in rows if r.error)


def error_word(error: str) -> str:
    """An error's first clause (``crash-looping``), for a table cell; the whole text goes with the table."""
    return error.split(":", 1)[0].strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def final_report(
    *,
    rollout: str,
    outcome: str,
    message: str,
    target: ConfigRef | None,
    policy: str,
    batches: Sequence[BatchResult],
    decisions: Sequence[str] = (),
    started: datetime | None = None,
    finished: datetime | None = None,
    waited: timedelta = timedelta(0),
    what: str = "Rollout",
) -> str:
    """The run's markdown report: outcome, target, one section per batch in plan order.

    ``waited``: how long of ``started``..``finished`` the run waited at approval gates (Prefect
    counts a paused run's time out of its duration; the report counts it, and says how much).
    Plain text in the heading: an emoji renders as a missing glyph with many fonts."""
    lines = [
        f"# {what} `{rollout}`: {outcome}",
        "",
        message,
        "",
        f"* config: `{target}`" if target else "* config: (none)",
        f"* policy: `{policy}`",
    ]
    if started and finished:
        took = format_whole_seconds(finished - started)
        gates = format_whole_seconds(waited)
        paused = f" ({gates} of it waiting at approval gates, which Prefect's run duration leaves out)" \
            if waited >= timedelta(seconds=1) else ""
        lines.append(f"* duration: {took}{paused}, from {human(started)} to {human(finished)}")
    lines.append(f"* batches: {len(batches)}")
    lines.append("")
    lines.append("| # | batch | nodes | outcome |\n|---|---|---|---|")
    for b in batches:
        lines.append(f"| {b.index + 1} | {b.label} | {named(b.nodes)} | {b.outcome} |")
    for b in batches:
        if b.rows:
            lines.append("")
            lines.append(f"## Batch {b.label}: {b.outcome}")
            if b.reason:
                lines.append(f"> {b.reason}")
            lines.append("")
            lines.append(_batch_rows_markdown(b.rows, target))
    if decisions:
        lines.append("")
        lines.append("## Decisions")
        lines.extend(f"1. {d}" for d in decisions)
    return "\n".join(lines) + "\n"


# a person is shown this many of a batch's nodes by name (the report, the batch's log), the nodes
# that did not land first, and a count of the rest (every node is in the batch's table artifact): a
# 20,000-node report of a row per node took seconds to draw on a terminal after the last node was done
SHOWN_NODES = 20
_SETTLED = frozenset(phase.value for phase in SETTLED_PHASES)


def landed(row: NodeRow) -> bool:
    """The node runs the config, settled (active or promoted), with no error."""
    return row.phase in _SETTLED and not row.error


def named(nodes: Sequence[str]) -> str:
    """The first :data:`SHOWN_NODES` names, and how many more."""
    more = f" and {len(nodes) - SHOWN_NODES} more" if len(nodes) > SHOWN_NODES else ""
    return ", ".join(nodes[:SHOWN_NODES]) + more


def _batch_rows_markdown(rows: Sequence[NodeRow], target: ConfigRef | None) -> str:
    if len(rows) <= SHOWN_NODES:
        return rows_markdown(rows, target)
    trouble = [r for r in rows if not landed(r)]
    landed_count = len(rows) - len(trouble)
    summary = f"{landed_count} of {len(rows)} node(s) active or promoted; each node is in the batch's table artifact."
    return summary + ("\n\n" + rows_markdown(trouble, target) if trouble else "")


def table_artifact_rows(rows: Iterable[NodeRow], target: ConfigRef | None = None) -> list[dict[str, Any]]:
    """A batch's table artifact: a column per fact, none wider than it must be (the Prefect UI
    clips a table wider than its page): the config as ``target`` when it is the rollout's, the
    assignment's time of day (its date is the run's), seconds to converge, and the error's first
    clause (the artifact's description has each error in full: :func:`errors_markdown`)."""
    return [
        {
            "node": r.node,
            "phase": r.phase,
            "ready": r.ready,
            "active": running_word(r.active, target),
            "lastKnownGood": running_word(r.last_known_good, target),
            "assigned": _time_of_day(r.assigned_at),
            "seconds": r.seconds,
            "backend": backend_word(r.backend, r.writes),
            "error": error_word(r.error),
        }
        for r in rows
    ]


def _time_of_day(stamp: str) -> str:
    try:
        return parse_rfc3339(stamp).strftime("%H:%M:%S") if stamp else ""
    except ValueError:
        return stamp
