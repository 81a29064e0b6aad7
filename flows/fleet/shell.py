"""What the fleet flow adds around the fleet's decisions: logs, the clusters table, gates, report.

One log line per change of mind; the clusters table (cluster x stage, phase, batch, nodes
done/failed, flow run) as a Prefect table artifact whenever a row changes; the approval gate
between stages as a typed pause whose description carries each cluster's evidence; a Prefect
event when a stage starts and when the fleet ends; the final markdown report.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows import events
from flows.approval import wait_for_approval
from flows.shell import STOP, artifact_key, utcnow
from rollout.fleet import (
    AskApproval,
    FleetAction,
    FleetJournal,
    FleetPlan,
    Observed,
    StartClusters,
    evidence,
    table_rows,
)
from rollout.journal import ApprovalOutcome
from rollout.outcome import Outcome
from rollout.timefmt import human


def fleet_key(rollout: str, suffix: str) -> str:
    return artifact_key(f"fleet-{rollout}", suffix)


class FleetShell:
    def __init__(self, rollout: str, plan: FleetPlan, *, approval_poll_s: int = 2) -> None:
        self.rollout = rollout
        self.plan = plan
        self.approval_poll_s = approval_poll_s
        self.last_line = ""
        self.last_rows: list[dict[str, str]] = []
        self.stages_started: set[int] = set()

    def show(self, action: FleetAction, observed: Observed) -> None:
        if action.reason != self.last_line:
            get_run_logger().info(action.reason)
            self.last_line = action.reason
        if isinstance(action, StartClusters) and action.stage not in self.stages_started:
            self.stages_started.add(action.stage)
            stage = self.plan.stages[action.stage]
            events.emit_fleet_event(events.FLEET_STAGE_STARTED, self.rollout, {
                "stage": stage.index, "name": stage.label, "clusters": list(stage.clusters)})
        self.table(observed)

    def table(self, observed: Observed) -> None:
        rows = table_rows(self.plan, observed)
        if rows == self.last_rows:
            return
        self.last_rows = rows
        try:
            create_table_artifact(table=rows, key=fleet_key(self.rollout, "clusters"),
                                  description=f"Fleet rollout `{self.rollout}`: the clusters")
        except Exception as exc:  # noqa: BLE001 - visibility never stops a rollout
            get_run_logger().debug("table artifact: %s", exc)

    def approve(self, gate: AskApproval, observed: Observed) -> tuple[ApprovalOutcome, str, str] | None:
        """Ask a person; None when the fleet was stopped while the gate waited (asked again next run)."""
        done, nxt = self.plan.stages[gate.stage], self.plan.stages[gate.next_stage]
        description = "\n".join([
            f"## Fleet rollout `{self.rollout}`: start {nxt.label}?", "",
            f"Answer by {human(gate.deadline)}. On a rejection the fleet does what approval.onReject says "
            f"({self.plan.approval.on_reject.value}); its failure action is {self.plan.failure_action.value}.", "",
            f"### Evidence: {done.label}", *[f"* {line}" for line in evidence(self.plan, done, observed)], "",
            f"### Next: {nxt.label}", ", ".join(f"`{c}` ({self.plan.clusters[c].work_pool})" for c in nxt.clusters), "",
            "Answer with **decision** `approve` or `reject` and your name; a comment is recorded too.",
        ])
        log = get_run_logger()
        log.info("waiting for approval before %s (until %s): rollout fleet approve %s", nxt.label,
                 human(gate.deadline), self.rollout)
        timeout = max(1, int((gate.deadline - utcnow()).total_seconds()))
        answer = wait_for_approval(key=fleet_key(self.rollout, f"stage-{gate.next_stage}"), description=description,
                                   timeout_s=timeout, poll_interval_s=self.approval_poll_s, stop=STOP)
        log.info("approval before %s: %s", nxt.label, answer.summary)
        if answer.stopped:
            return None
        if answer.timed_out:
            return ApprovalOutcome.TIMED_OUT, "timeout", ""
        return (ApprovalOutcome.APPROVED if answer.approved else ApprovalOutcome.REJECTED), answer.approver, answer.comment

    def report(self, journal: FleetJournal, observed: Observed) -> str:
        """The final report (a markdown artifact) and the fleet's last event."""
        outcome = journal.outcome or Outcome.FAILED
        rows = table_rows(self.plan, observed)
        header = "| " + " | ".join(rows[0]) + " |\n|" + "---|" * len(rows[0]) if rows else ""
        lines = [f"| {' | '.join(str(v).replace('|', '/') for v in row.values())} |" for row in rows]
        gates = [f"* after {self.plan.stages[s].label}: {g.outcome.value if g.outcome else 'unanswered'}"
                 + (f" by {g.by}" if g.by and g.outcome is not ApprovalOutcome.TIMED_OUT else "")
                 + (f" at {human(g.decided_at)}" if g.decided_at else "") + (f": {g.note}" if g.note else "")
                 for s, g in sorted(journal.gates.items())]
        text = "\n".join([f"# Fleet rollout `{self.rollout}`: {outcome.value}", "", journal.message, "",
                          header, *lines, *(["", "## Approvals", "", *gates] if gates else [])])
        try:
            create_markdown_artifact(markdown=text, key=fleet_key(self.rollout, "report"),
                                     description=f"Fleet rollout `{self.rollout}`: {outcome.value}")
        except Exception as exc:  # noqa: BLE001 - visibility never stops a rollout
            get_run_logger().debug("report artifact: %s", exc)
        payload: dict[str, Any] = {"outcome": outcome.value, "message": journal.message,
                                   "clusters": {row["cluster"]: row["phase"] for row in rows}}
        events.emit_fleet_event(events.FLEET_COMPLETED if outcome.ok else events.FLEET_HALTED, self.rollout, payload)
        return text
