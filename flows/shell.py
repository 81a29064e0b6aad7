"""PrefectShell: what a flow adds around the core's engine - and nothing else.

The engine (``rollout.engine``) decides and acts; this shell makes it visible in Prefect: one log
line per change of mind (in the operator's words) and per person's request, each batch as a task
run of the flow run (``flows.batch_runs``: the run graph shows the batches, with their nodes and
times), a progress artifact, a table artifact and a Prefect event per finished batch, the approval
gate as a typed ``pause_flow_run``, the deferral of a deployment run to the next maintenance
window, and the final markdown report (its duration counts the time paused at gates, which
Prefect's own run duration leaves out).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.client.schemas.objects import FlowRun
from prefect.context import FlowRunContext

from flows import events
from flows.approval import wait_for_approval
from flows.batch_runs import BatchRuns
from flows.stop import STOP as STOP  # the flows and the CLI take it from here too
from rollout.actions import Action, AwaitApproval, Wait, WaitForWindow
from rollout.analysis import BatchEvidence, check_rows, evidence_event, evidence_lines, evidence_markdown
from rollout.engine import Answer, RunResult
from rollout.journal import ApprovalOutcome, BatchStatus, Journal
from rollout.model import NodeObservation, NodePhase
from rollout.phases import BAD_CONFIG_PHASES, BUDGET_PHASES, NOT_OURS_PHASES
from rollout.ports import EvidenceReader
from rollout.prepare import Prepared
from rollout.report import BatchResult, NodeRow, errors_markdown, final_report, rows_markdown, table_artifact_rows
from rollout.status import node_rows
from rollout.timefmt import human

# nodes a progress report counts as failed: the config's doing, or put back after it
FAILED_PHASES = frozenset({*BAD_CONFIG_PHASES, *BUDGET_PHASES, NodePhase.REVERTING, NodePhase.REVERTED})

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
# decisions a person caused (rollout.machine.requests), logged when they appear in the journal
PERSON_KINDS = ("Request", "Retry")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


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


def tag_flow_run(**labels: str) -> None:
    """Tag the current flow run ``rollout:NAME``, ``policy:NAME``, ``config:NAME``, so the UI's tag
    filter finds every run of a rollout, of a policy or of a config. Best effort: a tag never stops
    a rollout."""
    from prefect.client.orchestration import get_client

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    tags = sorted(set(ctx.flow_run.tags or ()) | {f"{key}:{value}" for key, value in labels.items() if value})
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(ctx.flow_run.id, tags=tags)
        ctx.flow_run.tags = tags
    except Exception as exc:  # noqa: BLE001 - visibility never stops a rollout
        get_run_logger().debug("tags: %s", exc)


def _at_gates(journal: Journal, started: datetime, finished: datetime) -> timedelta:
    """How long of ``started``..``finished`` the rollout waited for a person at its approval gates."""
    waited = timedelta(0)
    for batch in journal.batches:
        gate = batch.approval
        if gate is not None:
            begin, end = max(gate.requested_at, started), min(gate.decided_at or finished, finished)
            waited += max(end - begin, timedelta(0))
    return waited


def artifact_key(rollout: str, suffix: str) -> str:
    clean = "".join(c if c.isalnum() else "-" for c in rollout.lower()).strip("-") or "rollout"
    return f"{clean}-{suffix}"[:100]


# rollout -> the journal and view of the nodes of its latest decision in this process: what a
# terminal's live display draws (flows.rollout_flow runs in the CLI's process when it has a server)
_LATEST_VIEWS: dict[str, tuple[Journal, Mapping[str, NodeObservation]]] = {}


def latest_view(rollout: str) -> tuple[Journal, Mapping[str, NodeObservation]] | None:
    """The journal and view of the nodes of the latest decision a run of ``rollout`` made in
    this process (None before its first)."""
    return _LATEST_VIEWS.get(rollout)


class PrefectShell:
    """The engine's shell in a flow run. ``flow_params`` lets a deferred run be rescheduled."""

    def __init__(self, name: str, *, prepared: Prepared | None = None, approval_poll_s: int = 2,
                 flow_params: Mapping[str, Any] | None = None, evidence: EvidenceReader | None = None,
                 run_started: datetime | None = None) -> None:
        self.name = name
        _LATEST_VIEWS.pop(name, None)  # a run before this one in the process is not this one's view
        self.evidence = evidence
        self.run_started = run_started  # a rollback reports its own run, not the rollout's lifetime
        self.batch_runs = BatchRuns()
        self.people_seen: int | None = None
        self.prepared = prepared
        self.approval_poll_s = approval_poll_s
        self.flow_params = dict(flow_params or {})
        self.last_line = ""
        self.progress_id: Any = None
        self.results: dict[int, BatchResult] = {}
        self.deferred_to: str = ""
        self.last_progress: dict[str, Any] = {}
        self.last_progress_sent = 0.0
        self.heartbeat_s = events.progress_heartbeat().total_seconds()

    # -- the engine's hooks ----------------------------------------------------------------

    def decided(self, action: Action, journal: Journal, observations: Mapping[str, NodeObservation]) -> None:
        _LATEST_VIEWS[self.name] = (journal, observations)
        line = action.reason if isinstance(action, (Wait, WaitForWindow)) else \
            f"{ACTION_WORDS.get(action.kind, action.kind)}: {action.reason}"
        if line != self.last_line:
            get_run_logger().info(line)
            self.last_line = line
        self._people(journal)
        current = journal.current_batch()
        if current is not None and journal.batches[current].status is BatchStatus.IN_PROGRESS and \
                not journal.rollback_to:
            plan_batch = journal.plan.batches[current]
            self.batch_runs.start(current, plan_batch.name, plan_batch.nodes)
        if not isinstance(action, Wait):
            self._progress(journal)
        else:
            self._progress_event(journal)  # unchanged: sent again each heartbeat, a sign of life

    def _people(self, journal: Journal) -> None:
        """Log each request (pause, promote...) and retry once, as the journal records it."""
        said = [d for d in journal.decisions if d.kind in PERSON_KINDS]
        if self.people_seen is not None:
            for d in said[self.people_seen:]:
                get_run_logger().info("%s: %s", ACTION_WORDS[d.kind], d.reason)
        self.people_seen = len(said)

    def close(self) -> None:
        """The run ended, however it ended: every batch task run still open ends with it."""
        why = "the run was stopped during this batch" if STOP.is_set() else "the run ended during this batch"
        self.batch_runs.close(why)
        _LATEST_VIEWS.pop(self.name, None)  # a process that runs many rollouts keeps no ended run's nodes

    def batch_finished(self, index: int, journal: Journal, observations: Mapping[str, NodeObservation]) -> None:
        succeeded = journal.batches[index].status is BatchStatus.DONE
        result = self._batch_result(journal, observations, index, "succeeded" if succeeded else "failed")
        self.batch_runs.finish(index, result)
        errors = errors_markdown(result.rows)  # in full here: the table's cell has the first clause only
        create_table_artifact(table=table_artifact_rows(result.rows, journal.target),
                              key=artifact_key(self.name, f"batch-{index + 1}"),
                              description=f"Rollout `{self.name}`, batch {result.label}: **{result.outcome}**"
                                          + (f"\n\n{errors}" if errors else ""))
        evidence = self._evidence_of(journal, index)
        payload: dict[str, Any] = {"batch": index + 1, "nodes": result.nodes, "outcome": result.outcome,
                                   "reason": result.reason, "target": str(journal.target)}
        if evidence is not None:
            create_table_artifact(table=check_rows(evidence), key=artifact_key(self.name, f"analysis-{index + 1}"),
                                  description=f"Rollout `{self.name}`, batch {result.label}: "
                                  + "; ".join(evidence_lines(evidence)[:1]))
            payload["analysis"] = evidence_event(evidence)
        events.emit_rollout_event(events.BATCH_SUCCEEDED if succeeded else events.BATCH_FAILED, self.name, payload)
        self._progress(journal)

    def _evidence_of(self, journal: Journal, index: int) -> BatchEvidence | None:
        """The batch's analysis evidence, when it has some (best effort: visibility never stops a rollout)."""
        if self.evidence is None or not journal.plan.policy.analysis.enabled:
            return None
        try:
            loaded = self.evidence.load_evidence(self.name, index)
        except Exception as exc:  # noqa: BLE001 - visibility never stops a rollout
            get_run_logger().debug("analysis evidence: %s", exc)
            return None
        return loaded[0] if loaded else None

    def approve(self, gate: AwaitApproval, journal: Journal) -> Answer:
        nxt = journal.plan.batches[gate.next_batch]
        diff = "\n".join(f"    {d}" for d in (self.prepared.diff if self.prepared else ())[:40]) \
            or "    (no field changes read)"
        done = self.results.get(gate.batch)
        evidence = self._evidence_of(journal, gate.batch)
        title = (f"## Rollout `{self.name}`: the analysis of batch {gate.batch + 1} was inconclusive: go on?"
                 if gate.about_analysis else f"## Rollout `{self.name}`: approve batch {gate.next_batch + 1}?")
        description = "\n".join([
            title, "",
            f"Target: `{journal.target}`  ·  policy `{journal.policy_name}`  ·  answer by "
            f"{human(gate.deadline)}", "",
            "### Evidence", *[f"* {line}" for line in gate.evidence], "",
            rows_markdown(done.rows, journal.target) if done else "", "",
            "### Analysis", "", evidence_markdown(evidence) if evidence else "(no analysis)", "",
            "### Config diff (against a sample of the nodes' running config)", "", diff, "",
            f"### Next: batch {gate.next_batch + 1} ({nxt.size} nodes)", ", ".join(nxt.nodes), "",
            "Answer with **decision** `approve` or `reject` and your name; a comment is recorded too.",
        ])
        timeout = max(1, int((gate.deadline - utcnow()).total_seconds()))
        log = get_run_logger()
        log.info("waiting for approval before batch %d (until %s): rollout approve %s", gate.next_batch + 1,
                 human(gate.deadline), self.name)
        answer = wait_for_approval(key=f"{artifact_key(self.name, 'batch')}-{gate.next_batch + 1}",
                                   description=description, timeout_s=timeout, poll_interval_s=self.approval_poll_s,
                                   stop=STOP)
        log.info("approval before batch %d: %s", gate.next_batch + 1, answer.summary)
        if answer.timed_out or answer.stopped:  # a stopped run records no answer (the engine sees the stop)
            return Answer(ApprovalOutcome.TIMED_OUT, by="timeout")
        outcome = ApprovalOutcome.APPROVED if answer.approved else ApprovalOutcome.REJECTED
        return Answer(outcome, by=answer.approver, note=answer.comment)

    def defer(self, wait: WaitForWindow, journal: Journal) -> bool:
        """On a deployment: schedule a run of the same deployment (same rollout name: it resumes
        from the journal) at the window and end this one, so no worker is held. Locally: wait."""
        ctx = FlowRunContext.get()
        run = ctx.flow_run if ctx else None
        deployment_id = getattr(run, "deployment_id", None) if run else None
        if run is None or deployment_id is None:
            return False
        from prefect.deployments import run_deployment

        # the same tags: a fleet finds a cluster's runs (this one's continuation too) by them
        scheduled = run_deployment(deployment_id, parameters=self.flow_params, scheduled_time=wait.until,
                                   timeout=0, as_subflow=False, tags=list(run.tags or ()))
        assert isinstance(scheduled, FlowRun)  # called outside an event loop, it answers at once
        self.deferred_to = str(scheduled.id)
        get_run_logger().info("deferred: flow run %s continues the rollout at %s", scheduled.name,
                              human(wait.until))
        return True

    # -- reports ---------------------------------------------------------------------------

    def report(self, result: RunResult, *, outcome: str, message: str) -> str:
        journal = result.journal
        # every node's row and verdict once (per batch and again for the whole took a second at
        # 5,000 nodes, after the last node was done)
        every = node_rows(journal, result.observations, utcnow(), watched_since=result.watched_since)
        row_of = {row.node: row for row, _ in every}
        batches = []
        for i, b in enumerate(journal.plan.batches):
            status = journal.batches[i].status.value
            label = {"done": "succeeded", "failed": "failed", "in-progress": "in progress"}.get(status, "not started")
            if any(journal.nodes[n].reverting for n in b.nodes):
                label += ", reverted"
            batches.append(self._batch_result(journal, result.observations, i, label,
                                              rows=[row_of[n] for n in b.nodes]))
        decisions = [f"{d.at.strftime('%H:%M:%S')} {ACTION_WORDS.get(d.kind, d.kind)}: {d.reason}"
                     for d in journal.decisions]
        started = self.run_started or journal.created_at
        finished = utcnow() if self.run_started else journal.finished_at or utcnow()
        text = final_report(rollout=self.name, outcome=outcome, message=message, target=journal.target,
                            policy=journal.policy_name, batches=batches, decisions=decisions,
                            started=started, finished=finished, waited=_at_gates(journal, started, finished),
                            what="Rollback of" if self.run_started else "Rollout")
        text += approvals_markdown(journal)
        analyses = [e for i in range(len(journal.batches)) if (e := self._evidence_of(journal, i)) is not None]
        if analyses:
            text += "\n\n## Analysis\n\n" + "\n\n".join(evidence_markdown(e) for e in analyses) + "\n"
        skipped = {n: r.skipped for n, r in journal.nodes.items() if r.skipped}
        if skipped:
            text += "\n\n### Skipped (down when their batch started)\n\n" + "\n".join(
                f"* `{n}`: {why}" for n, why in sorted(skipped.items()))
        not_ours = {row.node: f"{verdict.phase.value}: {verdict.reason}"
                    for row, verdict in every if verdict.phase in NOT_OURS_PHASES}
        if not_ours:
            text += "\n\n### Not counted (gone, or failed on their own before their write)\n\n" + "\n".join(
                f"* `{n}`: {why}" for n, why in sorted(not_ours.items()))
        create_markdown_artifact(markdown=text, key=artifact_key(self.name, "report"),
                                 description=f"Rollout `{self.name}`: {outcome}")
        return text

    def _progress_event(self, journal: Journal) -> None:
        """Where the rollout stands, as a fleet shows it (a Prefect event): when it changed, and at
        least every heartbeat (``events.progress_heartbeat``): a fleet tells a live run from a dead one by it."""
        on_target = sum(1 for r in journal.nodes.values() if r.phase in (NodePhase.ACTIVE, NodePhase.PROMOTED))
        failed = sum(1 for r in journal.nodes.values() if r.phase in FAILED_PHASES)
        current = journal.current_batch()
        payload = {"state": journal.shown_status, "batch": len(journal.batches) if current is None else current + 1,
                   "batches": len(journal.batches), "nodes": len(journal.plan.nodes), "done": on_target,
                   "failed": failed}
        now = time.monotonic()
        if payload != self.last_progress or now - self.last_progress_sent >= self.heartbeat_s:
            self.last_progress, self.last_progress_sent = payload, now
            events.emit_rollout_event(events.ROLLOUT_PROGRESS, self.name, payload)

    def _batch_result(self, journal: Journal, observations: Mapping[str, NodeObservation], index: int,
                      outcome: str, rows: list[NodeRow] | None = None) -> BatchResult:
        batch = journal.plan.batches[index]
        if rows is None:
            rows = [row for row, _ in node_rows(journal, observations, utcnow(), list(batch.nodes))]
        reason = journal.failure_reason if outcome.startswith("failed") else ""
        result = BatchResult(index=index, label=batch.name, nodes=list(batch.nodes), outcome=outcome,
                             reason=reason, rows=rows)
        self.results[index] = result
        return result

    def _progress(self, journal: Journal) -> None:
        planned = list(journal.plan.nodes)
        settled = (NodePhase.ACTIVE, NodePhase.PROMOTED, NodePhase.REVERTED, NodePhase.GONE)
        done = sum(1 for n in planned if journal.nodes[n].phase in settled)
        fraction = 100.0 if not planned else round(100.0 * done / len(planned), 1)
        self._progress_event(journal)
        try:
            if self.progress_id is None:
                self.progress_id = create_progress_artifact(
                    progress=fraction, key=artifact_key(self.name, "progress"),
                    description=f"Nodes of rollout `{self.name}` settled")
            else:
                update_progress_artifact(self.progress_id, progress=fraction)
        except Exception as exc:  # noqa: BLE001 - visibility never stops a rollout
            get_run_logger().debug("progress artifact: %s", exc)
