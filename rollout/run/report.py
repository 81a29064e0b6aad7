"""How a run ended, in words and in a report: pure functions of the run's result.

Every screen takes the end from here: the terminal (``rollout start`` prints the report and one
line), ``-o json`` (the message and the nodes), and the Prefect flow run, which only publishes what
this builds (its final artifact, its state's message, a batch's table artifact).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from rollout.analysis import BatchEvidence, evidence_markdown
from rollout.journal import ApprovalOutcome, Journal
from rollout.loop.engine import RunResult
from rollout.model import NodeObservation
from rollout.outcome import Outcome
from rollout.machine.phases import NOT_OURS_PHASES
from rollout.report import BatchResult, NodeRow, final_report
from rollout.usecases.status import node_rows
from rollout.timefmt import human

# a decision's kind in the words of a log line
ACTION_WORDS = {
    "AssignBatch": "assigning",
    "RevertNodes": "reverting",
    "AwaitApproval": "approval needed",
    "Halt": "stopping",
    "Complete": "done",
    "RollbackDone": "rollback done",
    "Request": "request",
    "Retry": "retry",
}
DETAILED_NODES = 10  # failed nodes named with their reason in an ending's message


@dataclass(frozen=True)
class Ending:
    """How a run ended: its outcome, the message that says why, the nodes it names (failed, or
    rolled back)."""

    outcome: Outcome
    message: str
    nodes: tuple[str, ...] = ()


def ending(result: RunResult, *, rollback: bool) -> Ending:
    """The outcome and the message of a run's end (a rollback that left nodes behind failed)."""
    failed = sorted(result.failed.items())
    details = "; ".join(f"{node}: {why}" for node, why in failed[:DETAILED_NODES])
    if result.outcome in (Outcome.STOPPED, Outcome.DEFERRED):
        return Ending(result.outcome, result.message)
    if rollback:
        if result.outcome is Outcome.ROLLED_BACK:
            return Ending(Outcome.ROLLED_BACK, result.message, tuple(sorted(result.journal.reverting_nodes())))
        return Ending(Outcome.FAILED, f"{result.message}; did not converge: {details}", tuple(n for n, _ in failed))
    if result.outcome is Outcome.COMPLETED:
        return Ending(Outcome.COMPLETED, result.message)
    message = result.message + (f" ({details})" if details and details not in result.message else "")
    return Ending(result.outcome, message, tuple(n for n, _ in failed))


def batch_label(journal: Journal, index: int) -> str:
    """A batch's outcome in the report's words."""
    status = journal.batches[index].status.value
    label = {"done": "succeeded", "failed": "failed", "in-progress": "in progress"}.get(status, "not started")
    if any(journal.nodes[n].reverting for n in journal.plan.batches[index].nodes):
        label += ", reverted"
    return label


def batch_result(journal: Journal, observations: Mapping[str, NodeObservation], index: int, outcome: str,
                 now: datetime, rows: Sequence[NodeRow] | None = None) -> BatchResult:
    """A batch's nodes, their rows and why it failed (when it did)."""
    batch = journal.plan.batches[index]
    if rows is None:
        rows = [row for row, _ in node_rows(journal, observations, now, list(batch.nodes))]
    reason = journal.failure_reason if outcome.startswith("failed") else ""
    return BatchResult(index=index, label=batch.name, nodes=list(batch.nodes), outcome=outcome, reason=reason,
                       rows=list(rows))


def approvals_markdown(journal: Journal) -> str:
    """Who answered each approval gate, when, and why: the report is the rollout's record."""
    lines = []
    for index, batch in enumerate(journal.batches):
        gate = batch.approval
        if gate is None or gate.outcome is None:
            continue
        when = f" at {human(gate.decided_at)}" if gate.decided_at else ""
        who = f" by {gate.by}" if gate.by and gate.outcome is not ApprovalOutcome.TIMED_OUT else ""
        note = f": {gate.note}" if gate.note else ""
        lines.append(f"* after batch {index + 1}: {gate.outcome.value}{who}{when}{note}")
    return "\n\n## Approvals\n\n" + "\n".join(lines) + "\n" if lines else ""


def waited_at_gates(journal: Journal, started: datetime, finished: datetime) -> timedelta:
    """How long of ``started``..``finished`` the rollout waited for a person at its approval gates."""
    waited = timedelta(0)
    for batch in journal.batches:
        gate = batch.approval
        if gate is not None:
            begin, end = max(gate.requested_at, started), min(gate.decided_at or finished, finished)
            waited += max(end - begin, timedelta(0))
    return waited


def run_report(result: RunResult, end: Ending, *, now: datetime, evidence: Mapping[int, BatchEvidence],
               rollback_began: datetime | None = None) -> str:
    """The run's final report (markdown): its outcome and why, each batch and its nodes, every
    decision, who answered each gate, the analysis, the nodes skipped or not counted. A rollback
    (``rollback_began``) reports its own run, not the rollout's lifetime."""
    journal = result.journal
    # every node's row and verdict once, judged as the decisions were (``watched_since``)
    every = node_rows(journal, result.observations, now, watched_since=result.watched_since)
    row_of = {row.node: row for row, _ in every}
    batches = [batch_result(journal, result.observations, i, batch_label(journal, i), now,
                            rows=[row_of[n] for n in b.nodes]) for i, b in enumerate(journal.plan.batches)]
    decisions = [f"{d.at.strftime('%H:%M:%S')} {ACTION_WORDS.get(d.kind, d.kind)}: {d.reason}"
                 for d in journal.decisions]
    started = rollback_began or journal.created_at
    finished = now if rollback_began else journal.finished_at or now
    text = final_report(rollout=journal.rollout, outcome=end.outcome.value, message=end.message,
                        target=journal.target, policy=journal.policy_name, batches=batches, decisions=decisions,
                        started=started, finished=finished, waited=waited_at_gates(journal, started, finished),
                        what="Rollback of" if rollback_began else "Rollout")
    text += approvals_markdown(journal)
    analysed = [evidence[i] for i in sorted(evidence)]
    if analysed:
        text += "\n\n## Analysis\n\n" + "\n\n".join(evidence_markdown(e) for e in analysed) + "\n"
    skipped = {n: r.skipped for n, r in journal.nodes.items() if r.skipped}
    if skipped:
        text += "\n\n### Skipped (down when their batch started)\n\n" + "\n".join(
            f"* `{n}`: {why}" for n, why in sorted(skipped.items()))
    not_ours = {row.node: f"{verdict.phase.value}: {verdict.reason}"
                for row, verdict in every if verdict.phase in NOT_OURS_PHASES}
    if not_ours:
        text += "\n\n### Not counted (gone, or failed on their own before their write)\n\n" + "\n".join(
            f"* `{n}`: {why}" for n, why in sorted(not_ours.items()))
    return text


__all__ = ["ACTION_WORDS", "Ending", "approvals_markdown", "batch_label", "batch_result", "ending", "run_report",
           "waited_at_gates"]
